"""debug=plan (run/memory_plan.py): the fake-tensor step's peak equals the same step's on real CPU tensors, the plan
refuses by name what does not fit and names a switch that does, and the strategy arithmetic is as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from degen_train.config import load_config
from degen_train.run.checks import check
from degen_train.run.memory_plan import StepMemory, fake_step_memory, make_plan, per_device_peak
from tests.helpers import command

SMALL = ["data.batch_size=8", "data.block_size=64", "model.max_position=128", "data.tokenizer.vocab_size=1000"]


def checked(tmp_path: Path, *overrides: str):  # noqa: ANN201
    return check(load_config([*overrides, *SMALL, "plan.only=true"], run_dir=tmp_path / "run"))


@pytest.mark.parametrize(
    "overrides",
    [
        ["recipe=gpt2_mle", "model=gpt2_tiny", "trainer.precision=bf16-mixed"],
        ["recipe=coco_lm", "model=tiny"],  # a generator, called twice a step, and a frozen head
        ["recipe=gao_cosreg", "model=gpt2_tiny", "model.activation_checkpointing=full"],
    ],
)
def test_the_fake_step_peak_is_the_real_steps(tmp_path: Path, overrides: list[str]) -> None:
    """The same step on real CPU tensors, its live tensors tracked the same way (what torch.cuda.max_memory_allocated
    measures on a card): the fake step's peak within 1% (0.0 to 0.3% here; BERT's MLM step 0.0% too)."""
    plan = checked(tmp_path, *overrides)
    common = {"data_format": plan.data_format, "activation_checkpointing": plan.config.model.activation_checkpointing}
    fake = fake_step_memory(plan.config, plan.build_terms(), plan.weights, **common)
    real = fake_step_memory(plan.config, plan.build_terms(), plan.weights, **common, fake=False)
    assert fake.peak == pytest.approx(real.peak, rel=0.01)
    assert fake.parameter_count == real.parameter_count > 0


def test_checkpointing_lowers_the_planned_peak(tmp_path: Path) -> None:
    plain = checked(tmp_path, "recipe=gpt2_mle", "model=gpt2_tiny", "model.num_layers=4")
    full = checked(tmp_path, "recipe=gpt2_mle", "model=gpt2_tiny", "model.num_layers=4",
                   "model.activation_checkpointing=full")  # fmt: skip
    peaks = [make_plan(p.config, p.build_terms(), p.weights, data_format=p.data_format)["peak_gib"]
             for p in (plain, full)]  # fmt: skip
    assert peaks[1] < 0.7 * peaks[0], peaks


def test_strategies_divide_what_they_shard() -> None:
    """FSDP2: parameters, gradients and optimizer states / N, plus two gathered blocks; DDP: a bucket copy."""
    step = StepMemory(peak=100.0, parameters=10.0, gradients=10.0, optimizer=20.0, activations=60.0,
                      largest_block=2.0, parameter_count=1, body=1, head=1, layers=1, hidden=1)  # fmt: skip
    assert per_device_peak(step, strategy="fsdp", devices=4) == 100.0 - 40.0 * 0.75 + 4.0
    assert per_device_peak(step, strategy="ddp", devices=4) == 110.0
    assert per_device_peak(step, strategy="fsdp", devices=1) == 100.0


def test_debug_plan_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    result = command("degen-train", "debug=plan", "model=gpt2_tiny", "objective=mle", *SMALL, "plan.card=h200",
                     "plan.token_budget=1e9", f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "peak memory per device:" in result.stdout and "NVIDIA H200 141GB" in result.stdout
    assert "1e+09 tokens in" in result.stdout and "fits: yes" in result.stdout
    assert not any((tmp_path / "run").glob("*.json"))  # no run record, no checkpoint, no summary
    # issue 72.8 (P14b, P16): nor the train.log and run folder Hydra had made before the program ran
    assert not (tmp_path / "run").exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    kept = tmp_path / "a_run"
    kept.mkdir()
    (kept / "train.log").write_text("an earlier run's log\n")
    assert command("degen-train", "debug=plan", "model=gpt2_tiny", "objective=mle", *SMALL,
                   f"hydra.run.dir={kept}").returncode == 0  # fmt: skip
    assert (kept / "train.log").read_text() == "an earlier run's log\n"  # nothing appended, nothing removed


def test_a_plan_that_does_not_fit_is_refused_naming_a_switch_that_fits(tmp_path: Path) -> None:
    result = command("degen-train", "debug=plan", "model=gpt2_tiny", "objective=mle", *SMALL, "model.num_layers=4",
                     "plan.memory_gib=0.03", f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    assert result.returncode != 0
    assert "plan: 45.2 MiB per device does not fit NVIDIA H100 SXM 0.03GiB (27.6 MiB usable)" in result.stderr
    assert "this would: model.activation_checkpointing=full (peak" in result.stderr
