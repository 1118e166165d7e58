"""The measures a sweep's verdicts judge, by the columns of its runs table: which way each is better, what it is, and
its evaluation set's error (per-item scores a run kept for a paired bootstrap, else each arm's own sampling error)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from degen_train.metrics.verdicts import FEWEST_KEPT_TOKENS  # noqa: F401 - the report's default, named where it reads

# Column pattern -> (the better direction, what the measure is). A column no pattern names is not judged (speed, MFU,
# step counts: the machine's load as much as the method's).
DIRECTIONS: list[tuple[str, str, str]] = [
    (r"^(val_objective_loss|val_perplexity|val_loss)$|^average/val_", "lower", "the model's own loss, a cost"),
    (r"mean_cosine|self_similarity|top1_variance_share", "lower", "the cone"),
    (r"isoscore$", "higher", "the cone"),
    (r"max_kurtosis|max_inf_norm|massive_activations|attention_sink_rate", "lower", "outliers"),
    (r"seq_rep_4|rep_128|/rep_\d$", "lower", "repetition"),
    (r"distinct_\d|/diversity$|/mauve$|/coherence", "higher", "diversity"),
    (r"^sts/|^wic/accuracy$|^glue/average$|^glue/\w+$|^lm_eval/", "higher", "a probe"),
    (r"^w8a8/", "lower", "the quantization gap"),
]
# Measures scored on an evaluation set whose size fixes its sampling error: (kind, how many items) where the runs do
# not say it themselves (their per-item scores are read instead when kept).
SAMPLING = {r"^wic/accuracy$": "accuracy"}


def direction_of(measure: str) -> tuple[str, str] | None:
    """(``lower`` or ``higher``: the better direction, what the measure is), or None for a column not judged."""
    for pattern, better, what in DIRECTIONS:
        if re.search(pattern, measure):
            return better, what
    return None


def measures_in(table: pd.DataFrame) -> list[str]:
    """The numeric columns of ``table`` a verdict judges, in the table's order."""
    like_for_like = "val_objective_loss" in table  # val_loss adds each run's weighted regularizers: not comparable
    noise = (" items", " sampling error")  # the size or error of a measure's evaluation set, not a measure
    return [c for c in table.columns if direction_of(str(c)) is not None and not str(c).endswith(noise)
            and not str(c).startswith("generation/human/")  # the human continuations: a reference, not an arm
            and not (like_for_like and c == "val_loss")
            and pd.api.types.is_numeric_dtype(table[c]) and table[c].notna().any()]  # fmt: skip


def items_noise(base: list[Path], other: list[Path], records: tuple[tuple[str, str], tuple[str, str]]):  # noqa: ANN201
    """(the crossed design's items term of the two arms' difference, metrics/evaluation_noise.noise_of_records, the
    runs paired by item id; why it could not be paired, in one line naming the file). ``records``: each arm's
    (evaluation folder, eval.json ``items`` record). (None, "") where no run kept per-item scores for it."""
    from degen_train.config.records import kept_item_records
    from degen_train.core.handed_files import HandedOverFileError, printable
    from degen_train.metrics.evaluation_noise import noise_of_records

    try:
        arms = [kept_item_records(runs, *where) for runs, where in zip((base, other), records, strict=True)]
    except HandedOverFileError as error:
        return None, f"not paired: {printable(str(error), 300)}; each arm's own sampling error instead"
    noise, note = noise_of_records(*arms)
    return noise, printable(note, 1000) if note else ""


def sampling_error_of(measure: str, mean: float, rows: pd.DataFrame) -> float:
    """Each arm's own evaluation-set sampling error where the runs kept no per-item scores: the one the runs wrote
    (a generation measure's bootstrap over prompts, root-mean-square over runs); STS Spearman by Fisher's z over
    its pairs, WiC and GLUE accuracies by the binomial, where the runs say how many items; 0 otherwise."""
    from degen_train.metrics.evaluation_noise import accuracy_sampling_error, correlation_sampling_error

    written = rows.get(f"{measure} sampling error")
    if written is not None and written.notna().any():
        return float((written.dropna() ** 2).mean() ** 0.5)

    counts = rows.get(f"{measure} items")
    items = int(counts.dropna().iloc[0]) if counts is not None and counts.notna().any() else None
    if items is None or items < 4:
        return 0.0
    if measure.startswith("sts/"):
        return correlation_sampling_error(mean, items, spearman=True)
    if measure.startswith(("wic/", "glue/")):
        return accuracy_sampling_error(mean, items)
    return 0.0
