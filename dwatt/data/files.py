"""Reading data files: what every loader shares (the error that names a file and line, UTF-8 lines with their
numbers, telling a folder from a Hub id)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


class DataFormatError(ValueError):
    """A data file that cannot be read as it claims to be; the message starts with `file:line:`."""


def is_local_path(source: str | Path | None) -> bool:
    """A folder on disk rather than a Hub id: `None` (the vendored default), a `Path`, an existing path, or a name
    written as a path (`./x`, `/x`, `~/x`). Hub ids such as `conll2003` or `org/name` are not."""
    return (
        source is None
        or isinstance(source, Path)
        or Path(str(source)).exists()
        or str(source).startswith((".", "/", "~"))
    )


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """`(line number, text without its line end)` of a UTF-8 file. A leading byte-order mark is read as nothing
    (editors on Windows write one), so it never sticks to the first token; other bytes that are not UTF-8 fail
    with the file and line."""
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataFormatError(f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start})") from None
            yield number, text.rstrip("\r\n")


def json_objects(path: str | Path, what: str = "object", cut_off_tail: bool = False) -> Iterator[tuple[int, dict]]:
    """`(line number, object)` of each non-blank line of a JSON-lines file (a dataset, a results store): a line that
    does not parse ("not a JSON <what>") or holds something other than an object is named with its file and line.
    `cut_off_tail`: a last line without its line end that does not parse is a write that a crash cut off (an
    append-only file's), and is left out; anywhere else such a line is an error."""
    unparsed: DataFormatError | None = None
    for number, line in numbered_lines(path):
        if unparsed is not None:  # a line follows it: not a cut-off tail
            raise unparsed
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            unparsed = DataFormatError(f"{path}:{number}: not a JSON {what} ({error.msg})")
            if not cut_off_tail:
                raise unparsed from None
            continue
        if not isinstance(value, dict):
            raise DataFormatError(f"{path}:{number}: expected a JSON object per line, got {type(value).__name__}")
        yield number, value
    if unparsed is not None and ends_with_line_end(path):
        raise unparsed


def ends_with_line_end(path: str | Path) -> bool:
    """Whether a non-empty file's last byte ends a line (an empty file: True)."""
    with Path(path).open("rb") as handle:
        if handle.seek(0, 2) == 0:
            return True
        handle.seek(-1, 2)
        return handle.read(1) == b"\n"


def read_text_lines(path: Path) -> Iterator[str]:
    for _, line in numbered_lines(path):
        yield line


__all__ = [
    "DataFormatError",
    "ends_with_line_end",
    "is_local_path",
    "json_objects",
    "numbered_lines",
    "read_text_lines",
]
