"""Every claim the reproduce pages judge, listed once: the pages write their verdict lines from this list, and
docs/reproduce.md's summary is generated from the same list over the pages' runs.csv (``summary``), so no sentence
written by hand can disagree with a page.

A claim compares one arm, (part, variant), with another in one column of runs.csv, in the direction its paper
states; verdicts.judge says shows, does not show or cannot tell at this scale. A GLUE claim adds the dev sets'
sampling error (verdicts.glue_sampling_error, from each task's dev size and metric).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from degen_train.metrics.probe_versions import COLUMN_PROBES, PROBES
from degen_train.reproduce.methods import METHOD_PARTS
from degen_train.reproduce.verdicts import (
    CONFIDENCE,
    RULE,
    Verdict,
    accuracy_sampling_error,
    correlation_sampling_error,
    glue_sampling_error,
    judge,
)

# The dev splits' sizes (GLUE's own: gluebenchmark.com's tasks; MNLI matched + mismatched). The test checks the ones
# in ../shared/data against these when it is there.
GLUE_DEV_ITEMS = {"RTE": 277, "SST-2": 872, "STS-B": 1500, "MRPC": 408, "CoLA": 1043, "QNLI": 5463, "QQP": 40430,
                  "MNLI": 9815 + 9832, "WNLI": 71}  # fmt: skip
GLUE_AVERAGE = "GLUE average"
# The probes' own evaluation sets (reproduce/runs.py): STS-B dev's 1,500 pairs scored by Spearman's ρ, and the held-out
# half of WiC's train split (5,428 items cut in two: 2,714 scored). The test checks them against ../shared/data.
STS_B_DEV_PAIRS = 1500
WIC_SCORED_ITEMS = 2714
EVALUATION_SETS = {
    **{column: ("spearman", STS_B_DEV_PAIRS) for column in ("STS-B raw", "STS-B whitened", "STS-B clipped",
                                                            "STS-B raw [CLS]")},
    "WiC acc (held-out t)": ("accuracy", WIC_SCORED_ITEMS),
}  # fmt: skip


@dataclass(frozen=True)
class Claim:
    section: str  # the page's section letter: a, b, ... n
    column: str  # a column of runs.csv
    base: tuple[str, str]  # (part, variant) of the arm the paper compares against
    other: tuple[str, str]  # (part, variant) of the method's arm
    expect: str  # lower | higher | same | not higher (verdicts.judge)
    paper: str = ""  # what the paper states, when the expectation alone does not say it

    def judge(self, rows: pd.DataFrame) -> Verdict | None:
        """The verdict on the rows (all of a page's runs.csv or a section's), None when an arm has no value."""
        arms = [_values(rows, arm, self.column) for arm in (self.base, self.other)]
        if any(not values for values in arms):
            return None
        sampling = (glue_average_sampling(rows, self.other) if self.column == GLUE_AVERAGE else
                    measure_sampling(self.column, arms))  # fmt: skip
        return judge(self.column, self.base[1], self.other[1], arms[0], arms[1], expect=self.expect,
                     sampling=sampling)  # fmt: skip

    def line(self, rows: pd.DataFrame, *, label: str | None = None) -> str:
        """The page's verdict line ("- column: ... **word**"), with the paper's statement when there is one."""
        verdict = self.judge(rows)
        if verdict is None:
            return f"- {label or self.column}: not measured"
        text = verdict.line()
        if label:
            text = text.replace(self.column, label, 1)
        return f"- {text}" + (f" ({self.paper})" if self.paper else "")


def _values(rows: pd.DataFrame, arm: tuple[str, str], column: str) -> list[float]:
    if column not in rows:
        return []
    part, variant = arm
    return rows.loc[(rows["part"] == part) & (rows["variant"] == variant), column].dropna().tolist()


def measure_sampling(column: str, arms: list[list[float]]) -> float:
    """Each arm's evaluation-set standard error for ``column`` (at the two arms' mean score), STS-B's and WiC's from
    EVALUATION_SETS; 0 for a measure without one recorded (perplexity, the W8A8 gap: their per-document values are
    not on the pages)."""
    kind_items = EVALUATION_SETS.get(column)
    if kind_items is None:
        return 0.0
    kind, items = kind_items
    score = sum(sum(values) / len(values) for values in arms) / len(arms)
    if kind == "accuracy":
        return accuracy_sampling_error(score, items)
    return correlation_sampling_error(score, items, spearman=True)


def glue_average_sampling(rows: pd.DataFrame, arm: tuple[str, str]) -> float:
    """The dev sets' sampling error of an arm's GLUE average: each task column's mean score and dev size."""
    scores = {}
    for column in rows.columns:
        task = column.removeprefix("GLUE ")
        if column.startswith("GLUE ") and task in GLUE_DEV_ITEMS and task != "WNLI":
            values = _values(rows, arm, column)
            if values:
                scores[task.lower().replace("-", "")] = (sum(values) / len(values), GLUE_DEV_ITEMS[task])
    return glue_sampling_error(scores) if scores else 0.0


SEED_CLAIMS = [
    Claim("a", "embedding mean cos", ("gao", "mle"), ("gao", "cosreg"), "lower"),
    Claim("a", "IsoScore", ("gao", "mle"), ("gao", "cosreg"), "higher"),
    Claim("a", "val perplexity", ("gao", "mle"), ("gao", "cosreg"), "lower",
          "Gao et al. report lower perplexity with CosReg (Table 1)"),  # fmt: skip
    Claim("a", "valid perplexity (word)", ("gao", "mle"), ("gao", "cosreg"), "lower",
          "Gao et al. report 52.0 → 50.0 per word on WikiText-2 with an AWD-LSTM"),  # fmt: skip
    Claim("b", "rare-token mean cos", ("gao", "mle"), ("gao", "cosreg"), "lower"),
    Claim("c", "last-layer self-similarity", ("tacl", "mlm_nsp"), ("tacl", "tacl"), "lower"),
    Claim("c", "STS-B raw", ("tacl", "mlm_nsp"), ("tacl", "tacl"), "higher"),
    Claim("c", "WiC acc (held-out t)", ("tacl", "mlm_nsp"), ("tacl", "tacl"), "higher"),
    Claim("d", "random-pair cos", ("coco", "electra"), ("coco", "coco_lm"), "lower"),
    Claim("d", "STS-B raw", ("coco", "electra"), ("coco", "coco_lm"), "higher"),
    Claim("d", "ℓ_uniform [CLS]", ("coco", "electra"), ("coco", "coco_lm"), "lower",
          "COCO-LM: its sequence contrast ensures uniformity of the sequence representations"),  # fmt: skip
    Claim("m", GLUE_AVERAGE, ("tacl", "mlm_nsp"), ("tacl", "tacl"), "higher",
          "TaCL reports GLUE dev 79.6 → 81.2 over BERT-base"),  # fmt: skip
    Claim("m", GLUE_AVERAGE, ("coco", "electra"), ("coco", "coco_lm"), "higher",
          "COCO-LM reports higher GLUE dev than ELECTRA at every size"),  # fmt: skip
]


def method_claims(name: str) -> tuple[list[Claim], list[Claim]]:
    """A method part's claims against its baseline, and against its control (empty when it has none)."""
    part = METHOD_PARTS[name]
    letter = part.title[1]
    against_base = [Claim(letter, column, part.baseline, (name, name), expect)
                    for column, expect in part.expectations.items()]  # fmt: skip
    against_control = [Claim(letter, column, (name, "control"), (name, name), expect)
                       for column, expect in part.control_expectations.items()]  # fmt: skip
    return against_base, against_control


def all_claims() -> Iterator[Claim]:
    yield from SEED_CLAIMS
    for name in METHOD_PARTS:
        for claims in method_claims(name):
            yield from claims


WRITTEN_ON = re.compile(r"^Written by .* on (\d{4}-\d{2}-\d{2})", re.MULTILINE)


STAMP = "probe versions"  # a runs.csv column: the probes' versions that measured the row (JSON), reproduce/page.py


def measured_version(rows: pd.DataFrame, claim: Claim, probe: str, day: str) -> int:
    """The version of ``probe`` that measured the claim's two arms: the oldest stamped on their rows, or, for rows
    written before the stamps, the version the probe had on the day the page was written."""
    import json

    arms = rows[rows[["part", "variant"]].apply(tuple, axis=1).isin([claim.base, claim.other])]
    stamps = [json.loads(text).get(probe) for text in arms.get(STAMP, pd.Series(dtype=str)).dropna()]
    known = [version for version in stamps if isinstance(version, int)]
    if known and len(known) == len(arms):
        return min(known)
    return PROBES[probe].version_on(day or "0000-00-00")


def older_probe(rows: pd.DataFrame, claim: Claim, day: str) -> str:
    """Why the claim's numbers are an older probe's than the current one (metrics/probe_versions.py), or ''."""
    probe = COLUMN_PROBES.get(claim.column)
    if probe is None:
        return ""
    then, now = measured_version(rows, claim, probe, day), PROBES[probe].version
    if then >= now:
        return ""
    return f"measured by the {probe} probe v{then}, now v{now} ({'; '.join(PROBES[probe].changes_since(then))})"


def written_on(page: Path) -> str:
    """The day a reproduce page says it was written (its README's first lines), '' when it does not say."""
    readme = page / "README.md"
    found = WRITTEN_ON.search(readme.read_text(encoding="utf-8")) if readme.exists() else None
    return found.group(1) if found else ""


def summary(pages: list[tuple[Path, str]], root: Path) -> str:
    """Markdown: every claim of the sections ``letters`` judged on each page's runs.csv (pages as (folder under
    ``root``, letters)), one table row each; a number an older probe measured (its stamp, or the page's day against
    the probe's changelog) is marked in place of its verdict."""
    lines = [RULE, ""]
    for page, letters in pages:
        rows = pd.read_csv(page / "runs.csv")
        day = written_on(page)
        judged = []
        for claim in all_claims():
            verdict = claim.judge(rows) if claim.section in letters else None
            if verdict is None:
                continue
            older = older_probe(rows, claim, day)
            word = f"superseded: {older}" if older else f"**{verdict.word}**"
            judged.append(f"| ({claim.section}) | {claim.base[1]} → {claim.other[1]} | {claim.column} | "
                          f"{verdict.before:.4g} → {verdict.after:.4g} | {verdict.effect:+.3g} "
                          f"{verdict.interval_text()} | {claim.expect} | {word} |")  # fmt: skip
        if judged:
            link = (page / "README.md").relative_to(root).as_posix()
            lines += [f"From [{link}]({link}), sections {', '.join(f'({x})' for x in letters)}:", "",
                      f"| part | arms | measure | means | effect ± its {CONFIDENCE:.0%} interval | expected | "
                      "verdict |",
                      "| --- | --- | --- | --- | --- | --- | --- |", *judged, ""]  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"


BEGIN = "<!-- generated by `degen-reproduce summary` from the pages' runs.csv (conf/reproduce.yaml: summary) -->"
END = "<!-- end of the generated summary -->"


def rewrite_summary(doc: Path, pages: list[tuple[Path, str]]) -> str:
    """Replace the generated block of ``doc`` (between BEGIN and END) by summary(pages); the rest of the file is
    kept. Refused, naming the file, when the block's markers are missing."""
    from degen_train.core.io import atomic_write_text, utf8_text

    text = utf8_text(doc, what="summary page")
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc} has no generated summary block: put the lines {BEGIN!r} and {END!r} where it goes")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    block = summary(pages, doc.parent)
    atomic_write_text(doc, f"{head}{BEGIN}\n\n{block}\n{END}{tail}")
    return block
