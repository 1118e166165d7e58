"""Every setting declares its role where it is defined (core/roles.py), and every door derives its rules from it.

Issue 63: the reader of handed-over settings knew what to refuse from lists kept apart from the settings (NOT_READ,
OUTPUT_LEAVES, PROTECTIVE_CALLBACKS, TRAINER_SWITCHES), so a key added for a new capability (eval.lm_eval_include,
eval.generate) was read as plain data: a stranger's parent ran code, chose which of the user's files a branch read,
and switched protections off by value. Each case below failed on b06c907.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
import yaml

from degen_train.config.handed_over import Door, HandedOverError, read_config_file, read_overrides_file
from degen_train.config.house_keys import house_keys, schema_fields
from degen_train.config.role_lookup import declared_keys, group_role, role_counts, role_of
from degen_train.core import roles
from degen_train.core.roles import DOOR, Declared, Role


def leaves() -> list[str]:
    return declared_keys()


def test_every_schema_field_and_conf_key_declares_a_role() -> None:
    missing = [key for key in leaves() if role_of(key) is None]
    assert not missing, (f"declare a role on the field of the section that holds it (config/schema.py or the "
                         f"component's section.py) for: {missing}")
    assert set(DOOR) == set(Role)  # every role says what a handed-over file may do with it


def test_the_manuals_table_counts_every_role() -> None:
    """docs/runs.md's table of roles states each role's count as the manual is built: the count the code declares,
    generated (issue 70.4: a new term's options changed a hand-typed 158 to 161 before)."""
    import re

    from degen_train.cli.manual_tables import render

    page = render((Path(__file__).parents[2] / "docs" / "runs.md").read_text(encoding="utf-8"))
    stated = {Role(m.group(1)): int(m.group(2)) for m in re.finditer(r"^\| (\w+) \| [^|]+ \| (\d+) \|", page, re.M)}
    assert stated == role_counts()


def test_a_schema_field_is_declared_once() -> None:
    """A setting's role is its field's annotation, and nothing else names one (issue 70.3: CONF_ROLES and GROUP_ROLES,
    lists beside the definitions, are gone)."""
    assert not [name for name in vars(roles) if name.endswith("_ROLES")]
    for key, info in schema_fields().items():
        assert sum(isinstance(m, Declared) for m in info.metadata) == 1, key


def test_a_terms_option_that_loads_a_file_declares_its_role_in_its_own_annotation() -> None:
    """TaCL's ``teacher: Annotated[str | None, INPUT]`` in its constructor is the one place its role is said: the
    lookup reads it from the term's declaration (its file's text), under the term's name and any other (a section's
    ``term:`` is not in its key); every other option is what the run trains."""
    from degen_train.losses.declarations import declared_terms

    declared = {(term.section, term.name, option.name): term.role(option.name) for term in declared_terms().values()
                for option in term.options}  # fmt: skip
    inputs = {key for key, role in declared.items() if role is not None and role.role == Role.INPUT}
    assert ("regularizer", "tacl", "teacher") in inputs
    for section, name, option in inputs:
        assert role_of(f"{section}.{name}.{option}").role == Role.INPUT
        assert role_of(f"{section}.any_name.{option}").role == Role.INPUT  # a term's section under another name
    assert role_of("regularizer.tacl.temperature").role == Role.TRAINS
    assert all(role is None for key, role in declared.items() if key not in inputs)


def test_every_count_a_run_measures_has_a_bound() -> None:
    """So a handed-over eval.generate_prompts=10**9 is refused: each integer measure states its upper bound."""
    unbounded = []
    for key in leaves():
        declared = role_of(key)
        if declared.role != Role.MEASURES:
            continue
        info = schema_fields().get(key)
        if info is not None:
            ints = int in typing.get_args(info.annotation) or info.annotation is int
            bounded = declared.at_most is not None or any(hasattr(m, "le") or hasattr(m, "lt") or
                                                          hasattr(m, "max_length") for m in info.metadata)
            if ints and not bounded:
                unbounded.append(key)
        elif "int" in house_keys()[key].kinds and declared.at_most is None:
            unbounded.append(key)
    assert not unbounded, unbounded


def test_every_group_declares_a_role() -> None:
    from degen_train.config.house_keys import house_groups

    assert not [group for group in house_groups() if group_role(group) is None]



def test_every_target_the_house_builds_is_declared_by_its_section() -> None:
    """Issue 70.1: a ``_target_`` conf/ names is a typed field whose allowed classes its section declares
    (section.Instantiated.builds): each yaml's code target is one its section declares, and each declared one exists
    (located as Hydra locates it)."""
    from hydra._internal.utils import _locate

    from degen_train.config.role_lookup import house_targets

    code_targets = {key: known.values for key, known in house_keys().items()
                    if key.endswith("._target_") and role_of(key).role == Role.CODE}  # fmt: skip
    assert "optimizer._target_" in code_targets and "callbacks.checkpoint._target_" in code_targets
    for key, names in code_targets.items():
        assert names <= set(house_targets(key)), f"{key}: {sorted(names)} is not what its section declares"
        for name in house_targets(key):
            assert callable(_locate(name)), name


def test_a_records_target_is_held_to_what_its_section_declares(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The section's declaration decides, not the yaml: with Muon's builder no longer declared by the optimizer's
    section, a record naming it is refused though conf/optimizer/muon.yaml still names it."""
    from degen_train.optim.section import OptimizerConfig

    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(["optimizer._target_=degen_train.optim.muon.build_muon"]))
    assert [s.override() for s in read_overrides_file(path).settings] == [
        "optimizer._target_='degen_train.optim.muon.build_muon'"]
    monkeypatch.setattr(OptimizerConfig, "builds", ("degen_train.optim.optimizer.build_optimizer",))
    with pytest.raises(HandedOverError, match="_target_ 'degen_train.optim.muon.build_muon' at optimizer._target_"):
        read_overrides_file(path)
    path.write_text(json.dumps(["callbacks.progress_bar._target_=degen_train.callbacks.throughput.Throughput"]))
    with pytest.raises(HandedOverError, match="never build there"):  # the house's class, at another section
        read_overrides_file(path)

# One setting of each role, a value a stranger's file might give it, and what each door must do with it:
# "carried", "left out", "refused" (with the words the refusal must hold).
ROLE_CASES = [
    ("trains", "optimizer.lr", 0.003, "carried", ""),
    ("measures", "eval.generate_prompts", 50, "carried", ""),
    ("measures", "eval.generate_prompts", 10**9, "refused", "less than or equal to 10000"),  # the schema's bound
    ("measures", "eval.finetune.epochs", 10**6, "refused", "past the bound of what a run measures"),  # declared
    ("presentation", "trainer.log_every_n_steps", 5, "carried", ""),
    ("output", "callbacks.checkpoint.dirpath", "/elsewhere/ckpts", "left out", ""),
    ("launch", "trainer.devices", 2, "left out", ""),
    ("input", "eval.generate", "/home/me/secret.txt", "refused", "never chooses what a run reads: give it on your own "
                                                                 "command line (eval.generate=...)"),
    ("input", "eval.sts", ["/home/me/sts.csv"], "refused", "(role: input)"),
    ("code", "eval.lm_eval_include", "/tmp/tasks", "refused", "never chooses code a run hands to a library"),
    ("protection", "callbacks.checkpoint.every_n_train_steps", 50, "carried", ""),
    ("protection", "callbacks.checkpoint.every_n_train_steps", 10**6, "refused", "would loosen the run's checkpoints"),
    ("protection", "callbacks.checkpoint.every_n_train_steps", None, "refused", "a number at most 100"),
    ("protection", "callbacks.checkpoint.save_last", False, "refused", "may give only true"),
    ("protection", "callbacks.checkpoint.save_top_k", 0, "refused", "a number at least 2 or -1"),
    ("protection", "callbacks.checkpoint.save_top_k", -1, "carried", ""),
    ("protection", "callbacks.cadence.checkpoint_minutes", 1000000, "refused", "at most 60 or null"),
    # issue 72.6: a minute cadence had no floor: 0.001 minutes is a validation (a checkpoint) after every update
    ("protection", "callbacks.cadence.validation_minutes", 0.001, "refused", "a number at least 1 and at most 60"),
    ("protection", "callbacks.cadence.checkpoint_minutes", 30, "carried", ""),
    ("measures", "callbacks.cadence.isotropy_minutes", 0.001, "refused", "a number at least 1 and at most 1440"),
    ("protection", "callbacks.divergence.on_nonfinite", "skip", "refused", "would loosen the divergence guard"),
    ("protection", "callbacks.divergence.max_skips", 1000000, "refused", "would loosen the divergence guard"),
    ("protection", "callbacks.preemption.requeue", False, "refused", "would loosen the requeue"),
    ("protection", "callbacks.checkpoint.monitor", "val_loss", "refused", "may give only 'step'"),
    ("protection", "trainer.limit_val_batches", 0, "refused", "would loosen the run's validation"),
    ("protection", "trainer.val_check_interval", 1000000, "refused", "would loosen the run's validation"),
    # issue 72.6: null switched periodic validation off; a float is a fraction of an epoch, not "at most 100"
    ("protection", "trainer.val_check_interval", None, "refused", "a whole number at most 100 or 'auto'"),
    ("protection", "trainer.val_check_interval", 0.5, "refused", "would loosen the run's validation"),
    ("protection", "trainer.val_check_interval", 50, "carried", ""),
    # issue 72.6: spike_sigma and spike_window had no bound, so inf (a guard that never fires) passed as "tighter"
    ("protection", "callbacks.divergence.spike_sigma", 1e300, "refused", "would loosen the divergence guard"),
    ("protection", "callbacks.divergence.spike_sigma", 0.01, "refused", "a number at least 2 and at most 10 or null"),
    ("protection", "callbacks.divergence.spike_sigma", 4.0, "carried", ""),
    ("protection", "callbacks.divergence.spike_window", 2, "refused", "would loosen the divergence guard"),
]


def _override_file(tmp_path: Path, key: str, value: object) -> Path:
    from degen_train.config.handed_over import hydra_literal

    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(["seed=3", f"{key}={hydra_literal(value)}"]))
    return path


def _config_file(tmp_path: Path, key: str, value: object) -> Path:
    tree: dict = {"seed": 3}
    node = tree
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _kept(reading, key: str) -> object:  # noqa: ANN001
    for setting in reading.settings:
        if setting.key == key:
            return setting.value
    node = reading.tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return "absent"
        node = node[part]
    return node


DOORS = {  # how each door reads a stranger's folder
    "parent": (_override_file, read_overrides_file, Door(given={"branch_from"}, inherit=("data.",))),
    "record": (_config_file, read_config_file, Door()),
    "sweep": (_config_file, read_config_file, Door(runs=False)),  # degen-report's analyses: they only read
}


@pytest.mark.parametrize("door_name", list(DOORS))
@pytest.mark.parametrize(("role", "key", "value", "outcome", "words"), ROLE_CASES)
def test_every_role_through_every_door(tmp_path: Path, door_name: str, role: str, key: str, value: object,
                                       outcome: str, words: str) -> None:  # fmt: skip
    assert role_of(key).role.value == role
    write, read, door = DOORS[door_name]
    path = write(tmp_path, key, value)
    if door_name == "sweep":  # nothing runs: a protection or a measure is only shown; an input is named aside
        outcome = {"input": "named aside", "protection": "carried"}.get(role, outcome)
        declared_bound = ("eval.finetune.epochs", "callbacks.cadence.isotropy_minutes")
        outcome = "carried" if key in declared_bound else outcome  # a declared bound holds what runs
    if outcome == "refused":
        with pytest.raises(HandedOverError) as refused:
            read(path, door=door)
        said = str(refused.value)
        assert said.startswith(f"{path}: ") and key in said and words in said, said
        return
    reading = read(path, door=door)
    if outcome == "carried":
        assert _kept(reading, key) == value
    elif outcome == "left out":
        assert _kept(reading, key) == "absent" and reading.left_out[key] == value
        assert key in reading.dropped_line()
    else:
        assert _kept(reading, key) == "absent" and reading.inputs == {key: value}


@pytest.mark.parametrize("door_name", list(DOORS))
@pytest.mark.parametrize(("key", "value"), [("data.missing_hint", "fetch it\x1b[2J\rdone"),
                                            ("optimizer.lr", 0.001), ("objective.mlm.pooler", "cls\u202eexe")])
def test_a_carried_string_holds_no_control_or_format_character(tmp_path: Path, door_name: str, key: str,
                                                               value: object) -> None:  # fmt: skip
    """Issue 72.6: a presentation string (data.missing_hint) was carried with raw control characters into an
    override Hydra echoes, and printed as it was; a right-to-left override reads as another value."""
    write, read, door = DOORS[door_name]
    path = write(tmp_path, key, value)
    if not isinstance(value, str):  # the plain value beside them is carried
        assert _kept(read(path, door=door), key) == value
        return
    with pytest.raises(HandedOverError, match=r"holds control or format characters \(shown escaped\)") as refused:
        read(path, door=door)
    said = str(refused.value)
    assert "\x1b" not in said and "\u202e" not in said and ("\\x1b[2J\\r" in said or "\\u202e" in said), said


@pytest.mark.parametrize("door_name", list(DOORS))
@pytest.mark.parametrize(("key", "value", "said"), [
    ("regularizer.cosreg.rows", "rare", "regularizer.cosreg.rows='rare' is not one of all, seen"),
    ("regularizer.tacl.temperature", -1.0, "regularizer.tacl.temperature must be > 0, got -1.0"),
    ("objective.mlm.compiled", "yes", "objective.mlm.compiled='yes': Input should be a valid boolean"),
    ("regularizer.my_cosreg.rows", "rare", "regularizer.my_cosreg.rows='rare' is not one of all, seen"),
    ("regularizer.cosreg.weight", "heavy", "a term's weight is a number"),
    ("regularizer.cosreg.rows", "seen", None),  # what the term allows is carried
    # a term is built from term:, never by Hydra: a _target_ inside is no option of any term (before, it was kept)
    ("objective.mlm._target_", "posix.system", "objective.mlm._target_ is not an option of loss term mlm"),
])  # fmt: skip
def test_a_terms_option_is_read_by_the_terms_own_declaration(tmp_path: Path, door_name: str, key: str, value: object,
                                                             said: str | None) -> None:  # fmt: skip
    """A loss term's option in a handed-over file is checked as the command line checks it: by the annotation in the
    term's file (losses/declarations.py), under any section name; before, a wrong string passed where the house's
    yaml held a string (``rows: rare``) and was refused only by the run built from it."""
    write, read, door = DOORS[door_name]
    path = write(tmp_path, key, value)
    if said is None:
        assert _kept(read(path, door=door), key) == value
        return
    with pytest.raises(HandedOverError) as refused:
        read(path, door=door)
    assert str(refused.value).startswith(f"{path}: ") and said in str(refused.value), str(refused.value)


@pytest.mark.parametrize("tree", [{"seed": 3, "optimizer.lr": 0.5},
                                  {"seed": 3, "callbacks": {"checkpoint.save_last": False}}])
def test_a_records_dotted_key_is_refused(tmp_path: Path, tree: dict) -> None:
    """Issue 72.6 (NR8): a record's top-level dotted key (``optimizer.lr: 0.5``) was carried; degen-train writes its
    sections nested, so a dotted key is no setting it wrote, at any depth."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(HandedOverError, match=r"config\.yaml: the key '(optimizer\.lr|callbacks\.checkpoint\."
                                              r"save_last)' holds a dot, where degen-train writes a config's "
                                              r"sections nested"):  # fmt: skip
        read_config_file(path, door=Door())


@pytest.mark.parametrize("door_name", ["parent", "record"])
def test_an_input_on_the_users_command_line_wins_and_a_trusted_run_passes_its_own(tmp_path: Path,
                                                                                  door_name: str) -> None:  # fmt: skip
    write, read, _ = DOORS[door_name]
    path = write(tmp_path, "eval.generate", "/theirs.txt")
    mine = read(path, door=Door(given={"eval.generate"}))
    assert _kept(mine, "eval.generate") == "absent" and mine.left_out == {"eval.generate": "/theirs.txt"}
    assert _kept(read(path, door=Door(given={"eval"})), "eval.generate") == "absent"  # a section given: the user's
    own = read(path, door=Door(trusted=True))
    assert _kept(own, "eval.generate") == "/theirs.txt" and own.inherited == {"eval.generate": "/theirs.txt"}


def test_a_branch_inherits_its_parents_data_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(["data=text", "data.path=/corpus/train.txt", "data.tokenizer.path=/their/tok"]))
    door = DOORS["parent"][2]
    reading = read_overrides_file(path, door=Door(given={"branch_from", "data.tokenizer.path"}, inherit=door.inherit))
    assert reading.inherited == {"data.path": "/corpus/train.txt"}
    assert [s.override() for s in reading.settings] == ["data=text", "data.path='/corpus/train.txt'"]
    assert reading.left_out == {"data.tokenizer.path": "/their/tok"}  # the branch reads the parent's RUN/tokenizer


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("eval.lm_eval_include=/tmp/evil_tasks", "eval.lm_eval_include=/tmp/evil_tasks is code or templates"),
        ("+callbacks.best_by_sts.sts=/home/me/private.csv", "callbacks.best_by_sts.sts=/home/me/private.csv is a file"),
        ("model.init_from=/home/me/model", "model.init_from=/home/me/model is a file"),
        ("regularizer.tacl.teacher=/home/me/teacher", "regularizer.tacl.teacher=/home/me/teacher is a file"),
        ("+trainer.callbacks=[{_target_:os.system}]", "(role: code)"),
        ("trainer.check_val_every_n_epoch=1000", "would loosen the run's validation"),
        ("callbacks=none_such", "not one of the group's configs"),
        ("+trainer.detect_anomaly_new=true", "not a setting of degen-train"),
    ],
)
def test_the_issues_drills_are_one_line(tmp_path: Path, entry: str, words: str) -> None:
    """Issue 63's drills 1-3 through a parent's overrides: each refused in one line naming the file and entry."""
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(["seed=3", entry]))
    with pytest.raises(HandedOverError, match=None) as refused:
        read_overrides_file(path, door=DOORS["parent"][2])
    assert str(refused.value).startswith(f"{path}: ") and words in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_debug_or_callbacks_group_from_a_file_is_refused_and_hydras_own_left_out(tmp_path: Path) -> None:
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(["callbacks=default", "hydra/job_logging=disabled", "trainer=cpu", "strategy=ddp"]))
    reading = read_overrides_file(path)
    assert [s.override() for s in reading.settings] == ["callbacks=default"]
    assert set(reading.left_out) == {"hydra/job_logging", "trainer", "strategy"}


def test_a_handed_over_value_is_held_to_its_sections_own_validator(tmp_path: Path) -> None:
    """Issue 70.3: the reader validates through the sections themselves (core/section.Section), so a field validator
    holds a handed-over value too: models/section.py refuses a Hub kernel at model.attention, which a check of the
    field's type alone (a str) let through to the run's own check."""
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(["model.attention=kernels-community/flash-attn"]))
    with pytest.raises(HandedOverError, match=r"overrides\.json: model\.attention='kernels-community/flash-attn': "
                                              r"'kernels-community/flash-attn' names a kernel on the Hugging Face Hub"):
        read_overrides_file(path, door=Door())


def test_the_first_refusal_said_is_the_first_in_the_file(tmp_path: Path) -> None:
    """Pydantic visits sections in the schema's order (data before callbacks); the reader says the refusal a reader
    of the file meets first, as the walk it replaced did."""
    evil = {"evil": {"_target_": "os.system"}}
    for tree, said in (({"callbacks": evil, "data": {"path": "/elsewhere"}}, "_target_ 'os.system'"),
                       ({"data": {"path": "/elsewhere"}, "callbacks": evil}, "data.path=/elsewhere")):
        path = tmp_path / "config.yaml"
        path.write_text(yaml.dump(tree, sort_keys=False))
        with pytest.raises(HandedOverError) as refused:
            read_config_file(path, door=Door())
        assert said in str(refused.value), str(refused.value)


def test_a_well_formed_record_is_read_without_looking_a_key_up_from_the_top(tmp_path: Path, monkeypatch) -> None:
    """Issue 70.3: each section judges its own keys by its own fields' roles as pydantic descends; no key of a
    well-formed record is looked up again from the schema's top (role_of)."""
    from degen_train.config import handed_over

    tree = {"seed": 3, "optimizer": {"_target_": "degen_train.optim.optimizer.build_optimizer", "lr": 0.001},
            "callbacks": {"checkpoint": {"_target_": "degen_train.callbacks.checkpoint.RunCheckpoint",
                                           "every_n_train_steps": 50}},
            "objective": {"mlm": {"weight": 1.0}}, "trainer": {"max_steps": 10}}  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    monkeypatch.setattr(handed_over, "role_of", lambda key: pytest.fail(f"role_of({key!r}) walked from the top"))
    assert read_config_file(path, door=Door()).tree == tree


def test_what_leaves_a_runs_result_as_it_is_is_declared_where_the_setting_is(tmp_path: Path) -> None:
    """A finished run rerun with a change that cannot alter what it measured is the same run (config/result_keys.py:
    each setting's ``Declared.leaves_the_result``). Before, a list beside the schema kept these keys and forgot
    data.prefetch and data.num_proc: a rerun with either was refused as a run with other settings."""
    import json

    from degen_train.config import load_config
    from degen_train.config.result_keys import has_no_effect_on_result
    from degen_train.config.schema import validate_config
    from degen_train.run.resume import finished_summary

    the_old_list = ("run_dir", "trainer.default_root_dir", "ckpt_path", "trainer.enable_progress_bar",
                    "trainer.enable_model_summary", "trainer.log_every_n_steps", "logger.wandb.project",
                    "data.num_workers", "data.cache_dir", "callbacks.checkpoint.every_n_train_steps",
                    "callbacks.preemption.requeue", "push_to_hub.repo_id", "allow_slow_precision", "threads",
                    "search.metric")  # fmt: skip
    forgotten = ("data.prefetch", "data.num_proc", "model.activation_checkpointing",
                 "callbacks.checkpoint.background")
    assert [key for key in (*the_old_list, *forgotten) if not has_no_effect_on_result(key)] == []
    changes = ("trainer.devices", "trainer.num_nodes", "strategy._target_", "optimizer.lr", "objective.mlm.weight",
               "trainer.val_check_interval", "data.path", "callbacks.divergence.on_nonfinite",
               "no.such.key")  # fmt: skip
    assert [key for key in changes if has_no_effect_on_result(key)] == []
    settings = validate_config(load_config(["trainer.max_steps=2"])).plain_settings()
    (tmp_path / "summary.json").write_text(json.dumps({"final_step": 2, "config": settings}))
    rerun = {**settings, "data": {**settings["data"], "prefetch": 0, "num_proc": 2}}
    assert finished_summary(tmp_path, rerun)["final_step"] == 2
    with pytest.raises(ValueError, match=r"finished before with other settings \(optimizer.lr: 0.0005 -> 0.01\)"):
        finished_summary(tmp_path, {**settings, "optimizer": {**settings["optimizer"], "lr": 0.01}})
