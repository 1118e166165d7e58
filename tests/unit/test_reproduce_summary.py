"""The reproduce pages' claims listed once (degen_train/reproduce/claims.py) and docs/reproduce.md's summary
generated from them over the pages' runs.csv (issue 44.2): no sentence written by hand can disagree with a page."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from degen_train.metrics.verdicts import RULE
from degen_train.reproduce.claims import (
    BEGIN,
    END,
    GLUE_DEV_ITEMS,
    SEED_CLAIMS,
    all_claims,
    glue_average_sampling,
    rewrite_summary,
    summary,
    written_on,
)
from degen_train.reproduce.methods import METHOD_PARTS

ROOT = Path(__file__).resolve().parents[2]


def summary_pages() -> list[tuple[Path, str]]:
    cfg = OmegaConf.load(ROOT / "conf" / "reproduce.yaml")
    pages = [(ROOT / folder, str(letters)) for folder, letters in cfg.summary.pages.items()]
    return [(folder, letters) for folder, letters in pages if (folder / "runs.csv").is_file()]  # those written


def test_the_summary_in_docs_is_what_the_code_writes_from_the_pages() -> None:
    """docs/reproduce.md's table between its markers is summary() over the pages conf/reproduce.yaml lists, byte for
    byte: a verdict typed by hand, or a page rewritten without `degen-reproduce summary`, fails here."""
    text = (ROOT / "docs" / "reproduce.md").read_text()
    assert BEGIN in text and END in text
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == f"\n\n{summary(summary_pages(), ROOT / 'docs')}\n"


def test_every_page_written_under_the_old_rule_is_boxed() -> None:
    for folder, _ in summary_pages():
        page = (folder / "README.md").read_text()
        if not any(f"by one rule (degen_train/{home}/verdicts.py)" in page for home in ("reproduce", "metrics")):
            assert "> **Superseded rule.**" in page, folder


def test_gaos_claim_is_lower_perplexity_as_the_paper_states() -> None:
    """Gao et al. 2019, Table 1: MLE-CosReg reaches a lower perplexity than MLE on WikiText-103 (issue 44.3)."""
    (perplexity,) = [c for c in SEED_CLAIMS if c.section == "a" and c.column == "val perplexity"]
    assert perplexity.expect == "lower" and "lower perplexity" in perplexity.paper


def test_every_method_claim_comes_from_its_part() -> None:
    listed = {(c.other[0], c.column, c.base) for c in all_claims()}
    for name, part in METHOD_PARTS.items():
        assert {(name, column, part.baseline) for column in part.expectations} <= listed
        assert {(name, column, (name, "control")) for column in part.control_expectations} <= listed


def test_an_older_probes_numbers_are_marked_not_judged(tmp_path: Path) -> None:
    """No hand list (issue 54.4): a number is an older probe's when its row's stamp, or the page's day against the
    probe's changelog (metrics/probe_versions.py), gives an older version than the current one. Part (n) as written
    on 2026-11-28 is judged whole; the same rows on a page of 2026-11-27 have that day's outliers probe (the sink
    rates are judged) and the W8A8 probe before the placements of 2026-11-28 (the gaps are marked); on a page of
    2026-11-26, neither."""
    import json

    from degen_train.metrics.probe_versions import PROBES

    def probe_rows(page: Path) -> dict[str, list[str]]:
        text = summary([(page, "n")], page.parent)
        return {column: [line for line in text.splitlines() if f"| {column} |" in line]
                for column in ("W8A8 gap", "attention sink %")}  # fmt: skip

    current = ROOT / "docs" / "reproduce" / "part_n"
    assert written_on(current) == "2026-11-28" and PROBES["w8a8"].version == 3
    rows = probe_rows(current)  # the page regenerated with today's probes: every number judged
    assert len(rows["W8A8 gap"]) == 3 and all("superseded" not in row and "**" in row for row in rows["W8A8 gap"])
    unstamped = pd.read_csv(current / "runs.csv").drop(columns=["probe versions"], errors="ignore")
    for day, w8a8_superseded, sink_superseded in (("2026-11-27", True, False), ("2026-11-26", True, True)):
        old = tmp_path / day / "part_n"
        old.mkdir(parents=True)
        unstamped.to_csv(old / "runs.csv", index=False)
        (old / "README.md").write_text("# Reproduction at CPU scale\n\nWritten by `make reproduce` "
                                       f"(`degen-reproduce`) on {day}; every number below ...\n")  # fmt: skip
        rows = probe_rows(old)
        assert len(rows["W8A8 gap"]) == 3 and len(rows["attention sink %"]) == 1
        assert all(("superseded: measured by the w8a8 probe v" in row) == w8a8_superseded
                   for row in rows["W8A8 gap"])  # fmt: skip
        assert ("superseded: measured by" in rows["attention sink %"][0]) == sink_superseded
    stamped = unstamped.assign(**{"probe versions": json.dumps({"w8a8": 3, "outliers": 2})})
    stamped.to_csv(old / "runs.csv", index=False)  # every row measured by today's probes: judged, whatever the day
    rows = probe_rows(old)
    assert all("superseded" not in row and "**" in row for row in sum(rows.values(), []))


def test_every_listed_claim_has_a_number_measured_by_todays_probes() -> None:
    """Issue 54.4-54.6: each claim of claims.py is judged on a written page (none only listed), and none of them by an
    older probe than the current one. Only the per-word perplexity waits: it is measured at Gao's scale
    (make reproduce-gao-scale, a GPU's page, not written yet). COCO-LM's ℓ_uniform [CLS] is on part (d)'s page."""
    pages = summary_pages()
    if not pages:
        pytest.skip("no reproduce page is written in this checkout")
    text = summary(pages, ROOT / "docs")
    waiting = {("a", "valid perplexity (word)")}
    if not (ROOT / "docs" / "reproduce" / "part_f" / "runs.csv").is_file():  # part (f)'s generation side: its page
        waiting |= {(c.section, c.label) for c in all_claims() if c.base[0] == "simctg_generation"}
    for claim in all_claims():
        rows = [line for line in text.splitlines()
                if line.startswith(f"| ({claim.section}) | {claim.base[1]} → {claim.other[1]} | {claim.label} |")]
        assert len(rows) == 1 or (claim.section, claim.label) in waiting and not rows, (claim.section, claim.label)
    assert "superseded" not in text
    (uniformity,) = [line for line in text.splitlines() if "| ℓ_uniform [CLS] |" in line]
    assert uniformity.startswith("| (d) | electra → coco_lm |")


def test_a_glue_claim_carries_the_dev_sets_sampling_error() -> None:
    """Part (m)'s TaCL claim has one seed per arm: cannot tell, whatever the dev sets' error (issue 54.2); the error
    it would carry is the partial average's, about 1.39 points per arm (issue 44.2)."""
    rows = pd.read_csv(ROOT / "docs" / "reproduce" / "part_m" / "runs.csv")
    claim = next(c for c in SEED_CLAIMS if c.section == "m" and c.other == ("tacl", "tacl"))
    verdict = claim.judge(rows)
    assert verdict is not None and verdict.word == "cannot tell at this scale" and verdict.noise is None
    assert 1.2 < glue_average_sampling(rows, ("tacl", "tacl")) < 1.6
    twice = pd.concat([rows, rows.assign(seed=rows["seed"] + 1)])  # two seeds per arm, equal: only the dev sets' error
    verdict = claim.judge(twice)
    assert verdict.noise == pytest.approx(2**0.5 * glue_average_sampling(twice, ("tacl", "tacl")))


def test_sts_and_wic_claims_carry_their_sets_sampling_error() -> None:
    """STS-B dev's 1,500 pairs (Spearman, Fisher z with Fieller's 1.06) and WiC's 2,714 scored items (binomial)."""
    rows = pd.DataFrame({"part": ["tacl"] * 4, "variant": ["mlm_nsp", "mlm_nsp", "tacl", "tacl"],
                         "seed": [0, 1] * 2, "STS-B raw": [50.0, 50.0, 52.0, 52.0],
                         "WiC acc (held-out t)": [55.0, 55.0, 56.0, 56.0]})  # fmt: skip
    sts = next(c for c in SEED_CLAIMS if c.section == "c" and c.column == "STS-B raw").judge(rows)
    assert sts.noise == pytest.approx(2**0.5 * 100 * (1 - 0.51**2) * (1.06 / 1497) ** 0.5)
    wic = next(c for c in SEED_CLAIMS if c.section == "c" and c.column.startswith("WiC")).judge(rows)
    assert wic.noise == pytest.approx(2**0.5 * 100 * (0.555 * 0.445 / 2714) ** 0.5)


def test_the_probes_evaluation_set_sizes_are_the_files() -> None:
    shared = ROOT.parent / "shared" / "data"
    if not (shared / "sts-b" / "sts-dev.csv").is_file():
        pytest.skip("../shared/data is not here (a user's clone): the sizes are checked where it is")
    from degen_train.reproduce.claims import STS_B_DEV_PAIRS, WIC_SCORED_ITEMS

    assert len((shared / "sts-b" / "sts-dev.csv").read_text().splitlines()) == STS_B_DEV_PAIRS
    gold = (shared / "wic" / "train" / "train.gold.txt").read_text().splitlines()
    assert len(gold) - len(gold) // 2 == WIC_SCORED_ITEMS  # reproduce/runs.py's wic_halves scores the second half


def test_rewriting_keeps_the_rest_of_the_file_and_refuses_one_without_markers(tmp_path: Path) -> None:
    page = tmp_path / "page"
    page.mkdir()
    pd.DataFrame({"part": ["gao"] * 4, "variant": ["mle", "mle", "cosreg", "cosreg"],
                  "IsoScore": [0.05, 0.06, 0.5, 0.49]}).to_csv(page / "runs.csv", index=False)  # fmt: skip
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{BEGIN}\nold table\n{END}\nafter\n")
    rewrite_summary(doc, [(page, "a")])
    text = doc.read_text()
    assert text.startswith(f"before\n{BEGIN}\n\n{RULE}\n\nFrom [page/README.md]") and text.endswith(f"{END}\nafter\n")
    assert "| (a) | mle → cosreg | IsoScore | 0.055 → 0.495 |" in text and "old table" not in text
    (tmp_path / "bare.md").write_text("no block\n")
    with pytest.raises(ValueError, match=r"bare.md has no generated summary block"):
        rewrite_summary(tmp_path / "bare.md", [(page, "a")])


@pytest.mark.parametrize("task", ["RTE", "SST-2", "STS-B"])
def test_the_glue_dev_sizes_are_the_splits_sizes(task: str) -> None:
    from degen_train.finetune.tasks import load_glue_task

    glue = ROOT.parent / "shared" / "data" / "glue"
    if not glue.is_dir():
        pytest.skip(f"{glue} is not here (a user's clone has no ../shared): the sizes are checked where it is")
    dev = load_glue_task(task.lower().replace("-", ""), glue).dev
    assert sum(len(split) for split in dev.values()) == GLUE_DEV_ITEMS[task]


def test_a_claim_on_items_both_arms_were_scored_on_takes_the_paired_bootstrap(tmp_path: Path) -> None:
    """Issue 64.5: two arms scored on the same STS pairs, every run with its per-pair scores in eval.json: the page's
    paired_errors.csv holds the items' error (evaluation_noise.crossed_noise, recomputed here) and
    the summary judges with it in place of the two independent sampling errors."""
    import json

    import numpy as np

    from degen_train.metrics.evaluation_noise import ItemScores, crossed_noise
    from degen_train.reproduce.claims import PAIRED_FILE, paired_errors, read_paired_csv, with_paired
    from degen_train.reproduce.runs import Run

    claim = next(c for c in SEED_CLAIMS if c.section == "c" and c.column == "STS-B raw")
    draw = np.random.default_rng(0)
    gold = draw.uniform(0, 5, size=300)
    results, records = [], {claim.base: [], claim.other: []}
    for (part, variant), shift in ((claim.base, 1.0), (claim.other, 1.3)):
        for seed in range(2):
            folder = tmp_path / "runs" / part / variant / f"seed{seed}"
            (folder / "eval").mkdir(parents=True)
            prediction = shift * gold + draw.normal(scale=2.0, size=300)  # the same pairs, both arms
            record = {"kind": "spearman", "prediction": prediction.tolist(), "gold": gold.tolist(),
                      "ids": [f"{i}:pair" for i in range(300)]}  # fmt: skip
            (folder / "eval" / "eval.json").write_text(json.dumps({"items": {"sts/sts-dev": record}}))
            records[(part, variant)].append(ItemScores.of(record))
            run = Run(part, variant, seed, (), True, folder)
            results.append((run, {}))
    paired = paired_errors(results, list(all_claims()))
    row = paired[(paired["column"] == "STS-B raw") & (paired["other_variant"] == claim.other[1])]
    expected = crossed_noise(records[claim.base], records[claim.other]).standard_error
    assert len(row) == 1 and float(row["paired_se"].iloc[0]) == pytest.approx(expected) and expected > 0
    page = tmp_path / "page"
    page.mkdir()
    paired.to_csv(page / PAIRED_FILE, index=False)
    rows = pd.DataFrame({"part": [r.part for r, _ in results], "variant": [r.variant for r, _ in results],
                         "seed": [r.seed for r, _ in results],
                         "STS-B raw": [100 * float(pd.Series(s.columns["prediction"]).corr(
                             pd.Series(s.columns["gold"]), method="spearman")) for s in
                             records[claim.base] + records[claim.other]]})  # fmt: skip
    independent = claim.judge(rows)
    judged = claim.judge(with_paired(rows, read_paired_csv(page / PAIRED_FILE)))
    assert judged.sampled == "paired" and independent.sampled == "independent"
    seeds = [rows.loc[rows.variant == v, "STS-B raw"] for v in (claim.base[1], claim.other[1])]
    spread = sum(s.var(ddof=1) / len(s) for s in seeds)
    assert judged.noise == pytest.approx((spread + expected**2) ** 0.5)
    # issue 71.3: a run without per-item scores is named, and the claim takes each arm's own sampling error instead
    (results[0][0].folder / "eval" / "eval.json").write_text("{}")
    unpaired = paired_errors(results, list(all_claims()))
    row = unpaired[(unpaired["column"] == "STS-B raw") & (unpaired["other_variant"] == claim.other[1])]
    assert row["paired_se"].isna().all() and "items['sts/sts-dev']: kept no per-item scores" in row["unpaired"].iloc[0]
    assert str(results[0][0].folder) in row["unpaired"].iloc[0]
    judged = claim.judge(with_paired(rows, unpaired))
    assert judged.sampled == "independent" and "not paired: " in judged.line()
