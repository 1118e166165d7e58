"""GLUE tasks as the official download writes them (``glue_data/TASK/{train,dev}.tsv``), and a user's own task.

The nine layouts differ, as the GLUE paper's task descriptions and the ``glue`` loading script of the ``datasets``
project document them: CoLA has no header (source, label, original label, sentence); MRPC's header starts with a
byte-order mark; STS-B's label is a 0-5 score (regression); MNLI has two dev files (matched, mismatched) with more
columns than its train file; no file quotes its fields (a ``"`` is text). Every row is checked against its file's
column count and every label against the task's set: a file that does not fit is refused naming the file, the line
and what was expected.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from degen_train.core.io import json_lines, utf8_text

REGRESSION = None  # TaskLayout.labels of a regression task


@dataclass(frozen=True)
class TaskLayout:
    """Where one task's files are and how to read them. ``text``/``label``: header names, or indices without one."""

    name: str
    folder: str
    text: tuple[str | int, ...]
    label: str | int
    labels: tuple[str, ...] | None  # the label strings in the files, in id order; None: a regression score
    metrics: tuple[str, ...]
    header: bool = True
    columns: int | None = None  # an exact count (files without a header); with a header, the header's count
    dev_splits: tuple[str, ...] = ("dev",)


GLUE_TASKS: dict[str, TaskLayout] = {
    t.name: t
    for t in (
        TaskLayout("cola", "CoLA", (3,), 1, ("0", "1"), ("matthews",), header=False, columns=4),
        TaskLayout("sst2", "SST-2", ("sentence",), "label", ("0", "1"), ("accuracy",)),
        TaskLayout("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), ("f1", "accuracy")),
        TaskLayout("qqp", "QQP", ("question1", "question2"), "is_duplicate", ("0", "1"), ("f1", "accuracy")),
        TaskLayout("stsb", "STS-B", ("sentence1", "sentence2"), "score", REGRESSION, ("pearson", "spearman")),
        TaskLayout("mnli", "MNLI", ("sentence1", "sentence2"), "gold_label",
                   ("entailment", "neutral", "contradiction"), ("accuracy",),
                   dev_splits=("dev_matched", "dev_mismatched")),  # fmt: skip
        TaskLayout("qnli", "QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment"), ("accuracy",)),
        TaskLayout("rte", "RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"), ("accuracy",)),
        TaskLayout("wnli", "WNLI", ("sentence1", "sentence2"), "label", ("0", "1"), ("accuracy",)),
    )
}
STS_RANGE = (0.0, 5.0)


@dataclass
class Split:
    """One split of a task: texts (one tuple per row: one or two segments) and labels (ids, or scores)."""

    texts: list[tuple[str, ...]]
    labels: list[int] | list[float]
    source: Path

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class Task:
    layout: TaskLayout
    train: Split
    dev: dict[str, Split] = field(default_factory=dict)

    @property
    def num_labels(self) -> int:
        return 1 if self.layout.labels is None else len(self.layout.labels)


def load_glue_task(name: str, glue_dir: str | Path) -> Task:
    """Read TASK's train and dev files from ``glue_dir`` (the folder holding RTE/, SST-2/, ...)."""
    key = name.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; the tasks: {', '.join(GLUE_TASKS)} (or a task of your own)")
    layout = GLUE_TASKS[key]
    folder = Path(glue_dir).expanduser() / layout.folder
    files = {split: folder / f"{split}.tsv" for split in ("train", *layout.dev_splits)}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{layout.name}: {', '.join(missing)} missing: point the data folder at GLUE's download "
            f"(the folder holding {layout.folder}/{{{','.join(files)}}}.tsv)"
        )
    splits = {split: read_tsv_split(layout, path) for split, path in files.items()}
    return Task(layout, splits.pop("train"), splits)


def read_tsv_split(layout: TaskLayout, path: Path) -> Split:
    """One GLUE file, every row and label checked (file, line and what was expected named on failure)."""
    rows = csv_rows(path, lambda handle: csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or (layout.header and len(rows) < 2):
        raise ValueError(f"{path}: no rows; expected GLUE {layout.folder}'s layout")
    if layout.header:
        header, body, first_line = rows[0], rows[1:], 2
        lacking = [c for c in (*layout.text, layout.label) if c not in header]
        if lacking:
            raise ValueError(
                f"{path}, line 1: the header lacks {', '.join(map(repr, lacking))}; expected GLUE "
                f"{layout.folder}'s columns ({', '.join(map(str, (*layout.text, layout.label)))}), got {header}"
            )
        width = len(header)
        text_at = [header.index(str(c)) for c in layout.text]
        label_at = header.index(str(layout.label))
    else:
        body, first_line, width = rows, 1, int(layout.columns or 0)
        text_at, label_at = [int(c) for c in layout.text], int(layout.label)
    texts, labels = [], []
    for number, row in enumerate(body, first_line):
        if len(row) != width:
            raise ValueError(
                f"{path}, line {number}: {len(row)} tab-separated fields, expected {width} (GLUE {layout.folder}"
                f"{' without a header' if not layout.header else ''})"
            )
        texts.append(tuple(row[i] for i in text_at))
        labels.append(parse_label(layout, row[label_at], f"{path}, line {number}"))
    return Split(texts, labels, path)


def parse_label(layout: TaskLayout, value: str, where: str) -> int | float:
    if layout.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = float("nan")
        if not STS_RANGE[0] <= score <= STS_RANGE[1]:
            raise ValueError(f"{where}: label {value!r} is not a score in [{STS_RANGE[0]}, {STS_RANGE[1]}]")
        return score
    if value not in layout.labels:
        raise ValueError(f"{where}: label {value!r} is not one of {', '.join(layout.labels)} ({layout.name})")
    return layout.labels.index(value)


def load_custom_task(
    name: str, train: str | Path, dev: str | Path, *, text_columns: list[str], label_column: str,
    regression: bool = False,
) -> Task:  # fmt: skip
    """A user's task: CSV, TSV or JSON-lines files with named text column(s) and a label column. Class labels are
    the training file's distinct values (sorted); a dev label outside them is refused."""
    if not 1 <= len(text_columns) <= 2:
        raise ValueError(f"{name}: text columns {text_columns}: give one (a sentence) or two (a pair)")
    rows = {"train": _read_records(Path(train), [*text_columns, label_column]),
            "dev": _read_records(Path(dev), [*text_columns, label_column])}  # fmt: skip
    classes = None if regression else tuple(sorted({str(r[label_column]) for r in rows["train"][1]}))
    if classes is not None:
        refuse_mixed_labels(*rows["train"], label_column)
    if classes is not None and len(classes) < 2:
        raise ValueError(f"{train}: column {label_column!r} holds {len(classes)} distinct label(s): nothing to learn")
    layout = TaskLayout(name, str(Path(train).parent), tuple(text_columns), label_column, classes,
                        ("pearson", "spearman") if regression else ("accuracy",))  # fmt: skip
    splits = {}
    for split, (path, records) in rows.items():
        texts, labels = [], []
        for number, record in enumerate(records, 2 if path.suffix != ".jsonl" else 1):
            texts.append(tuple(str(record[c]) for c in text_columns))
            value = str(record[label_column])
            if regression:
                try:
                    labels.append(float(value))
                except ValueError:
                    raise ValueError(f"{path}, line {number}: label {value!r} is not a number") from None
            elif value not in classes:
                raise ValueError(f"{path}, line {number}: label {value!r} is not one of the training labels "
                                 f"{', '.join(classes)}")  # fmt: skip
            else:
                labels.append(classes.index(value))
        splits[split] = Split(texts, labels, path)
    return Task(layout, splits["train"], {"dev": splits["dev"]})


def refuse_mixed_labels(path: Path, records: list[dict], label_column: str) -> None:
    """Class labels that are numbers but for a few: those few are typos, not classes (one 'abc' among 0/1 made a
    third class that scored 0.0 with exit 0). Refused naming the first one's line."""
    def is_number(value: str) -> bool:
        try:
            float(value)
        except ValueError:
            return False
        return True

    values = [str(r[label_column]) for r in records]
    numbers = {v for v in values if is_number(v)}
    others = [(i, v) for i, v in enumerate(values) if not is_number(v)]
    if len(numbers) >= 2 and others and len(others) < len(values) / 2:
        index, value = others[0]
        first = 1 if path.suffix == ".jsonl" else 2
        raise ValueError(
            f"{path}, line {index + first}: label {value!r} among numeric labels ({', '.join(sorted(numbers)[:5])}): "
            f"a typo would become a class of its own; fix the row ({len(others)} such row(s))"
        )


def _read_records(path: Path, needed: list[str]) -> tuple[Path, list[dict]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = []
        for number, record in json_lines(path):  # a line that is not JSON: JsonLineError names the file and line
            lacking = [c for c in needed if not isinstance(record, dict) or c not in record]
            if lacking:
                raise ValueError(f"{path}, line {number}: no {', '.join(map(repr, lacking))} field")
            records.append(record)
        return path, records
    if suffix not in (".csv", ".tsv"):
        raise ValueError(f"{path}: a task file is .csv, .tsv or .jsonl, not {suffix or 'without a suffix'}")
    rows = csv_rows(path, lambda handle: csv.reader(handle, delimiter="\t" if suffix == ".tsv" else ","))
    header = rows[0] if rows else []
    lacking = [c for c in needed if c not in header]
    if lacking:
        raise ValueError(f"{path}, line 1: no column {', '.join(map(repr, lacking))}; columns: {header}")
    records = []
    for number, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            raise ValueError(f"{path}, line {number}: the row's field count differs from the header's")
        records.append(dict(zip(header, row, strict=True)))
    return path, records


# csv's default limit on one field (131,072 characters) raised: a long document is the model's to truncate.
FIELD_LIMIT = 1 << 26


def csv_rows(path: Path, reader: Any) -> list[list[str]]:
    """Every row of a CSV/TSV file as ``reader(handle)`` splits it: the file decoded as UTF-8 first, and a row
    the csv module cannot split named by file and line (before: its bare error, no file named)."""
    text = utf8_text(path, what="task file")  # utf-8-sig: MRPC's byte-order mark
    csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))
    rows_reader = reader(io.StringIO(text, newline=""))
    try:
        return list(rows_reader)
    except csv.Error as error:
        raise ValueError(f"{path}, line {rows_reader.line_num}: {error}") from None
