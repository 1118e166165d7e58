"""The typed schemas of every file degen-report reads from a run folder it did not write this session: summary.json,
failed.json, analysis/metrics.json, an offline wandb summary, logs/metrics.csv and analysis/cone.png.

Each file is read through core.handed_files (a plain file, bounded, never a link, FIFO or device), then validated
here: keys degen-train does not read are allowed (a newer version may add some), keys it reads must have its types.
A file that does not fit is one line naming the file, the entry and what to do (RecordError); the report lists the
run as unreadable and goes on with the others.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from degen_train.core.handed_files import (
    IMAGE_BYTES,
    TABLE_BYTES,
    HandedOverFileError,
    json_record,
    plain_file_bytes,
    printable,
)

Number = float | None
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Record(BaseModel):
    """A record's section: unknown keys allowed, the keys read typed, every number finite (degen-train writes a
    non-finite value as null: core/io.atomic_write_json; a NaN, an infinity or an overflowing 1e400 in a handed-over
    record would reach a figure or an average)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


class RecordError(HandedOverFileError):
    """A handed-over record that does not fit its schema: the file, the entry and what to do."""


class StsScores(Record):
    raw: Number = None
    n: int | None = None  # the pairs scored


class WicScores(Record):
    accuracy: Number = None
    accuracy_threshold_fitted_on_scored_items: Number = None


class Wic(Record):
    raw: WicScores
    n: int | None = None  # the items scored


class W8A8(Record):
    perplexity_gap: Number = None
    sts_gap: Number = None


class Generation(Record):
    """eval.json's ``generation`` (evaluation/generation.py): each decoding's measures, the human row, the encoders."""

    decodings: dict[str, dict[str, Number]] = {}
    human: dict[str, Number] | None = None
    # each row's sampling error over prompts, by measure (a seeded bootstrap: metrics/evaluation_noise.bootstrap_se)
    sampling_error: dict[str, dict[str, Number]] = {}
    mauve_featurizer: str | None = None
    coherence_encoder: str | None = None  # coherence_simcse's
    coherence_encoder_pooling: str | None = None  # how its sentence vectors are pooled
    coherence_model: str | None = None  # coherence_opt's
    comparable_with: dict[str, str] = {}


class LmEval(Record):
    """eval.json's ``lm_eval`` (evaluation/lm_eval_tasks.py): per task, the harness's "metric,filter" values."""

    lm_eval_version: str | None = None
    tasks: dict[str, dict[str, Number | str]] = {}


class Evaluation(Record):
    """eval.json (degen-eval, a run's RUN/eval/eval.json; summary.json's ``eval``)."""

    sts: dict[str, StsScores] = {}
    wic: Wic | None = None
    w8a8: W8A8 | None = None
    generation: Generation | None = None
    lm_eval: LmEval | None = None
    # Per-item scores of a measure, by its runs-table column ("sts/NAME", "wic/accuracy"): {"kind": ..., COLUMN:
    # [one number per item]}, for a paired bootstrap between runs scored on the same items (metrics/evaluation_noise)
    items: dict[str, dict[str, str | list[float] | list[str]]] | None = None


class GlueTask(Record):
    mean: Number
    baselines: dict[str, float | str | None] = {}
    one_class: str | bool | None = None


class Glue(Record):
    tasks: dict[str, GlueTask] = {}
    average: Number = None


class WeightAveraging(Record):
    val_loss: Number = None
    val_perplexity: Number = None


class RecordedConfig(Record):
    objective: dict[str, Any] | None = None


class Code(Record):
    git_sha: str | None = None
    dirty: bool | None = None


class Provenance(Record):
    code: Code = Code()
    run_id: str | None = None


class Branched(Record):
    """summary.json's ``branched_from``: the parent's folder, the step, the parent's weights validated there."""

    run: str
    step: int
    validation: dict[str, Number] = {}


class Summary(Record):
    """RUN/summary.json, as run/pretrain.py writes it (the keys the report reads)."""

    final_step: int | None = None
    val_loss: Number = None
    val_perplexity: Number = None
    val_perplexity_of: str | None = None
    train_loss: Number = None
    tokens_per_s: Number = None
    time_to_first_step_s: Number = None  # this segment's, from its process's start (run/startup_clock.py)
    mfu: Number = None
    mfu_total: Number = None
    val_terms: dict[str, Number] | None = None
    train_terms: dict[str, Number] | None = None
    val_metrics: dict[str, Number] | None = None
    config: RecordedConfig | None = None
    weight_averaging: WeightAveraging | None = None
    isotropy: dict[str, Number] = {}
    eval: Evaluation = Evaluation()
    glue: Glue | None = None
    provenance: Provenance = Provenance()
    branched_from: Branched | None = None
    # Per-item records of the summary's own measures: val_perplexity's final validation, one item per batch
    # (data/validation_items.py), in Evaluation.items' form, for the report's bootstrap over validation batches
    items: dict[str, dict[str, str | list[float] | list[str]]] | None = None


class Failure(Record):
    """RUN/failed.json, as run/sweep.py writes it."""

    error: str
    overrides: list[str] = []


class AnalysedLayer(Record):
    mean_cosine: Number = None
    tacl_self_similarity: Number = None  # TaCL's, within a sentence (metrics/isotropy.tacl_self_similarity)
    self_similarity: Number = None  # the same, as analyses written before the rename name it
    word_self_similarity: Number = None  # Ethayarajh's, across a word's contexts


class Outliers(Record):
    max_kurtosis: Number = None
    max_inf_norm: Number = None
    massive_activations: Number = None
    attention_sink_rate: Number = None


class Analysis(Record):
    """RUN/analysis/metrics.json, as degen-analyze writes it: at least one layer."""

    layers: list[AnalysedLayer]
    outliers: Outliers | None = None
    generation: dict[str, Number] | None = None  # a decoder's greedy continuations: seq_rep_4, rep_128, distinct_n

    @field_validator("layers")
    @classmethod
    def _some_layer(cls, layers: list[AnalysedLayer]) -> list[AnalysedLayer]:
        if not layers:
            raise ValueError("an analysis measures at least one layer")
        return layers


class WandbSummary(Record):
    """An offline wandb run's files/wandb-summary.json: a mapping of metric names to values."""


Model = TypeVar("Model", bound=Record)
ADVICE = "replace the file by the run's own, or remove the run from the folder given"


def read_record(path: Path, schema: type[Model], *, what: str, within: Path | None = None) -> Model:
    """``path`` read safely (``within``: the handed-over folder it lies in, no link between them) and validated
    against ``schema``; RecordError names the file, the first entry that does not fit, its value and what degen-train
    writes there."""
    value = json_record(path, what=what, within=within)
    for entry, number in _non_finite(value):
        raise RecordError(f"{path}: {entry}={number}: not a finite number, where degen-train writes finite numbers or "
                          f"null ({what}); {ADVICE}")  # fmt: skip
    if not isinstance(value, dict):
        raise RecordError(f"{path}: holds a JSON {type(value).__name__}, where degen-train writes {what} as a mapping "
                          f"of keys; {ADVICE}")  # fmt: skip
    try:
        return schema.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        entry = ".".join(str(part) for part in first["loc"]) or "(top)"
        given = printable(repr(first.get("input")), 80)
        raise RecordError(f"{path}: {entry}={given}: {first['msg'].lower()} ({what}); {ADVICE}") from None


def _non_finite(value: Any, entry: str = "") -> list[tuple[str, float]]:
    """(entry, number) of every NaN or infinite number in a JSON value (json reads NaN, Infinity and 1e400)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [(entry or "(top)", value)]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _non_finite(item, f"{entry}.{key}".lstrip("."))]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _non_finite(item, f"{entry}[{index}]")]
    return []


def read_metrics_csv(path: Path, *, within: Path | None = None) -> pd.DataFrame:
    """RUN/logs/metrics.csv as a table (Lightning's CSV logger's file): a plain file within TABLE_BYTES, parsed by
    pandas; a step column of whole numbers is required, and no value is infinite (an empty cell is NaN: not logged
    at that step)."""
    data = plain_file_bytes(path, limit=TABLE_BYTES, what="metrics log", within=within)
    try:
        table = pd.read_csv(io.BytesIO(data))
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        reason = printable(str(error).splitlines()[0] if str(error) else type(error).__name__, 120)
        raise RecordError(f"{path}: not a CSV table as Lightning writes it ({reason}); {ADVICE}") from None
    if "step" not in table:
        raise RecordError(f"{path}: no step column, which every metrics log has; {ADVICE}")
    table["step"] = pd.to_numeric(table["step"], errors="coerce")
    numbers = table.select_dtypes("number")
    infinite = numbers.columns[numbers.isin([math.inf, -math.inf]).any()].tolist()
    if infinite:
        raise RecordError(f"{path}: {printable(infinite[0], 80)} holds an infinite or overflowing number, which no "
                          f"metrics log degen-train writes holds; {ADVICE}")  # fmt: skip
    steps = table["step"].dropna()
    if not (steps == steps.round()).all() or (steps.abs() > 2**53).any():
        raise RecordError(f"{path}: its step column holds a value that is no step count; {ADVICE}")
    return table


def read_png(path: Path, *, within: Path | None = None) -> bytes:
    """RUN/analysis/cone.png: a plain file within IMAGE_BYTES that starts as a PNG does."""
    data = plain_file_bytes(path, limit=IMAGE_BYTES, what="figure", within=within)
    if not data.startswith(PNG_SIGNATURE):
        raise RecordError(f"{path}: not a PNG image, as degen-analyze writes it; {ADVICE}")
    return data


SUMMARY_ITEMS = "summary"  # kept_items' name for RUN/summary.json's own records (val_perplexity's batches)


def kept_item_records(runs: list[Path], evaluation: str, record: str) -> list[tuple[str, dict | None]]:
    """Each run's per-item record ``record`` of RUN/EVALUATION/eval.json (RUN/summary.json's for SUMMARY_ITEMS)
    as ``(where it is, the record or None)``; RecordError naming the file where one does not fit its schema."""
    file = "summary.json" if evaluation == SUMMARY_ITEMS else f"{evaluation}/eval.json"
    return [(f"{run}/{file} items[{record!r}]", kept_items(run, evaluation).get(record)) for run in runs]


def kept_items(run: Path, evaluation: str = "eval") -> dict[str, dict[str, str | list[float] | list[str]]]:
    """The per-item records RUN/EVALUATION/eval.json keeps (``Evaluation.items``: STS pairs, WiC items, generation
    prompts, each with its items' ids) by measure, for a paired bootstrap; {} where the run kept none. A file that
    does not fit its schema is a RecordError naming it: a verdict says which noise it used instead."""
    import os

    if evaluation == SUMMARY_ITEMS:
        path = Path(run) / "summary.json"
        if not os.path.lexists(path):
            return {}
        return read_record(path, Summary, what="run summary", within=Path(run)).items or {}
    path = Path(run) / evaluation / "eval.json"
    if not os.path.lexists(path):
        return {}
    return read_record(path, Evaluation, what="evaluation", within=Path(run)).items or {}
