"""Parameter groups and the learning-rate schedule."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from torch import nn

from degen_train.optim.optimizer import parameter_groups
from degen_train.optim.schedule import build_scheduler, lr_factor


def test_biases_and_layernorm_are_not_decayed() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2, bias=False))
    decay, no_decay = parameter_groups([model], 0.1)
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight)}
    assert {id(p) for p in no_decay["params"]} == {id(model[0].bias), id(model[1].weight), id(model[1].bias)}
    assert no_decay["weight_decay"] == 0.0


def test_warmup_then_linear_and_cosine_decay() -> None:
    common = {"warmup_steps": 4, "total_steps": 14, "min_ratio": 0.0}
    assert lr_factor(0, schedule="linear", **common) == pytest.approx(0.25)
    assert lr_factor(3, schedule="linear", **common) == pytest.approx(1.0)
    assert lr_factor(9, schedule="linear", **common) == pytest.approx(0.5)  # halfway through 10 decay steps
    assert lr_factor(14, schedule="linear", **common) == pytest.approx(0.0)
    assert lr_factor(9, schedule="cosine", **common) == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))
    assert lr_factor(100, schedule="constant", **common) == 1.0


@pytest.mark.parametrize(("override", "said"), [
    ("scheduler.schedule=steep", r"scheduler.schedule='steep': Input should be 'linear', 'cosine', 'constant' or 'ws"),
    ("scheduler.decay_shape=square", r"scheduler.decay_shape='square': Input should be 'linear', 'cosine' or 'one_"),
])  # fmt: skip
def test_an_unknown_schedule_or_shape_is_refused_by_its_section_naming_the_choices(override: str, said: str) -> None:
    """The scheduler's section (optim/section.py) holds the choices; the build receives them checked (before, the
    build checked them again and named the key ``scheduler.name``, which is no key of the section)."""
    from degen_train.config import load_config
    from degen_train.config.schema import validate_config

    with pytest.raises(ValueError, match=said):
        validate_config(load_config(["scheduler=wsd", override]))


def test_wsd_holds_the_rate_then_decays_over_the_last_steps_in_each_shape() -> None:
    """Warm-up 2, stable until step 10, decay over the last 10 of 20 steps (Hägele et al. 2024's 1 − √p cooldown)."""
    common = {"warmup_steps": 2, "total_steps": 20, "min_ratio": 0.1, "schedule": "wsd", "decay_steps": 10}
    assert lr_factor(0, decay_shape="linear", **common) == pytest.approx(0.5)
    assert [lr_factor(s, decay_shape="linear", **common) for s in (2, 9, 10)] == [1.0, 1.0, 1.0]
    assert lr_factor(15, decay_shape="linear", **common) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(15, decay_shape="cosine", **common) == pytest.approx(0.1 + 0.9 * 0.5)  # cos(π/2) = 0
    assert lr_factor(12, decay_shape="cosine", **common) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(0.2 * math.pi))
    )
    assert lr_factor(15, decay_shape="one_minus_sqrt", **common) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.5)))
    assert lr_factor(20, decay_shape="one_minus_sqrt", **common) == pytest.approx(0.1)


def test_wsd_decay_from_a_fraction_and_one_that_does_not_fit_is_refused() -> None:
    import torch

    optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=1)
    scheduler = build_scheduler(
        optimizer, schedule="wsd", warmup_steps=0, total_steps=10, min_ratio=0, decay_fraction=0.2
    )
    rates = []
    for _ in range(10):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[:8] == [1.0] * 8 and rates[8:] == pytest.approx([1.0, 0.5])  # the last 2 of 10 steps decay
    with pytest.raises(
        ValueError, match=r"scheduler.decay_steps=96 must be in 1..95 steps: the decay follows warmup_steps=5"
    ):
        build_scheduler(optimizer, schedule="wsd", warmup_steps=5, total_steps=100, min_ratio=0, decay_steps=96)


def test_a_wsd_decay_longer_than_the_run_is_refused_by_the_config_check() -> None:
    from degen_train.config import load_config
    from degen_train.config.schema import validate_config

    with pytest.raises(ValueError, match=r"scheduler.decay_steps=100000 must be in 1\.\.290 steps"):
        validate_config(load_config(["scheduler=wsd", "scheduler.decay_steps=100000"]))


def test_a_wsd_run_logs_the_stable_rate_then_its_decay(tmp_path: Path) -> None:
    from tests.helpers import logged, run

    run(tmp_path, "scheduler=wsd", "scheduler.warmup_steps=0", "scheduler.decay_steps=4", "trainer.max_steps=8",
        "scheduler.decay_shape=linear", "trainer.log_every_n_steps=1", "optimizer.lr=0.001")  # fmt: skip
    rates = logged(tmp_path, "lr-AdamW/pg1")
    assert [rates[s] for s in sorted(rates)] == pytest.approx([1e-3] * 4 + [1e-3, 7.5e-4, 5e-4, 2.5e-4])


def released_wsd(n_iterations: int, final_lr_factor: float, n_warmup: int, init_div_factor: float,
                 fract_decay: float, decay_type: str):  # fmt: skip
    """wsd_schedule of epfml/schedules-and-scaling (src/optim/utils.py), transcribed for the linear and sqrt decays."""
    n_anneal_steps = int(fract_decay * n_iterations)
    n_hold = n_iterations - n_anneal_steps

    def schedule(step: int) -> float:
        if step < n_warmup:
            return (step / n_warmup) + (1 - step / n_warmup) / init_div_factor
        if step < n_hold:
            return 1.0
        if step < n_iterations:
            progress = (step - n_hold) / n_anneal_steps
            kept = 1 - progress if decay_type == "linear" else 1 - math.sqrt(progress)
            return final_lr_factor + (1 - final_lr_factor) * kept
        return final_lr_factor

    return schedule


@pytest.mark.parametrize(("shape", "released_shape"), [("linear", "linear"), ("one_minus_sqrt", "sqrt")])
@pytest.mark.parametrize("total", [100, 97])  # 97: 0.2·97 = 19.4, rounded down to 19 as released
def test_the_wsd_yaml_defaults_equal_the_released_schedule(shape: str, released_shape: str, total: int) -> None:
    """conf/scheduler/wsd.yaml's settings against the released wsd_schedule: warm-up from lr/100, int decay."""
    import torch
    from omegaconf import OmegaConf

    yaml = OmegaConf.load(Path(__file__).parents[2] / "conf" / "scheduler" / "wsd.yaml")
    assert yaml.warmup_init_div == 100 and yaml.decay_fraction == 0.2
    optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=1)
    ours = build_scheduler(optimizer, schedule="wsd", warmup_steps=10, total_steps=total, min_ratio=0.1,
                           decay_fraction=0.2, decay_shape=shape, warmup_init_div=100)  # fmt: skip
    reference = released_wsd(total, 0.1, 10, 100, 0.2, released_shape)
    for step in range(total):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(reference(step), abs=1e-12), step
        optimizer.step()
        ours.step()
