"""Stage 1 is the config alone (issue 70.2): ``check`` makes each loss term's spec (its class, options and weight,
checked) and builds no module and reads no file; a rule between a term's options is refused there, before any data,
by the term's own ``check_options``. Stage 2 (run/inputs.py: ``read_inputs``) reads what the config names (an
evaluation's file, TaCL's teacher by the term's ``check_inputs``, the checkpoint a run resumes from); stage 4 builds
the terms from the specs."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from degen_train.config import load_config
from degen_train.losses.catalog import TermSpec
from degen_train.run.checks import check
from degen_train.run.inputs import read_inputs

SMALL = ["data.batch_size=8", "data.block_size=64", "model.max_position=128", "data.tokenizer.vocab_size=1000"]


def checked(tmp_path: Path, *overrides: str):  # noqa: ANN201
    return check(load_config([*overrides, *SMALL], run_dir=tmp_path / "run"))


def test_the_check_stage_builds_no_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    original = nn.Module.__init__

    def counted(self: nn.Module, *args: object, **kwargs: object) -> None:
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "__init__", counted)
    plan = checked(tmp_path, "recipe=coco_lm", "model=tiny")  # a generator and a corrective head: modules galore
    assert built == [], f"check() built {built}"
    assert all(isinstance(spec, TermSpec) for spec in plan.terms.values())
    assert plan.weights == {key: spec.weight for key, spec in plan.terms.items()} and plan.data_format == "mlm"
    monkeypatch.setattr(nn.Module, "__init__", original)
    terms = plan.build_terms()  # stage 3's: fresh modules from the specs
    assert sorted(terms) == sorted(plan.terms) and all(isinstance(t, nn.Module) for t in terms.values())


def test_a_terms_rules_between_options_are_refused_at_stage_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"compiled=true makes the head's logits .* chunk_size=512 a chunk"):
        checked(tmp_path, "objective.mlm.compiled=true", "objective.mlm.chunk_size=512")
    with pytest.raises(ValueError, match=r"generator_hidden_fraction not in \(0, 1\]: 1\.5"):
        checked(tmp_path, "recipe=coco_lm", "model=tiny", "objective.coco_clm.generator_hidden_fraction=1.5")


def test_the_check_stage_reads_no_file_the_config_names_and_the_read_stage_refuses_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file access under ``inputs`` is recorded while ``check`` runs (open, stat, a folder's listing): none;
    then ``read_inputs`` refuses each missing input, naming its key."""
    import builtins
    import io
    import os

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "teacher").mkdir()  # neither a run nor a model folder
    named = {
        "teacher": (["recipe=tacl", f"teacher={inputs / 'teacher'}"], r"regularizer\.tacl\.teacher=.* is neither"),
        "no teacher": (["recipe=tacl", f"teacher={inputs / 'gone'}"], r"tacl\.teacher=.*gone: no such folder"),
        "sts": ([f"eval.sts=[{inputs / 'sts.tsv'}]"], r"sts\.tsv"),
        "checkpoint": ([f"ckpt_path={inputs / 'last.ckpt'}"], r"last\.ckpt"),
    }
    for name, (overrides, refusal) in named.items():
        cfg = load_config([*overrides, *SMALL], run_dir=tmp_path / name)
        seen: list[str] = []
        accesses = [(builtins, "open"), (io, "open"), *((os, name) for name in ("open", "stat", "lstat", "scandir",
                                                                                "listdir"))]  # fmt: skip
        for module, function in accesses:
            original = getattr(module, function)

            def recorded(path: object = ".", *args: object, _original: object = original, _seen: list = seen,
                         **kwargs: object) -> object:  # fmt: skip
                if str(inputs) in str(path):
                    _seen.append(f"{path}")
                return _original(path, *args, **kwargs)  # type: ignore[operator]

            monkeypatch.setattr(module, function, recorded)
        plan = check(cfg)
        monkeypatch.undo()
        assert seen == [], f"{name}: check() read {seen}"
        with pytest.raises((ValueError, FileNotFoundError), match=refusal):
            read_inputs(plan)



def test_a_declared_option_is_checked_once_and_a_plugins_by_its_constructor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 70.2: the config's check (losses/declarations.py) validates every option whose annotation the term's
    file declares; the check stage's spec does not validate it again through the constructor's annotation."""
    from degen_train.losses import options
    from degen_train.losses.catalog import TermSpec
    from degen_train.losses.cosreg import CosineRegularizer

    again: list[str] = []
    original = options._check

    def counted(term: type, option: str, value: object, hint: object) -> None:
        again.append(option)
        original(term, option, value, hint)

    monkeypatch.setattr(options, "_check", counted)
    plan = checked(tmp_path, "recipe=coco_lm", "model=tiny", "objective.coco_clm.generator_hidden_fraction=0.5")
    assert "generator_hidden_fraction" in plan.terms["coco_clm"].options and again == []

    class PluginCosReg(CosineRegularizer):  # a plugin's class: no declaration of the house's speaks for it
        __module__ = "some_plugin"

    TermSpec("regularizer", "cosreg", PluginCosReg, {"rows": "seen"}, 1.0).check()
    assert again == ["rows"]
