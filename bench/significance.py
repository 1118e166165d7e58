"""The sweep report's verdicts beside deep-significance's on the same numbers (docs/sweeps.md): for each measure of a
sweep against its baseline, degen-report's word, p (Holm) and seeds advice, and deepsig's Almost Stochastic Order
ε_min (Dror et al. 2019; del Barrio et al. 2018; deepsig's ``aso``, at 95% with the Bonferroni correction over the
measures, as its docs advise) and its bootstrap power analysis (``bootstrap_power_analysis``: the power the arm's
seeds have to see the observed change).

    pip install deepsig dill            # not a dependency of degen_train
    python bench/significance.py SWEEP_DIR [--baseline KEY=VALUE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--baseline")
    args = parser.parse_args(argv)
    try:
        import deepsig
    except ImportError:
        sys.exit("bench/significance.py compares with deep-significance: pip install deepsig dill")
    from degen_train.report.comparisons import comparisons
    from degen_train.report.runs_table import SWEPT, collect, find_runs

    table, _ = collect(find_runs([args.sweep]))
    result = comparisons(table, baseline=args.baseline)
    key, value = result.baseline
    finished = table[table["status"].astype(str).str.startswith("finished")]
    base = finished[finished[SWEPT + key].astype(str) == value]
    measures = [c for c in result.decided if c.noise]
    print(f"{len(measures)} measures, baseline {key}={value}; ASO at 95% with Bonferroni over {len(measures)}")
    print("| measure | effect | degen-report | p (Holm) | seeds to decide | ASO ε_min (setting vs baseline) | "
          "deepsig power at these seeds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in sorted(measures, key=lambda c: c.measure):
        other = finished[(finished[SWEPT + key].astype(str) != value)]
        before, after = base[c.measure].dropna().to_numpy(), other[c.measure].dropna().to_numpy()
        higher = deepsig.aso(after, before, confidence_level=0.95, num_comparisons=len(measures), seed=0,
                             show_progress=False)  # fmt: skip
        low, high = sorted((before, after), key=lambda arm: arm.mean())  # deepsig scales an arm up by the lift
        lift = float(high.mean() / low.mean()) if low.mean() > 0 else None
        power = (deepsig.bootstrap_power_analysis(low, scalar=lift, seed=0, show_progress=False) if lift and lift > 1
                 else None)  # fmt: skip
        advice = f"about {c.seeds_advice}" if c.seeds_advice else ""
        print(f"| {c.measure} | {c.effect:+.3g} | {c.word} | {c.p_adjusted:.2g} | {advice} | {higher:.2f} | "
              f"{'n/a' if power is None else f'{power:.0%}'} |")


if __name__ == "__main__":
    main()
