"""The one verdict rule of the reproduce pages (degen_train/metrics/verdicts.py), on cases computed by hand, and the
audit's cases (issue 44.2) that the old rule called wrongly."""

from __future__ import annotations

import math

import pytest

from degen_train.metrics.evaluation_noise import (
    accuracy_sampling_error,
    average_sampling_error,
    correlation_sampling_error,
)
from degen_train.metrics.verdicts import (
    CONFIDENCE,
    MIN_SEEDS,
    RULE,
    TOLERANCE,
    difference_noise,
    judge,
    t_quantile,
    welch,
)


def test_welchs_standard_error_and_degrees_of_freedom_by_hand() -> None:
    # base 1.0, 1.2 and other 0.6, 0.8: each arm's variance 0.02 (ddof 1), each mean's 0.01, SE = √0.02; df by
    # Welch–Satterthwaite: 0.02² / (0.01²/1 + 0.01²/1) = 2 (Student's pooled df for 2 + 2 seeds, equal spreads).
    se, dof = welch([1.0, 1.2], [0.6, 0.8])
    assert se == pytest.approx(math.sqrt(0.02)) and dof == pytest.approx(2.0)
    # unequal spreads: other 0.3, 0.6, 0.9 has variance 0.18 / 2 = 0.09, its mean's 0.03; SE² = 0.01 + 0.03 = 0.04,
    # df = 0.04² / (0.01²/1 + 0.03²/2) = 0.0016 / 0.00055 = 2.909...
    se, dof = welch([1.0, 1.2], [0.3, 0.6, 0.9])
    assert se == pytest.approx(0.2) and dof == pytest.approx(0.0016 / 0.00055)
    # issue 71.2: a sampling error adds width and no degrees of freedom (the seeds' df stays 2; the old rule lifted it
    # to 0.04² / 0.0002 = 8 by counting the evaluation term as a known variance, narrowing the interval)
    se, dof = welch([1.0, 1.2], [0.6, 0.8], sampling=0.1)
    assert se == pytest.approx(math.sqrt(0.02 + 2 * 0.01)) and dof == pytest.approx(2.0)
    assert welch([1.0], [0.6, 0.8]) is None and welch([1.0], [0.6], sampling=3.0) is None
    assert difference_noise([1.0, 1.2], [0.6, 0.8]) == pytest.approx(math.sqrt(0.02))
    assert t_quantile(2) == pytest.approx(4.303, abs=1e-3) and t_quantile(math.inf) == pytest.approx(1.960, abs=1e-3)


def test_the_audits_boundary_cases_under_welchs_t() -> None:
    """Issue 54.1: the z-rule called (g)'s unlikelihood seq-rep-4, −0.0295 with a standard error of 0.01435 at
    2 + 2 seeds, "shows" (t = 2.06, p = 0.11); at Student's t (df 2: 4.30) its interval holds zero."""
    base, other = [0.1, 0.1 + 2 * 0.01435 / math.sqrt(2) * math.sqrt(2)], [0.0705, 0.0705 + 0.0287]
    verdict = judge("seq-rep-4", "mle", "unlikelihood", base, other, expect="lower")
    assert verdict.effect == pytest.approx(-0.0295) and verdict.word == "cannot tell at this scale"
    assert "(95%, t at df 2)" in verdict.line()
    twice = judge("x", "a", "b", [1.0, 1.0 + 0.1], [0.5, 0.5 + 0.1], expect="lower")  # SE 0.05·√2·... , t far beyond
    assert twice.word == "shows"


def test_one_seed_in_either_arm_never_decides() -> None:
    """Issue 54.2: [50] → [60] with sampling error 2 was "shows", and [50] against [50, 60, 70] dropped the other
    arm's spread."""
    assert judge("x", "a", "b", [50.0], [60.0], expect="higher", sampling=2.0).word == "cannot tell at this scale"
    assert judge("x", "a", "b", [50.0], [50.0, 60.0, 70.0], expect="higher", sampling=2.0).word == (
        "cannot tell at this scale")  # fmt: skip
    assert "(noise unknown)" in judge("x", "a", "b", [1.0], [0.5], expect="lower").line()


def test_zero_spread_never_makes_the_noise_zero() -> None:
    """Issue 54.2: two identical seeds per arm gave noise 0, so an effect of 1e-9 "showed"."""
    assert judge("x", "a", "b", [1.0, 1.0], [1.0 + 1e-9, 1.0 + 1e-9], expect="higher").word == (
        "cannot tell at this scale")  # fmt: skip
    # with an evaluation set, its sampling error stays: identical seeds 60 → 61 on 1,500 STS-B pairs
    sampled = judge("STS-B raw", "a", "b", [60.0, 60.0], [61.0, 61.0], expect="higher",
                    sampling=correlation_sampling_error(60.5, 1500, spearman=True))  # fmt: skip
    assert sampled.noise == pytest.approx(math.sqrt(2) * 100 * (1 - 0.605**2) * math.sqrt(1.06 / 1497))
    # zero seed spread: the seeds' df is its ceiling, n_b + n_o − 2 (issue 71.2: never ∞ from the evaluation term)
    assert sampled.dof == pytest.approx(2.0) and sampled.word == "cannot tell at this scale"
    far = judge("STS-B raw", "a", "b", [60.0] * 3, [70.0] * 3, expect="higher",
                sampling=correlation_sampling_error(65.0, 1500, spearman=True))  # fmt: skip
    # SE = √2 · 2.07 = 2.93, t(4) = 2.776: the interval +10 ± 8.1 excludes zero
    assert far.word == "shows" and "t at df 4, with its evaluation set" in far.line()


def test_the_page_prints_the_rule_from_the_same_constants() -> None:
    assert f"{CONFIDENCE:.0%} interval" in RULE and f"fewer than {MIN_SEEDS} seeds" in RULE
    assert f"within {TOLERANCE:.0%} of the baseline" in RULE


def test_dev_set_sampling_errors_are_the_audits() -> None:
    """Issue 44.2: about 3.0 points on RTE (277 items), 1.5 on SST-2 (872), 2.5 on STS-B (1,500 pairs) at r = 0.15."""
    assert accuracy_sampling_error(50.0, 277) == pytest.approx(3.0, abs=0.01)
    assert accuracy_sampling_error(72.0, 872) == pytest.approx(1.52, abs=0.01)
    assert correlation_sampling_error(15.0, 1500) == pytest.approx(2.5, abs=0.03)  # Fisher z: (1 − r²)/√(n − 3)
    assert correlation_sampling_error(15.0, 1500) == pytest.approx(100 * (1 - 0.0225) / math.sqrt(1497))
    assert correlation_sampling_error(15.0, 1500, spearman=True) == pytest.approx(
        100 * (1 - 0.0225) * math.sqrt(1.06 / 1497))  # fmt: skip
    average = average_sampling_error([3.0, 1.5, 2.5])
    assert average == pytest.approx(math.sqrt(9 + 2.25 + 6.25) / 3)  # 1.39: the partial average of three tasks
    assert math.sqrt(2) * average == pytest.approx(1.97, abs=0.01)  # "about 2 points on the difference"


def test_a_directional_claim_shows_only_when_its_interval_excludes_zero() -> None:
    clear = judge("x", "a", "b", [1.0, 1.1, 0.9], [0.5, 0.6, 0.4], expect="lower")  # −0.5 against 2.78 × 0.082
    assert clear.word == "shows" and "effect -0.5 ±" in clear.line()
    assert judge("x", "a", "b", [1.0, 1.1, 0.9], [0.5, 0.6, 0.4], expect="higher").word == "does not show"
    assert judge("x", "a", "b", [1.0, 1.2], [1.05, 1.25], expect="higher").word == "cannot tell at this scale"


def test_one_seed_never_decides_and_the_audits_glue_claim_cannot_tell() -> None:
    """Part (m) called TaCL's 46.7 → 48.1 "the paper's way" from one seed per arm: with the dev sets' sampling error
    alone (1.39 points on each partial average of RTE, SST-2 and STS-B) the effect of 1.4 is inside 2 × 1.97."""
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


def test_a_sweep_comparison_is_welchs_t_by_hand() -> None:
    """Issue 65: base 1.0, 1.2, 1.1 and setting 1.5, 1.7, 1.6: each arm's variance 0.01 (ddof 1), SE = √(2·0.01/3),
    df 4 (equal spreads), t = 0.5 / 0.08165 = 6.124; Student's t at 4 df has the closed form
    F(t) = 1/2 + (3/4)·u·(1 − u²/3), u = t/√(4 + t²), so the two-sided p is 2·(1 − F(t)) = 0.00360."""
    from degen_train.metrics.verdicts import compare, decide

    (c,) = decide([compare("m", "w=1", "w=0", [1.0, 1.2, 1.1], [1.5, 1.7, 1.6])])
    t = 0.5 / math.sqrt(2 * 0.01 / 3)
    u = t / math.sqrt(4 + t * t)
    assert c.effect == pytest.approx(0.5) and c.noise == pytest.approx(math.sqrt(2 * 0.01 / 3))
    assert c.dof == pytest.approx(4.0) and c.p == pytest.approx(2 * (0.5 - 0.75 * u * (1 - u * u / 3)))
    assert c.p == pytest.approx(0.0036, abs=1e-4) and c.word == "higher"
    assert c.noise_text() == "seeds (df 4)" and c.seeds_advice is None
    (same,) = decide([compare("m", "w=1", "w=0", [1.0, 1.2, 1.1], [1.0, 1.2, 1.1])])
    assert same.p == pytest.approx(1.0) and same.word == "no difference shown"
    (one,) = decide([compare("m", "w=1", "w=0", [1.0], [5.0, 5.1])])
    assert one.word == "cannot tell" and one.noise_text() == "unknown: 1 seed(s) in an arm" and one.p is None


def test_holms_correction_by_hand_over_the_whole_table() -> None:
    """Issue 71.2: the family is every comparison the report judges, across measures. p = 0.01, 0.04, 0.03 on one
    measure and 0.04 on another: sorted 0.01, 0.03, 0.04, 0.04 → 4·0.01 = 0.04, max(0.04, 3·0.03) = 0.09,
    max(0.09, 2·0.04) = 0.09, max(0.09, 0.04) = 0.09 (Holm 1979): only the first stays below 0.05 (the old
    per-measure families let the lone 0.04 pass uncorrected). With ``primary``, the primary measure's comparisons
    are one family and the rest another: the three exploratory ones by hand 0.03, 0.06, 0.06."""
    from dataclasses import replace

    from statsmodels.stats.multitest import multipletests

    from degen_train.metrics.verdicts import compare, decide

    base = compare("m", "a", "base", [1.0, 1.1], [0.5, 0.6])
    family = [replace(base, setting=s, p=p) for s, p in (("a", 0.01), ("b", 0.04), ("c", 0.03))]
    alone = replace(base, measure="other", setting="a", p=0.04)
    decided = decide([*family, alone])
    assert [c.p_adjusted for c in decided] == pytest.approx([0.04, 0.09, 0.09, 0.09])
    assert [c.p_adjusted for c in decided] == pytest.approx(list(multipletests([0.01, 0.04, 0.03, 0.04],
                                                                               method="holm")[1]))  # fmt: skip
    assert [c.word for c in decided] == ["lower"] + ["no difference shown"] * 3
    assert {(c.family, c.family_size) for c in decided} == {("all", 4)}
    # Holm's step for the j-th smallest of k is α / (k − j + 1): the seeds advice is computed there
    assert [c.alpha for c in decided] == pytest.approx([0.05 / 4, 0.05 / 2, 0.05 / 3, 0.05 / 1])
    split = decide([*family, alone], primary=["other"])
    assert [c.p_adjusted for c in split[:3]] == pytest.approx([0.03, 0.06, 0.06]) and split[3].p_adjusted == 0.04
    assert [(c.family, c.family_size) for c in split] == [("exploratory", 3)] * 3 + [("primary", 1)]
    assert [c.word for c in split] == ["lower", "no difference shown", "no difference shown", "lower"]
    uncorrected = decide([*family, alone], correct=False)
    assert [c.word for c in uncorrected] == ["lower"] * 4 and {c.family for c in uncorrected} == {"uncorrected"}


def test_the_seeds_advice_at_the_corrected_level_asks_for_more_seeds() -> None:
    """Issue 71.2: the advice for a corrected verdict is computed at the level its Holm step used, not at 5%."""
    from dataclasses import replace

    from degen_train.metrics.verdicts import compare, seeds_to_decide

    c = replace(compare("m", "a", "b", [0.0, 1.0], [0.0, 1.0]), before=0.0, after=1.0, spreads=(1.0, 1.0))
    assert seeds_to_decide(replace(c, alpha=0.05 / 20)) > seeds_to_decide(c) == 17


def test_the_seeds_advice_against_the_closed_form_case() -> None:
    """An effect of one seed standard deviation (Cohen's d = 1), no evaluation-set error: the two-sample t test's
    power reaches 80% at 16.7 seeds per arm (Cohen 1988, Table 2.4.1: n = 17 for d = 1.0, two-sided 5%)."""
    from dataclasses import replace

    from degen_train.metrics.verdicts import compare, seeds_to_decide

    c = replace(compare("m", "a", "b", [0.0, 1.0], [0.0, 1.0]), before=0.0, after=1.0,
                spreads=(1.0, 1.0))  # fmt: skip
    assert seeds_to_decide(c) == 17
    # the evaluation set's own error does not shrink with seeds: past it, no count of seeds decides
    assert seeds_to_decide(replace(c, after=0.1, evaluation_variance=0.1**2)) is None
    assert seeds_to_decide(replace(c, evaluation_variance=0.05**2)) == 18
