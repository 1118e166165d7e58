"""Every recipe's training step on a fake accelerator (a tensor made on the CPU fails as it fails on CUDA), under
bf16 autocast (no solver in bf16), and the places it waits for the device, each one named with its reason.

CI has no GPU: these are the GPU's device and dtype bugs, found on a CPU (degen_train/run/step_check.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.data.datamodule import make_collator, prepare_data
from degen_train.data.sampling import PositionedExamples
from degen_train.losses.catalog import build_terms, data_format_for
from degen_train.losses.contract import TermOutput
from degen_train.losses.cosreg import CosineRegularizer
from degen_train.losses.istar import isoscore_of_covariance
from degen_train.models.backbone import model_family
from degen_train.run.pretrain import build_module
from degen_train.run.step_check import (
    DeviceMixError,
    HostRead,
    LowPrecisionLinalgError,
    watch_autocast_step,
    watch_fake_device_step,
)
from tests.test_recipes import RECIPES, overrides

# Every place a training step may still wait for the device, and why it must. Anything else is a regression.
NEEDED_READS = {
    "transformers/masking_utils.py": "a padded batch's attention mask (NSP pairs, COCO-LM's crops, TaCL's teacher "
    "input): transformers reads it to decide whether SDPA needs it. Packed blocks carry no mask (model_inputs)",
    "degen_train/losses/agg.py": "AGG keeps each step's target ids sparse in its window and selects the rare "
    "rows in its backward: data-dependent sizes",
    "degen_train/losses/istar.py": "I-STAR's C0 sampling counts the states taken, once per refresh (an epoch)",
}
STEP_WITHOUT_READS = ("bert_mlm", "gpt2_mle", "gao_cosreg", "electra", "simctg", "spectrum_control", "unlikelihood")


def recipe_step(recipe_overrides: list[str], tmp_path: Path) -> tuple:
    """A freshly built PretrainModule of the recipe and one collated training batch (4 × 32)."""
    config = validate_config(load_config([*recipe_overrides, "data.batch_size=4", "data.block_size=32",
                                          "model.max_position=64"], run_dir=tmp_path / "run"))  # fmt: skip
    settings = config.plain_settings()
    terms, weights = build_terms({"objective": settings["objective"], "regularizer": settings.get("regularizer")})
    family = model_family(config.model)
    data_format = data_format_for(terms, family, "model")
    data = prepare_data(config.data, family=family, data_format=data_format, seed=0)
    module = build_module(config, data, terms, weights, family=family, with_nsp_head=data_format == "mlm_nsp")
    collator = make_collator(
        data.tokenizer, data_format=data_format, masking=config.masking, vocab_size=len(data.tokenizer)
    )
    examples = PositionedExamples(data.train, 0)
    return module.train(), collator([examples[(0, i)] for i in range(4)])


def unexplained(reads: list[HostRead]) -> list[str]:
    return [str(r) for r in reads if not any(r.where.startswith(place) for place in NEEDED_READS)]


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_steps_on_a_fake_accelerator(recipe: str, tmp_path: Path, teacher: Path) -> None:
    """Forward, every term, the logged values stacked, backward: on a device that is not the CPU, in float32 and in
    bf16; each host wait is one of NEEDED_READS, and the default and seed recipes' steps have none."""
    for dtype in (None, torch.bfloat16):
        module, batch = recipe_step(overrides(recipe, teacher), tmp_path)
        reads = watch_fake_device_step(module, batch, dtype=dtype)
        assert not unexplained(reads), (recipe, dtype, unexplained(reads))
        if recipe in STEP_WITHOUT_READS:
            assert reads == [], (recipe, [str(r) for r in reads])


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_steps_under_bf16_autocast(recipe: str, tmp_path: Path, teacher: Path) -> None:
    module, batch = recipe_step(overrides(recipe, teacher), tmp_path)
    watch_autocast_step(module, batch)  # raises LowPrecisionLinalgError on a bf16 solver call


def test_a_metric_made_on_the_cpu_fails_as_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CosReg crash the H100 showed (`torch.stack` of the logged values, one made on the CPU by
    ``torch.tensor(float(rows))``), put back: the fake device fails on it, naming the line that stacks."""
    original = CosineRegularizer.forward

    def as_before(self: CosineRegularizer, output: object) -> TermOutput:
        result = original(self, output)
        return TermOutput(result.loss, {"rows": torch.tensor(float(output.embedding_weight.shape[0]))})

    monkeypatch.setattr(CosineRegularizer, "forward", as_before)
    module, batch = recipe_step(["recipe=gao_cosreg", "model=gpt2_tiny", "data.tokenizer.vocab_size=1000"], tmp_path)
    where = r"at degen_train/run/step_log.py:\d+ in stack_"
    with pytest.raises(DeviceMixError, match=r"stack.* mixes a CPU tensor .* " + where):
        watch_fake_device_step(module, batch)


def test_a_solver_on_bf16_fails_as_on_cuda() -> None:
    """I-STAR's crash (`svd_cuda_gesvdj not implemented for 'BFloat16'`): its covariance made under bf16 autocast
    and handed to the SVD as it was; the fixed term computes both in float32."""
    from degen_train.run.step_check import SolverPrecisionWatch

    states = torch.randn(64, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16), SolverPrecisionWatch():
        with pytest.raises(LowPrecisionLinalgError, match=r"svdvals on torch.bfloat16 .* at tests/test_step_check"):
            torch.linalg.svdvals(states.T @ states)
        assert isoscore_of_covariance(states.T @ states).dtype == torch.float32  # the term's own path: float32


def test_host_reads_are_named_by_line() -> None:
    """A read is listed with our source line; a boolean mask counts as one (its nonzero)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from degen_train.run.step_check import FAKE_DEVICE, StepWatch

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        values = torch.empty(4, 3, device=FAKE_DEVICE)
    watch = StepWatch(fake=True)
    with mode, watch:
        picked = values[values[:, 0] > 0]  # a boolean mask: one read
        float(picked.sum())  # a value read
    assert [r.what.split(" ")[0] for r in watch.reads] == ["index.Tensor", "a"]
    assert all(r.where.startswith("tests/test_step_check.py:") for r in watch.reads)
