"""Reading one file of a folder someone handed over: a plain file of bounded size, never through a link, a FIFO or a
device, its text shown back with no control characters. The typed schemas of what each file holds live with the door
that reads it (report/records.py for a run's records); this module only gets the bytes safely."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import unicodedata
from pathlib import Path
from typing import Any

# The largest handed-over record read (summary.json, failed.json, analysis/metrics.json, overrides.json, a
# fine-tuning record): degen-train writes them in kilobytes; a bigger one is a mistake or an attack.
RECORD_BYTES = 16 * 2**20
TABLE_BYTES = 256 * 2**20  # logs/metrics.csv of a long run
IMAGE_BYTES = 32 * 2**20  # analysis/cone.png
MAX_DEPTH = 64  # nesting of a JSON/YAML record degen-train writes is under 10
MAX_ENTRIES = 100_000  # values in one record
# C0 and C1 control characters other than tab, and DEL: a terminal acts on them (erase a line, move the cursor); and
# Unicode's format characters (category Cf: right-to-left override U+202E, the isolates U+2066-2069, zero-width
# joiners and spaces, the soft hyphen, a byte-order mark) and line and paragraph separators, which make a text show as
# another (``seed=1<RLO>gpj.exe`` reads ``seed=1exe.jpg``).
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
LYING = re.compile("[" + "".join(re.escape(chr(c)) for c in [*range(0x80, 0x30000), *range(0xE0000, 0xE0080)]
                                 if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp")) + "]")  # fmt: skip


class HandedOverFileError(ValueError):
    """A file of a handed-over folder that cannot be read as what degen-train writes there: one line naming the
    file, the entry and what to do, with control characters shown escaped."""

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


def printable(text: Any, limit: int = 0) -> str:
    """``text`` with every control character (ANSI escapes, carriage returns, newlines) and Unicode format character
    (a right-to-left override, a zero-width space) shown as its escape, so a quoted value cannot erase or forge a line
    on the terminal that prints it, nor read as another; cut to ``limit`` characters if given."""
    shown = CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))
    shown = LYING.sub(lambda m: f"\\u{ord(m.group()):04x}", shown)
    return shown if not limit or len(shown) <= limit else shown[: limit - 3] + "..."


def plain_file_bytes(
    path: Path, *, limit: int = RECORD_BYTES, what: str = "record", within: Path | None = None
) -> bytes:
    """The bytes of ``path``, refused in one line before it is opened when it is a link, a FIFO, a device or a
    folder, or larger than ``limit`` (checked again on the open file, which is never followed through a link).
    ``within``: the handed-over folder ``path`` lies in; every folder between the two is opened component by
    component, none through a link (``seed=1/analysis`` linked to a folder elsewhere is refused, naming it)."""
    path = Path(path)
    if within is not None:
        _no_link_between(Path(within), path, what)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise HandedOverFileError(f"{path}: no such file") from None
    if stat.S_ISLNK(info.st_mode):
        raise HandedOverFileError(
            f"{path} is a link (to {printable(os.readlink(path), 200)}): a handed-over {what} is read only from the "
            f"folder itself, never through a link; replace the link by a copy of its file"
        )
    if not stat.S_ISREG(info.st_mode):
        raise HandedOverFileError(
            f"{path} is {_kind(info.st_mode)}, not a plain file: a {what} is read only from a plain file (a FIFO or a "
            f"device would never end); replace it by the file it stands for"
        )
    if info.st_size > limit:
        raise HandedOverFileError(
            f"{path} holds {info.st_size / 2**20:.1f} MiB, more than any {what} degen-train writes "
            f"({limit / 2**20:.0f} MiB): it was not read; replace it by the run's own file"
        )
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        if error.errno == errno.ELOOP:  # swapped for a link after the check
            raise HandedOverFileError(f"{path} is a link: a handed-over {what} is never read through one") from None
        raise HandedOverFileError(f"{path} cannot be read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise HandedOverFileError(f"{path} is not a plain file: a {what} is read only from one")
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise HandedOverFileError(f"{path} grew past {limit / 2**20:.0f} MiB while read: it was not read")
    return data


def _no_link_between(root: Path, path: Path, what: str) -> None:
    """Open each folder from ``root`` down to ``path``'s own with O_NOFOLLOW, relative to the one before (so a folder
    swapped for a link meanwhile is refused too); a link among them is one line naming it. Where the platform cannot
    open relative to a folder, each component is checked with lstat instead."""
    try:
        parts = path.relative_to(root).parts[:-1]
    except ValueError:
        raise HandedOverFileError(
            f"{path} is not inside {root}: a handed-over {what} is read from its folder only"
        ) from None
    walked = root
    if os.open not in os.supports_dir_fd or not hasattr(os, "O_NOFOLLOW"):
        for part in parts:
            walked = walked / part
            if os.path.islink(walked):
                raise HandedOverFileError(_link_message(walked, what))
        return
    folder = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts:
            walked = walked / part
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(walked):
                    raise HandedOverFileError(_link_message(walked, what)) from None
                raise HandedOverFileError(f"{walked} cannot be read ({error.strerror})") from None
            os.close(folder)
            folder = inner
    finally:
        os.close(folder)


def _link_message(path: Path, what: str) -> str:
    return (f"{path} is a link (to {printable(os.readlink(path), 200)}): a handed-over {what} is read only from the "
            f"folder itself, never through a link at any depth; replace the link by a copy of what it points to")


def plain_file_text(path: Path, *, limit: int = RECORD_BYTES, what: str = "record", within: Path | None = None) -> str:
    """``plain_file_bytes`` decoded as UTF-8 (a byte-order mark dropped), or one line naming the file and the line."""
    data = plain_file_bytes(path, limit=limit, what=what, within=within)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise HandedOverFileError(f"{path}, line {line}: not UTF-8 text, as degen-train writes a {what}") from None


def json_record(path: Path, *, what: str = "record", limit: int = RECORD_BYTES, within: Path | None = None) -> Any:
    """A handed-over JSON file's value, its nesting and size bounded; a file that is not JSON is one line naming the
    file, the line and the column."""
    text = plain_file_text(path, limit=limit, what=what, within=within)
    try:
        value = json.loads(text)
    except RecursionError:
        raise HandedOverFileError(f"{path}: nested deeper than any {what} degen-train writes; not read") from None
    except ValueError as error:
        reason = getattr(error, "msg", str(error))
        where = f"line {error.lineno}, column {error.colno}" if hasattr(error, "lineno") else "here"
        raise HandedOverFileError(
            f"{path} is not JSON ({reason} at {where}): degen-train writes a {what} as JSON; replace it by the run's "
            f"own file or remove it"
        ) from None
    check_bounded(path, value, what=what)
    return value


def check_bounded(path: Path, value: Any, *, what: str = "record") -> None:
    """Refuse a value nested deeper than MAX_DEPTH or holding more than MAX_ENTRIES values (a YAML alias bomb
    expands to billions), walked without recursion."""
    stack, entries = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        entries += 1
        if depth > MAX_DEPTH or entries > MAX_ENTRIES:
            reason = f"nested over {MAX_DEPTH} deep" if depth > MAX_DEPTH else f"over {MAX_ENTRIES:,} values"
            raise HandedOverFileError(f"{path}: {reason}, far beyond any {what} degen-train writes; it was not read")
        if isinstance(item, dict):
            stack.extend((inner, depth + 1) for inner in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((inner, depth + 1) for inner in item)


def check_text_bounded(path: Path, text: str, *, what: str = "record") -> None:
    """The bounds of ``check_bounded`` on a text before it is parsed (a parser spends seconds on what it refuses):
    brackets nested over MAX_DEPTH deep, or more separators of values (``:``, ``,``, ``- ``) than MAX_ENTRIES."""
    depth = deepest = 0
    for character in text:
        if character in "[{(":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                raise HandedOverFileError(f"{path}: nested over {MAX_DEPTH} deep, far beyond any {what} degen-train "
                                          f"writes; it was not read")  # fmt: skip
        elif character in "]})":
            depth -= 1
    if text.count(":") + text.count(",") + text.count("- ") > MAX_ENTRIES:
        raise HandedOverFileError(f"{path}: over {MAX_ENTRIES:,} values (keys and items, counted before parsing), far "
                                  f"beyond any {what} degen-train writes; it was not read")  # fmt: skip


def given_file_text(path: str | Path, *, what: str) -> str:
    """The UTF-8 text of a file named on a command line (an STS file, a corpus, prompts): a FIFO, a device or a folder
    is refused before any open that could block or never end; a missing file is FileNotFoundError."""
    path = Path(path)
    kind = not_a_plain_file(path)
    if kind:
        raise ValueError(f"{what} {path} is {kind}, not a plain file (a FIFO or a device would never end): give a "
                         f"UTF-8 text file")  # fmt: skip
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    data = _bounded_bytes(path, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{what} {path}, line {line}: not UTF-8 text; re-save it as UTF-8") from None


GIVEN_TEXT_BYTES = 4 * 2**30  # a text file a command reads whole (the 20M-word Wikipedia slice is 0.12 GiB)


def _bounded_bytes(path: Path, what: str, limit: int | None = None) -> bytes:
    """The file's bytes, refused by name past ``limit`` (default GIVEN_TEXT_BYTES; read at most limit + 1 bytes: a
    file that grows while it is read cannot take the memory either)."""
    limit = GIVEN_TEXT_BYTES if limit is None else limit
    size = path.stat().st_size
    if size > limit:
        raise ValueError(f"{what} {path}: {size:,} bytes, more than the {limit:,} a text file read whole may hold; "
                         f"split it, or give a corpus folder or a hub dataset")  # fmt: skip
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{what} {path}: grew past {limit:,} bytes while it was read")
    return data


def bounded_text_bytes(path: Path, *, what: str, limit: int | None = None) -> bytes:
    """A plain file's bytes within ``limit``: a FIFO, a device or a folder refused before any open (core/io.utf8_text
    and given_file_text read through it)."""
    kind = not_a_plain_file(path)
    if kind or Path(path).is_dir():
        raise ValueError(f"{what} {path} is {kind or 'a folder'}, not a plain file: give a UTF-8 text file")
    return _bounded_bytes(Path(path), what, limit)


def not_a_plain_file(path: Path) -> str | None:
    """What ``path`` is when it exists (through links) and is neither a plain file nor a folder: "a FIFO", "a
    character device" (/dev/zero), ...; None otherwise. A FIFO or a device as a text file would never end, or read
    as empty."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind(mode)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))  # fmt: skip
    for test, name in kinds:
        if test(mode):
            return name
    return "not a plain file"


# The files of a model folder where transformers finds Python code to import (``auto_map``).
CODE_NAMING_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


def no_remote_code(source: str | Path) -> dict[str, bool]:
    """The keyword every transformers loader here is called with, ``trust_remote_code=False`` (no prompt can ever
    appear, no folder's Python is imported), after a local folder's ``auto_map`` is named and refused: a config or
    tokenizer config that points transformers at the folder's own code."""
    folder = Path(str(source)).expanduser()
    if folder.is_dir():
        for name in CODE_NAMING_FILES:
            path = folder / name
            if not os.path.lexists(path):
                continue
            value = json_record(path, what="model file")
            if isinstance(value, dict) and value.get("auto_map"):
                named = printable(json.dumps(value["auto_map"], default=str), 200)
                raise HandedOverFileError(
                    f"{path}: auto_map={named} names Python code for transformers to import from the folder; "
                    f"degen-train never runs a model folder's code (trust_remote_code=False): remove auto_map, or use "
                    f"a model whose model_type transformers ships"
                )
    return {"trust_remote_code": False}
