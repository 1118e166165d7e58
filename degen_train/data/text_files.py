"""Plain-text files cut into documents as a reader means them: each line, each paragraph, or each file.

A paragraph ends at a blank line, and a line holding only spaces or tabs is blank too (WikiText and many exported
corpora write " " on their empty lines; a splitter that looks for "\\n\\n" alone saw one document per file). Each
file of a folder is checked on its own: a file of several lines that comes out as one paragraph is refused by
name, since the blank lines its reader meant are not there (``document_unit=line`` or ``document`` says what to do
instead). The text of a document keeps its inner line breaks; its ends are stripped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets

UNIT_MEANS = {
    "line": "each line is a document",
    "paragraph": "paragraphs are separated by blank lines (a line of spaces or tabs is blank)",
    "document": "each file is one document",
}


def documents_of(path: Path, unit: str) -> Iterator[str]:
    """The non-blank documents of one UTF-8 text file, as ``unit`` cuts it."""
    with path.open(encoding="utf-8-sig") as handle:
        if unit == "document":
            text = handle.read().strip()
            if text:
                yield text
            return
        paragraph: list[str] = []
        for line in handle:
            line = line.rstrip("\r\n")
            if unit == "line":
                if line.strip():
                    yield line.strip()
                continue
            if line.strip():
                paragraph.append(line)
            elif paragraph:
                yield "\n".join(paragraph).strip()
                paragraph = []
        if paragraph:
            yield "\n".join(paragraph).strip()


def check_each_file(files: list[Path], unit: str, key: str) -> dict[Path, int]:
    """{file: 0, 1 or 2 (two documents or more)} for ``unit``, each file read only as far as its second document (the
    whole corpus is read once more when its table is built); a file of two lines or more that comes out as one
    paragraph is refused, naming it and what to set (its reader meant lines, or meant the file as one document)."""
    counts = {}
    for path in files:
        counts[path] = sum(1 for _ in itertools.islice(documents_of(path, unit), 2))
        if unit == "paragraph" and counts[path] == 1:
            with path.open(encoding="utf-8-sig") as handle:
                lines = sum(1 for line in handle if line.strip())
            if lines > 1:
                raise ValueError(
                    f"{key}: {path} comes out as one document (data.document_unit=paragraph: no blank line between "
                    f"its {lines} lines). Set data.document_unit=line (each line a document) or data.document_unit="
                    f"document (each file one document, knowingly), or separate its paragraphs by blank lines"
                )
    return counts


def _generate(files: list[tuple[str, int, int]], unit: str) -> Iterator[dict[str, Any]]:
    for name, _, _ in files:  # size and mtime are in the arguments so that the cached table follows the files
        yield from ({"text": text} for text in documents_of(Path(name), unit))


def text_documents(files: list[Path], unit: str, *, streaming: bool) -> datasets.Dataset | datasets.IterableDataset:
    """One ``text`` row per document of ``files`` (cached as an Arrow table by datasets, keyed by the files' paths,
    sizes and times), or a stream of them."""
    stats = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    features = datasets.Features({"text": datasets.Value("string")})
    arguments = {"files": stats, "unit": unit}
    if streaming:
        return datasets.IterableDataset.from_generator(_generate, features=features, gen_kwargs=arguments)
    return datasets.Dataset.from_generator(_generate, features=features, gen_kwargs=arguments)
