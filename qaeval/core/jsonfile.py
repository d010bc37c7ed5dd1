"""JSON read the way a golden file deserves, and written one way.

``loads_strict`` refuses what Python's lenient defaults would accept: a key given twice in one object,
the ``NaN``/``Infinity`` literals, an unpaired surrogate escape, nesting deeper than the parser can
follow and integers too long to convert are errors, not values. ``iter_jsonl`` reads a JSONL file a line
at a time, every problem (the file, a line that is not UTF-8 or not strict JSON) named with its line.
``dumps_canonical`` is how every qaeval file is written: sorted keys, no NaN.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from qaeval.core.errors import FileAccessError, Problem
from qaeval.core.files import file_kind, os_reason, write_atomic


class StrictJSONError(ValueError):
    """JSON that parses under Python's lenient defaults but is not data qaeval accepts."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):  # no key twice (the common case, checked in C)
        return out
    out = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise StrictJSONError(f"{name} is not valid JSON (use null or a finite number)")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _at(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line} column {column}" if line > 1 else f"column {column}"


def _unpaired_surrogate(text: str) -> str | None:
    """Where ``text`` (valid JSON) holds a surrogate that is not half of a pair: Python would parse it into a
    string that no UTF-8 file can hold. An escape counts only when its backslash is not itself escaped."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"U+{ord(text[exc.start]):04X} at {_at(text, exc.start)}"
    if "\\u" not in text:  # no escape at all (the common case, found in C)
        return None
    escapes = _SURROGATE_ESCAPE.finditer(text)
    for m in escapes:
        first = m.start()
        while first and text[first - 1] == "\\":
            first -= 1
        if (m.start() - first) % 2:
            continue  # "\\ud800" is a backslash and the letters ud800
        if m.group()[3] in "89abAB":
            low = _SURROGATE_ESCAPE.match(text, m.end())
            if low is not None and low.group()[3] in "cdefCDEF":
                next(escapes, None)
                continue
        return f"{m.group()} at {_at(text, m.start())}"
    return None


_STRICT = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_constant=_no_constants
)  # json.loads makes one a call


def loads_strict(text: str) -> Any:
    """Parse JSON strictly. Raises ValueError (StrictJSONError or json.JSONDecodeError) with a message a
    person can act on."""
    try:
        if isinstance(text, str) and not text.startswith("\ufeff"):
            value = _STRICT.decode(text)
        else:  # bytes, or a byte-order mark json.loads has its own message for
            value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except RecursionError:
        raise StrictJSONError("nested too deeply to be data") from None
    except (StrictJSONError, json.JSONDecodeError):
        raise
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise StrictJSONError(str(exc).split(";")[0].split(":")[0]) from None
    where = _unpaired_surrogate(text)
    if where is not None:
        raise StrictJSONError(f"an unpaired surrogate ({where}) is not valid Unicode text")
    return value


def json_error_text(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        if exc.lineno > 1 or exc.pos >= len(exc.doc.rstrip("\r\n")):  # past the line's text: where it ended
            return (
                f"not valid JSON ({exc.msg} at the end of the line: is something missing, such as a closing }} or ]?)"
            )
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    return str(exc)


def dumps_canonical(value: Any, **kw: Any) -> str:
    """JSON with sorted keys and no NaN: what every qaeval file is written as."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, **kw)


def iter_jsonl(path: Path, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed value) for each non-blank line of a JSONL file, reading one line at a
    time (memory does not grow with the file); every problem (the file itself, a line that is not UTF-8
    or not strict JSON) goes to ``problems`` with its file and line."""
    return ((number, value) for number, _, _, value in iter_jsonl_lines(path, problems))


READ_BUFFER = 1 << 16  # a 4 KB case a line: with the default 8 KiB, a read system call every other line


def iter_jsonl_lines(path: Path, problems: list[Problem]) -> Iterator[tuple[int, int, bytes, Any]]:
    """``iter_jsonl`` with each line's place and bytes: (line number, offset of its first byte, its bytes,
    parsed value)."""
    where = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        problems.append(Problem(where, None, "not found"))
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            problems.append(Problem(where, None, "is a symbolic link that loops, not a file"))
            return
        raise FileAccessError(path, f"cannot read ({os_reason(exc)})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = file_kind(info.st_mode)
        problems.append(Problem(where, None, f"is {kind}, not a file"))
        return
    try:
        handle = open(path, "rb", buffering=READ_BUFFER)
    except OSError as exc:
        raise FileAccessError(path, f"cannot read ({os_reason(exc)})") from None
    with handle:
        offset = 0
        try:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    at = exc.start + (3 if number == 1 and raw.startswith(b"\xef\xbb\xbf") else 0)  # past the BOM
                    problems.append(
                        Problem(where, number, f"not valid UTF-8 (byte 0x{raw[at]:02x} at offset {offset + at})")
                    )
                    offset += len(raw)
                    continue
                offset += len(raw)
                if not line.strip():
                    continue
                try:
                    value = loads_strict(line)
                except ValueError as exc:
                    if isinstance(exc, json.JSONDecodeError) and line.strip().startswith("["):
                        msg = "a JSON array; write one JSON object per line (JSONL), not an array"
                    else:
                        msg = json_error_text(exc)
                    problems.append(Problem(where, number, msg))
                    continue
                yield number, offset - len(raw), raw, value
        except OSError as exc:
            raise FileAccessError(path, f"cannot read ({os_reason(exc)})") from None


def write_jsonl(path: str | Path, items: Iterable[Any]) -> Path:
    """Replace ``path`` with one canonical JSON line per item, all at once (see :func:`write_atomic`)."""
    return write_atomic(path, "".join(dumps_canonical(item) + "\n" for item in items))
