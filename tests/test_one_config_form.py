"""One config form below the command line (issue 70.2): Hydra composes, the check stage validates once into the
typed config, and only that travels. No build call of a run receives an OmegaConf DictConfig, and what the check
stage changes (a branch pointing the run at its parent's checkpoint and tokenizer) is what the later stages read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, ListConfig

import degen_train.run.pretrain as pretrain
from tests.helpers import resume_settings, run

# the calls of stages 2-5 that build a component from the config (run/pretrain.py's own names for them)
BUILD_CALLS = ("prepare_data", "build_hf_model", "make_collator", "PretrainDataModule", "build_module", "build_trainer",
               "run_provenance")  # fmt: skip


def watch_build_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[Any, ...]]]:
    """{call: [its arguments, one tuple a call]}, the calls made as the run makes them."""
    seen: dict[str, list[tuple[Any, ...]]] = {name: [] for name in BUILD_CALLS}
    for name in BUILD_CALLS:
        original = getattr(pretrain, name)

        def watched(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            seen[_name].append((*args, *kwargs.values()))
            return _original(*args, **kwargs)

        monkeypatch.setattr(pretrain, name, watched)
    plans = []
    check = pretrain.check
    monkeypatch.setattr(pretrain, "check", lambda *a, **k: plans.append(check(*a, **k)) or plans[-1])
    seen["plan"] = plans  # type: ignore[assignment]
    return seen


def omegaconf_values(arguments: tuple[Any, ...]) -> list[str]:
    return [type(a).__name__ for a in arguments if isinstance(a, DictConfig | ListConfig)]


def test_no_build_call_receives_a_dictconfig_and_each_gets_its_typed_section(
    tmp_path: Path, small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = watch_build_calls(monkeypatch)
    run(tmp_path / "run", *resume_settings(small_corpus), "trainer.max_steps=2")
    for name in BUILD_CALLS:
        assert seen[name], f"{name} was not called: the watch is out of date"
        for arguments in seen[name]:
            assert not omegaconf_values(arguments), f"{name} received {omegaconf_values(arguments)}"
    (plan,) = seen["plan"]
    assert not [k for k, v in vars(plan).items() if isinstance(v, DictConfig)], "RunPlan carries a DictConfig"
    typed = {name: type(seen[name][0][0]).__name__ for name in ("prepare_data", "build_hf_model", "build_module",
                                                                 "build_trainer")}  # fmt: skip
    assert typed == {"prepare_data": "DataConfig", "build_hf_model": "ModelConfig", "build_module": "TrainConfig",
                     "build_trainer": "TrainConfig"}  # fmt: skip
    assert seen["build_hf_model"][0][0] is plan.config.model  # handed down as it is: never validated again
    assert type(seen["make_collator"][0][-2]).__name__ == "MaskingConfig"


def test_a_new_branch_reads_its_parents_tokenizer_from_the_typed_config(
    tmp_path: Path, small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the branch pointed the DictConfig at the parent's tokenizer, while the data stage read the typed
    section, whose data.tokenizer.path was still unset: the branch trained a tokenizer of its own again (the same
    one only because training it is deterministic on the same corpus)."""
    parent = tmp_path / "parent"
    settings = [*resume_settings(small_corpus), "callbacks.checkpoint.every_n_train_steps=2",
                "callbacks.checkpoint.save_top_k=-1"]  # fmt: skip
    run(parent, *settings, "trainer.max_steps=4")
    seen = watch_build_calls(monkeypatch)
    run(tmp_path / "branch", *settings, "trainer.max_steps=6", f"branch_from={parent}@2")
    data_section = seen["prepare_data"][0][0]
    assert data_section.tokenizer.path == str(parent.resolve() / "tokenizer")
    (plan,) = seen["plan"]
    assert plan.config.ckpt_path == str(parent.resolve() / "checkpoints" / "step=00000002.ckpt")
