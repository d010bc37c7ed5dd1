"""Reading public datasets as streams: JSON arrays and objects item by item (ijson), JSONL and CSV line by
line, each item with where it came from (``file:line`` or ``file[item]``), after checks every import
makes first in bounded memory: the bytes are UTF-8 (the line and byte offset named) and nothing nests
more than ``MAX_DEPTH`` deep."""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, FileAccessError, Problem
from qaeval.core.jsonfile import loads_strict


def _open(path: Path) -> io.BufferedReader:
    if not path.exists():
        raise DatasetError("input file not found (public datasets are not shipped with qaeval)", file=str(path))
    if not path.is_file():
        raise DatasetError("input is not a regular file", file=str(path))
    try:
        return open(path, "rb")
    except OSError as exc:
        raise FileAccessError(path, f"cannot read ({exc.strerror or exc})") from None


def _open_json(path: Path) -> io.BufferedReader:
    """The file, past a UTF-8 byte-order mark (which ijson's parser takes for an invalid character)."""
    f = _open(path)
    if f.read(len(codecs.BOM_UTF8)) != codecs.BOM_UTF8:
        f.seek(0)
    return f


MAX_DEPTH = 100  # arrays and objects nested deeper than this are refused (the public datasets nest < 10)


def check_utf8(path: Path) -> None:
    """Read the whole input once, in bounded chunks: bytes that are not UTF-8 are a DatasetError naming
    the line and byte offset, before any record is read."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 1
    with _open(path) as f:
        while True:
            chunk = f.read(1 << 20)
            held = len(decoder.getstate()[0])  # the start of a character cut by the previous chunk
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                at = offset - held + exc.start
                line = lines + chunk.count(b"\n", 0, max(0, exc.start - held))
                raise DatasetError(
                    [Problem(str(path), line, f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {at})")]
                ) from None
            if not chunk:
                return
            offset += len(chunk)
            lines += chunk.count(b"\n")


def check_depth(path: Path) -> None:
    """Stream a JSON file's structure once: nesting deeper than MAX_DEPTH is a DatasetError, found in
    memory that does not grow with the depth (ijson would keep a prefix per level)."""
    import ijson

    depth = 0
    with _open_json(path) as f:
        try:
            for event, _ in ijson.basic_parse(f):
                if event in ("start_map", "start_array"):
                    depth += 1
                    if depth > MAX_DEPTH:
                        raise DatasetError(
                            f"arrays or objects nested more than {MAX_DEPTH} deep: not a dataset", file=str(path)
                        )
                elif event in ("end_map", "end_array"):
                    depth -= 1
        except ijson.JSONError as exc:
            raise DatasetError(f"not valid JSON ({_ijson_reason(exc)})", file=str(path)) from None


def _ijson_reason(exc: Exception) -> str:
    """ijson's complaint as one line of text (its C parser gives bytes and a drawing of the spot)."""
    reason = exc.args[0] if exc.args else exc
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", errors="replace")
    return str(reason).strip().splitlines()[0] if str(reason).strip() else type(exc).__name__


def first_char(path: Path) -> str:
    """The first character of the file that is not whitespace (after a byte-order mark): "[" for a JSON
    array, "{" for an object or JSON Lines."""
    with _open(path) as f:
        head = f.read(4096).decode("utf-8-sig", errors="replace").lstrip()
    return head[:1]


def json_items(path: Path, prefix: str = "item") -> Iterator[tuple[str, Any]]:
    """(position, item) for each item of a JSON array (``prefix`` in ijson's notation), streamed."""
    import ijson

    check_depth(path)
    with _open_json(path) as f:
        try:
            for i, item in enumerate(ijson.items(f, prefix, use_float=True), start=1):
                yield f"{path}:item {i}", item
        except ijson.JSONError as exc:
            raise DatasetError(f"not valid JSON ({_ijson_reason(exc)})", file=str(path)) from None


def jsonl_items(path: Path, expects: str = "") -> Iterator[tuple[str, Any]]:
    """(file:line, record) for each line. ``expects``: what the format's files look like, said when the
    first line with text does not parse (a JSON document over several lines is another format)."""
    with _open(path) as f:
        first = True  # the first line with text: a document over several lines fails there
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8-sig", errors="strict").strip() if number == 1 else raw.decode("utf-8").strip()
            if not line:
                continue
            try:
                yield f"{path}:{number}", loads_strict(line)
            except ValueError as exc:
                hint = f"; {expects}" if expects and first else ""
                raise DatasetError(f"line {number} is not valid JSON ({exc}){hint}", file=str(path)) from None
            first = False


def records(path: Path, *, array_prefix: str = "item", expects: str = "") -> Iterator[tuple[str, Any]]:
    """JSON array items or JSONL lines, whichever the file holds (``expects``: see ``jsonl_items``)."""
    return json_items(path, array_prefix) if first_char(path) == "[" else jsonl_items(path, expects)


def csv_rows(path: Path, delimiter: str = ",") -> Iterator[tuple[str, dict[str, str]]]:
    csv.field_size_limit(1 << 30)
    with _open(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        for row in reader:
            yield f"{path}:{reader.line_num}", row
