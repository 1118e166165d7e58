"""Stage 1 is the config alone (issue 70.2): ``check`` makes each loss term's spec (its class, options and weight,
checked) and builds no module; a rule between a term's options, or an input it names (TaCL's teacher), is refused
there, before any data, by the term's own ``check_options``; stage 3 builds the terms from the specs."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from degen_train.config import load_config
from degen_train.losses.catalog import TermSpec
from degen_train.run.checks import check

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


def test_a_terms_rules_between_options_and_its_inputs_are_refused_at_stage_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"regularizer\.tacl\.teacher=.*missing.* is neither a degen_train run"):
        missing = tmp_path / "missing"
        missing.mkdir()
        checked(tmp_path, "recipe=tacl", f"teacher={missing}")
    with pytest.raises(ValueError, match=r"compiled=true makes the head's logits .* chunk_size=512 a chunk"):
        checked(tmp_path, "objective.mlm.compiled=true", "objective.mlm.chunk_size=512")
    with pytest.raises(ValueError, match=r"generator_hidden_fraction not in \(0, 1\]: 1\.5"):
        checked(tmp_path, "recipe=coco_lm", "model=tiny", "objective.coco_clm.generator_hidden_fraction=1.5")
