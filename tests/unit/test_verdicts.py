"""The one verdict rule of the reproduce pages (degen_train/reproduce/verdicts.py), on cases computed by hand, and the
audit's cases (issue 44.2) that the old rule called wrongly."""

from __future__ import annotations

import math

import pytest

from degen_train.reproduce.verdicts import (
    accuracy_sampling_error,
    average_sampling_error,
    correlation_sampling_error,
    difference_noise,
    judge,
)


def test_the_noise_of_a_difference_pools_the_seed_spread_and_adds_the_sampling_error() -> None:
    # base 1.0, 1.2 and other 0.6, 0.8: each arm's squared deviations 0.02, pooled variance 0.04 / 2 = 0.02,
    # standard error √(0.02/2 + 0.02/2) = √0.02.
    assert difference_noise([1.0, 1.2], [0.6, 0.8]) == pytest.approx(math.sqrt(0.02))
    assert difference_noise([1.0, 1.2], [0.6, 0.8], sampling=0.1) == pytest.approx(math.sqrt(0.02 + 2 * 0.01))
    assert difference_noise([1.0], [0.6, 0.8]) is None and difference_noise([1.0], [0.6], sampling=3.0) == (
        pytest.approx(3 * math.sqrt(2)))  # fmt: skip


def test_dev_set_sampling_errors_are_the_audits() -> None:
    """Issue 44.2: about 3.0 points on RTE (277 items), 1.5 on SST-2 (872), 2.5 on STS-B (1,500 pairs) at r = 0.15."""
    assert accuracy_sampling_error(50.0, 277) == pytest.approx(3.0, abs=0.01)
    assert accuracy_sampling_error(72.0, 872) == pytest.approx(1.52, abs=0.01)
    assert correlation_sampling_error(15.0, 1500) == pytest.approx(2.5, abs=0.03)
    average = average_sampling_error([3.0, 1.5, 2.5])
    assert average == pytest.approx(math.sqrt(9 + 2.25 + 6.25) / 3)  # 1.39: the partial average of three tasks
    assert math.sqrt(2) * average == pytest.approx(1.97, abs=0.01)  # "about 2 points on the difference"


def test_a_directional_claim_shows_only_beyond_twice_its_noise() -> None:
    clear = judge("x", "a", "b", [1.0, 1.1, 0.9], [0.5, 0.6, 0.4], expect="lower")  # −0.5 against 2 × 0.082
    assert clear.word == "shows" and "effect -0.5 ±" in clear.line()
    assert judge("x", "a", "b", [1.0, 1.1, 0.9], [0.5, 0.6, 0.4], expect="higher").word == "does not show"
    assert judge("x", "a", "b", [1.0, 1.2], [1.05, 1.25], expect="higher").word == "cannot tell at this scale"


def test_one_seed_never_decides_and_the_audits_glue_claim_cannot_tell() -> None:
    """Part (m) called TaCL's 46.7 → 48.1 "the paper's way" from one seed per arm: with the dev sets' sampling error
    alone (1.39 points on each partial average of RTE, SST-2 and STS-B) the effect of 1.4 is inside 2 × 1.97."""
    single = judge("x", "a", "b", [1.0], [0.5], expect="lower")
    assert single.word == "cannot tell at this scale" and "(noise unknown)" in single.line()
    glue = judge("partial GLUE average", "mlm_nsp", "tacl", [46.7], [48.1], expect="higher",
                 sampling=average_sampling_error([3.0, 1.5, 2.5]))  # fmt: skip
    assert glue.word == "cannot tell at this scale"


def test_a_no_cost_claim_shows_only_when_its_interval_lies_inside_the_tolerance() -> None:
    """The old rule printed "holds" for clipped softmax's perplexity rise 548 → 557 inside 2σ of 2 seeds, which the
    main page turned into "no perplexity cost": a rise the noise cannot rule out is not shown to be no cost."""
    rise = judge("val perplexity", "softmax", "clipped", [540.0, 556.0], [549.0, 565.0], expect="not higher")
    assert rise.word == "cannot tell at this scale"
    flat = judge("val perplexity", "a", "b", [100.0, 100.2], [100.1, 100.3], expect="same")
    assert flat.word == "shows"
    costly = judge("val perplexity", "a", "b", [100.0, 100.2], [110.0, 110.2], expect="not higher")
    assert costly.word == "does not show"
    with pytest.raises(ValueError, match=r"expect='up' is not one of lower, higher, same, not higher"):
        judge("x", "a", "b", [1.0], [1.0], expect="up")
