"""Every claim the reproduce pages judge, listed once: the pages write their verdict lines from this list, and
docs/reproduce.md's summary is generated from the same list over the pages' runs.csv (``summary``), so no sentence
written by hand can disagree with a page.

A claim compares one arm, (part, variant), with another in one column of runs.csv, in the direction its paper
states; verdicts.judge says shows, does not show or cannot tell at this scale. Where both arms were scored on the
same items and every run kept its per-item scores (ITEM_RECORDS), the evaluation set's term is a paired bootstrap
over those items, written beside runs.csv in paired_errors.csv when the page is written and read back by the
summary; else each arm's own sampling error is added as if scored on different sets (EVALUATION_SETS), and a GLUE
claim adds the dev sets' sampling error (verdicts.glue_sampling_error, from each task's dev size and metric).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from degen_train.metrics.evaluation_noise import (
    accuracy_sampling_error,
    correlation_sampling_error,
    glue_sampling_error,
)
from degen_train.metrics.probe_versions import COLUMN_PROBES, PROBES
from degen_train.metrics.verdicts import CONFIDENCE, RULE, Verdict, judge
from degen_train.reproduce.methods import METHOD_PARTS

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
# Where a run keeps the per-item scores of a column: (its evaluation folder, the record in that eval.json's ``items``).
ITEM_RECORDS = {"STS-B raw": ("eval", "sts/sts-dev"), "STS-B raw [CLS]": ("eval_cls", "sts/sts-dev"),
                "WiC acc (held-out t)": ("eval", "wic/accuracy")}  # fmt: skip
PAIRED_FILE = "paired_errors.csv"  # beside a page's runs.csv: (column, base, other) -> the paired bootstrap's SE
PAIRED_COLUMNS = ["column", "base_part", "base_variant", "other_part", "other_variant", "paired_se", "items",
                  "resamples", "unpaired"]  # fmt: skip


@dataclass(frozen=True)
class Claim:
    section: str  # the page's section letter: a, b, ... n
    column: str  # a column of runs.csv
    base: tuple[str, str]  # (part, variant) of the arm the paper compares against
    other: tuple[str, str]  # (part, variant) of the method's arm
    expect: str  # lower | higher | same | not higher (verdicts.judge)
    paper: str = ""  # what the paper states, when the expectation alone does not say it
    base_column: str = ""  # the base arm's column where it differs (MLE's greedy rep-2 against contrastive rep-2)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.column if not self.base_column else f"{self.base_column} | {self.column}", *self.base, *self.other)

    @property
    def label(self) -> str:
        """The measure as the verdict names it: the column, or 'BASE COLUMN → COLUMN' across columns."""
        return f"{self.base_column} → {self.column}" if self.base_column else self.column

    def judge(self, rows: pd.DataFrame) -> Verdict | None:
        """The verdict on the rows (all of a page's runs.csv or a section's), None when an arm has no value; the
        paired bootstrap's error where ``rows.attrs["paired"]`` holds one for this claim (``paired_errors``)."""
        columns = (self.base_column or self.column, self.column)
        arms = [_values(rows, arm, column) for arm, column in zip((self.base, self.other), columns, strict=True)]
        if any(not values for values in arms) or self.too_short(rows):
            return None
        sampling = (glue_average_sampling(rows, self.other) if self.column == GLUE_AVERAGE else
                    written_sampling(rows, self, columns) or measure_sampling(self.column, arms))  # fmt: skip
        paired, note = self.items_noise(rows, arms)
        return judge(self.label, self.base[1], self.other[1], arms[0], arms[1], expect=self.expect,
                     sampling=sampling, paired=paired, note=note)  # fmt: skip

    def too_short(self, rows: pd.DataFrame) -> str:
        """Why a generation claim is not measured: a decoding whose continuations keep fewer than
        FEWEST_KEPT_TOKENS tokens on average in its arm (its `DECODING kept tokens` column); '' otherwise."""
        from degen_train.metrics.verdicts import FEWEST_KEPT_TOKENS
        from degen_train.reproduce.methods import GENERATION_DECODINGS

        for arm, column in ((self.base, self.base_column or self.column), (self.other, self.column)):
            decoding = column.partition(" ")[0]
            kept = _values(rows, arm, f"{decoding} kept tokens") if decoding in GENERATION_DECODINGS else []
            if kept and sum(kept) / len(kept) < FEWEST_KEPT_TOKENS:
                return (f"continuations end within {FEWEST_KEPT_TOKENS} tokens ({arm[1]}'s {decoding} kept "
                        f"{sum(kept) / len(kept):.1f} on average)")  # fmt: skip
        return ""

    def items_noise(self, rows: pd.DataFrame, arms: list[list[float]]) -> tuple[float | None, str]:
        """(the items' share of the SE from the page's paired errors, or None; why it is not paired where it could
        be). A paired_se larger than twice the largest value either arm holds cannot be a difference's bootstrap
        error and is set aside, named."""
        paired = rows.attrs.get("paired", {}).get(self.key)
        unpaired = rows.attrs.get("unpaired", {}).get(self.key)
        if unpaired:
            return None, f"not paired: {unpaired}"
        largest = max(abs(v) for arm in arms for v in arm)
        if paired is not None and paired > 2 * largest:
            return None, (f"not paired: paired_errors.csv's paired_se {paired:.3g} is more than twice the largest "
                          f"value ({largest:.3g}) either arm holds")  # fmt: skip
        if paired is None and item_record(self.base_column or self.column) and item_record(self.column) and \
                (rows.attrs.get("paired") or rows.attrs.get("unpaired")):  # fmt: skip
            return None, "not paired: the page's paired_errors.csv has no row for this claim"
        return paired, ""

    def line(self, rows: pd.DataFrame, *, label: str | None = None) -> str:
        """The page's verdict line ("- column: ... **word**"), with the paper's statement when there is one."""
        verdict = self.judge(rows)
        if verdict is None:
            short = self.too_short(rows)
            return f"- {label or self.label}: not measured" + (f": {short}" if short else "")
        text = verdict.line()
        if label:
            text = text.replace(self.label, label, 1)
        return f"- {text}" + (f" ({self.paper})" if self.paper else "")


def _values(rows: pd.DataFrame, arm: tuple[str, str], column: str) -> list[float]:
    if column not in rows:
        return []
    part, variant = arm
    return rows.loc[(rows["part"] == part) & (rows["variant"] == variant), column].dropna().tolist()


def written_sampling(rows: pd.DataFrame, claim: Claim, columns: tuple[str, str]) -> float:
    """The sampling error the runs wrote for the claim's columns (a generation measure's bootstrap over prompts,
    ``COLUMN sampling error``): the root mean square over both arms' runs; 0 where none was written."""
    errors = [value for arm, column in zip((claim.base, claim.other), columns, strict=True)
              for value in _values(rows, arm, f"{column} sampling error")]  # fmt: skip
    return (sum(e * e for e in errors) / len(errors)) ** 0.5 if errors else 0.0


def item_record(column: str) -> tuple[str, str] | None:
    """(the evaluation folder, the eval.json ``items`` record) of a runs.csv column's per-item scores, or None."""
    if column in ITEM_RECORDS:
        return ITEM_RECORDS[column]
    from degen_train.reproduce.methods import GENERATION_DECODINGS, GENERATION_MEASURES

    decoding, _, measure = column.partition(" ")
    if decoding in GENERATION_DECODINGS and measure in GENERATION_MEASURES:
        return "eval", f"generation/{decoding}/{GENERATION_MEASURES[measure]}"
    return None


def paired_errors(results: list, claims: list[Claim]) -> pd.DataFrame:
    """PAIRED_COLUMNS for each claim on an ITEM_RECORDS column whose runs (``results``: (reproduce Run, result)) kept
    their per-item scores: the crossed design's items term (metrics/evaluation_noise.crossed_noise, the runs paired by
    item id); where they cannot be paired, a row with no paired_se and the reason in ``unpaired``."""
    from degen_train.config.records import kept_item_records
    from degen_train.core.handed_files import HandedOverFileError
    from degen_train.metrics.evaluation_noise import noise_of_records

    found = []
    for claim in claims:
        records = (item_record(claim.base_column or claim.column), item_record(claim.column))
        if None in records:
            continue
        arms = [[run.folder for run, _ in results if (run.part, run.variant) == arm] for arm in (claim.base,
                                                                                                  claim.other)]
        if not all(arms):
            continue
        try:
            noise, unpaired = noise_of_records(*(kept_item_records(runs, *where) for runs, where in
                                                 zip(arms, records, strict=True)))  # fmt: skip
        except HandedOverFileError as error:
            noise, unpaired = None, f"not paired: {error}"
        if noise is not None:
            found.append([*claim.key, noise.standard_error, noise.items, noise.resamples, ""])
        elif unpaired:
            found.append([*claim.key, None, None, None, unpaired.removeprefix("not paired: ")])
    return pd.DataFrame(found, columns=PAIRED_COLUMNS)


def with_paired(rows: pd.DataFrame, paired: pd.DataFrame) -> pd.DataFrame:
    """``rows`` carrying the paired errors (``rows.attrs["paired"]``: a claim's key -> SE; ``rows.attrs["unpaired"]``:
    a claim's key -> why its items could not be paired) for Claim.judge."""
    rows.attrs["paired"] = {tuple(r[:5]): float(r[5]) for r in paired[PAIRED_COLUMNS].itertuples(index=False)
                            if r[5] is not None and not pd.isna(r[5])}  # fmt: skip
    rows.attrs["unpaired"] = {tuple(r[:5]): str(r[8]) for r in paired[PAIRED_COLUMNS].itertuples(index=False)
                              if isinstance(r[8], str) and r[8]}  # fmt: skip
    return rows


def read_paired_csv(path: Path) -> pd.DataFrame:
    """A page's paired_errors.csv, read as data (a plain file, bounded; every error finite and ≥ 0, every count a
    whole number of at least 2); an empty table where the page has none (written before paired errors, or its runs
    kept no per-item scores). A page written before item ids (no ``unpaired`` column) is read as it is: its errors
    hold the run × item term too, an overstatement."""
    import io
    import math
    import os

    from degen_train.core.handed_files import TABLE_BYTES, plain_file_bytes

    if not os.path.lexists(path):
        return pd.DataFrame(columns=PAIRED_COLUMNS)
    table = pd.read_csv(io.BytesIO(plain_file_bytes(path, limit=TABLE_BYTES)), dtype=str, keep_default_na=False)
    if "unpaired" not in table:
        table["unpaired"] = ""
    missing = [c for c in PAIRED_COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} column, which every paired_errors.csv has")
    given = table["unpaired"] == ""
    errors = pd.to_numeric(table["paired_se"].where(given), errors="coerce")
    counts = pd.to_numeric(table["items"].where(given), errors="coerce")
    bad = given & (errors.isna() | ~errors.map(lambda v: math.isfinite(v) if v == v else False) | (errors < 0) |
                   counts.isna() | (counts < 2) | (counts != counts.round()))  # fmt: skip
    if bad.any():
        row = table[bad].iloc[0]
        raise ValueError(f"{path}: the row of {row['column']!r} ({row['other_variant']}) holds paired_se "
                         f"{row['paired_se']!r} over {row['items']!r} items: an error must be a finite number ≥ 0 "
                         f"over at least 2 items; rewrite the page (degen-reproduce)")  # fmt: skip
    table["paired_se"] = errors.where(given, None)
    return table


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
    against_base += [Claim(letter, column, (part.baseline[0], base), (name, name),
                           expect, base_column=base_column)
                     for base, base_column, column, expect in part.compared]  # fmt: skip
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
        rows = with_paired(read_runs_csv(page / "runs.csv"), read_paired_csv(page / PAIRED_FILE))
        day = written_on(page)
        ran = set(rows["part"].dropna().astype(str)) if "part" in rows.columns else set()
        judged = []
        for claim in all_claims():
            # A section's claims of a part this page never ran are another page's (part (f)'s generation side has
            # its own page); an arm missing from a part it ran is said, never dropped.
            if claim.section not in letters or claim.other[0] not in ran:
                continue
            verdict = claim.judge(rows)
            if verdict is None:  # an arm without a value on this page: said, never dropped
                short = claim.too_short(rows)
                judged.append(f"| ({claim.section}) | {claim.base[1]} → {claim.other[1]} | {claim.label} | | | "
                              f"{claim.expect} | not measured{': ' + short if short else ''} |")  # fmt: skip
                continue
            older = older_probe(rows, claim, day)
            word = f"superseded: {older}" if older else f"**{verdict.word}**"
            judged.append(f"| ({claim.section}) | {claim.base[1]} → {claim.other[1]} | {claim.label} | "
                          f"{verdict.before:.4g} → {verdict.after:.4g} | {verdict.effect:+.3g} "
                          f"{verdict.interval_text()} | {claim.expect} | {word} |")  # fmt: skip
        if judged:
            link = (page / "README.md").relative_to(root).as_posix()
            lines += [f"From [{link}]({link}), sections {', '.join(f'({x})' for x in letters)}:", "",
                      f"| part | arms | measure | means | effect ± its {CONFIDENCE:.0%} interval | expected | "
                      "verdict |",
                      "| --- | --- | --- | --- | --- | --- | --- |", *judged, ""]  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"


def read_runs_csv(path: Path) -> pd.DataFrame:
    """A page's runs.csv, read as data (a plain file, bounded): part and variant as text, every measure a finite
    number or empty; a cell that is neither (a spreadsheet formula, text, an infinity) is one line naming the file,
    the column and the cell."""
    import io
    import math

    from degen_train.core.handed_files import TABLE_BYTES, plain_file_bytes, printable

    try:
        rows = pd.read_csv(io.BytesIO(plain_file_bytes(path, limit=TABLE_BYTES, what="reproduce page table")))
    except (ValueError, pd.errors.ParserError) as error:
        raise ValueError(f"{path}: not a CSV table as degen-reproduce writes it ({printable(error, 120)})") from None
    for needed in ("part", "variant"):
        if needed not in rows:
            raise ValueError(f"{path}: no {needed} column, which every reproduce page's runs.csv has")
    claimed = {column for claim in all_claims() for column in (claim.column, claim.base_column) if column}
    from degen_train.reproduce.methods import GENERATION_DECODINGS

    measured = claimed | {f"{c} sampling error" for c in claimed} | {c for c in rows if str(c).startswith("GLUE ")}
    measured |= {f"{decoding} kept tokens" for decoding in GENERATION_DECODINGS}  # a claim's "not measured" reads it
    for column in [c for c in rows if c in measured]:
        numbers = pd.to_numeric(rows[column], errors="coerce")
        bad = rows[column][(numbers.isna() & rows[column].notna()) | numbers.isin([math.inf, -math.inf])]
        if len(bad):
            raise ValueError(
                f"{path}: {column}={printable(bad.iloc[0], 80)} (row {bad.index[0] + 2}) is not a finite number; a "
                f"page's measures are numbers or empty: regenerate the page, or fix the cell"
            )
        rows[column] = numbers
    return rows


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
