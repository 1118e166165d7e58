"""Why ``datasets`` could not read a local corpus: the file, the line and the cause, in one sentence.

``datasets.load_dataset`` ends a bad JSON line or a truncated parquet file in a generic
``DatasetGenerationError`` (the file and row only in an earlier log line) or in pyarrow's own words without the
file. After such a failure, and only then, each file is read again here on its own until the bad one is found.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

from degen_train.core.io import JsonLineError, disk_full_error, is_disk_full, json_lines


def unreadable_corpus_error(error: Exception, files: list[Path], kind: str, key: str) -> Exception:
    """The error to raise instead of ``error`` from reading ``files`` (of ``kind``) given as ``key``."""
    if is_disk_full(error):
        return disk_full_error(Path(datasets.config.HF_DATASETS_CACHE), "set HF_DATASETS_CACHE to a larger disk",
                               error)  # fmt: skip
    for path in files:
        problem = _first_problem(path, kind)
        if problem:
            return ValueError(f"{key}: {path}{problem}: fix or remove it, then run the same command again")
    cause = _root(error)
    return ValueError(f"{key}: datasets could not read {', '.join(map(str, files[:3]))} ({cause}): check the files")


def _first_problem(path: Path, kind: str) -> str | None:
    try:
        if kind == "json":
            return _json_problem(path)
        if kind == "parquet":
            import pyarrow.parquet as parquet

            table = parquet.ParquetFile(path)
            for group in range(table.num_row_groups):
                table.read_row_group(group)
        elif kind == "csv":
            import pandas

            pandas.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
        else:
            path.read_text(encoding="utf-8")
    except Exception as error:  # noqa: BLE001 - whatever the reader says is the diagnosis
        return f" is not a readable {kind} file ({_root(error)})"
    return None


def _json_problem(path: Path) -> str | None:
    """JSON lines: the first line that is not one JSON object; a .json file that parses whole is fine."""
    if path.suffix.lower() == ".json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return None
        except ValueError:
            pass  # a .json file may hold JSON lines too
    try:
        for number, record in json_lines(path):
            if not isinstance(record, dict):
                return f", line {number}, is a JSON {type(record).__name__}, not an object with a text field"
    except JsonLineError as error:
        return f", line {error.line}, is not JSON ({error.reason})"
    except ValueError as error:  # not UTF-8: the message names the line and the bytes
        return f" is not readable: {str(error).split(': ', 1)[-1]}"
    return None


def _root(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
