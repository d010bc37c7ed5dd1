"""The journal of a run in progress, and resuming from it.

A run with a record path (``--save PATH``, or ``baseline --out PATH``) appends to ``PATH.journal`` as it
goes, one JSON line each, flushed as it is written:

* a header naming what the run is (``identity``: the data's and corpus's fingerprints, the adapter, the
  judge's config, k, trials and the registered checks' and metrics' code hashes);
* ``output``: one (case, trial) the system answered (its place in the run, case id, trial, the output as
  the pool made it); a later line for the same place replaces it (a failure found after the answer);
* ``verdict``: what the judge answered for one request, keyed by the sha256 of the request's content.

Every line carries an HMAC-SHA256, with the key the judge cache uses (``qaeval.judges.cache.load_secret``),
over its other fields, the run's random id (in the header) and its place in the journal, so a line this
user's qaeval did not write, or one spliced in from another journal, reordered or repeated, is refused.
The journal is a regular file: a symbolic link, a FIFO or a folder at its path is refused (74). When the run
finishes, the record replaces the journal. ``--resume`` reads the journal back, checks every line as a
record is checked (the header must name this run, an output must be well formed, for a case of this
suite at that place), reuses every output (and every verdict for one), and asks the system only for the
rest: the errored ones too unless ``--keep-errors``. A last line cut short (the run died while writing
it) is dropped with a note; any other line that does not parse or authenticate refuses the journal.

Two runs with the same record path would write one journal and replace one record: the command holds the
record's lock for its whole run (``qaeval.core.locks.holding_the_record``), and a second run asking for it
is refused at once (64).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import stat
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, FileAccessError, UsageError
from qaeval.core.jsonfile import loads_strict
from qaeval.scoring.judge import JudgeResponse, MemoEntry
from qaeval.scoring.rubric import AxisVerdict
from qaeval.system.contract import output_row
from qaeval.system.validate import validate_plain

FORMAT = "qaeval-journal"
VERSION = 1
SUFFIX = ".journal"
JOURNAL_TEXT_LIMIT = 1 << 20  # an error or log text a journal line may carry


class JournalError(DatasetError):
    """A journal that this qaeval did not write, or one that is damaged beyond its last line (exit 65)."""


def journal_path(record: str | os.PathLike[str]) -> Path:
    return Path(str(record) + SUFFIX)


def key_digest(key: tuple[Any, ...]) -> str:
    """A judge request's content as a short name (its key holds text and frozen dataclasses)."""
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(line: Mapping[str, Any]) -> bytes:
    return json.dumps(
        {k: v for k, v in line.items() if k != "mac"},
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
        allow_nan=False,
    ).encode("ascii")


def _mac(secret: bytes, line: Mapping[str, Any]) -> str:
    return hmac.new(secret, _canonical(line), hashlib.sha256).hexdigest()


def _secret() -> bytes:
    from qaeval.judges.cache import load_secret

    return load_secret()


def response_to_plain(response: Any) -> dict[str, Any] | None:
    """A judge's response as a journal keeps it; None for anything that is not a ``JudgeResponse`` of plain
    values (it is asked again on resume)."""
    if type(response) is not JudgeResponse:
        return None
    try:
        plain = dict(
            case_id=response.case_id,
            verdicts=[asdict(v) for v in response.verdicts],
            error=response.error,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            cached=response.cached,
        )
        json.dumps(plain, allow_nan=False)
    except (TypeError, ValueError, AttributeError):
        return None
    return plain


def _count(value: Any) -> bool:
    return value is None or (type(value) is int and 0 <= value < 2**63)


def response_from_plain(raw: Any) -> JudgeResponse | None:
    """The response a journal line holds, or None when it is not one qaeval could have written."""
    if not (
        isinstance(raw, dict)
        and isinstance(raw.get("case_id"), str)
        and isinstance(raw.get("verdicts"), list)
        and (raw.get("error") is None or isinstance(raw.get("error"), str))
        and _count(raw.get("prompt_tokens"))
        and _count(raw.get("completion_tokens"))
        and isinstance(raw.get("cached"), bool)
    ):
        return None
    verdicts = []
    for v in raw["verdicts"]:
        if not (
            isinstance(v, dict)
            and isinstance(v.get("axis"), str)
            and all(isinstance(v.get(k, ""), str) for k in ("quote", "rationale", "target"))
            and (v.get("score") is None or type(v.get("score")) in (int, float, str))
        ):
            return None
        verdicts.append(
            AxisVerdict(v["axis"], v.get("score"), v.get("quote", ""), v.get("rationale", ""), v.get("target", ""))
        )
    return JudgeResponse(
        raw["case_id"], verdicts, raw["error"], raw["prompt_tokens"], raw["completion_tokens"], raw["cached"]
    )


def _row_from_plain(raw: Any, case_id: str) -> dict[str, Any] | None:
    """An output row as the pool makes it, from a journal line's output, checked as a worker's reply is."""
    if not isinstance(raw, dict):
        return None
    error, latency, logs = raw.get("error"), raw.get("latency_s"), raw.get("logs", "")
    if not (
        (error is None or (isinstance(error, str) and len(error) <= JOURNAL_TEXT_LIMIT))
        and isinstance(latency, (int, float))
        and not isinstance(latency, bool)
        and math.isfinite(latency)
        and latency >= 0
        and isinstance(logs, str)
        and len(logs) <= JOURNAL_TEXT_LIMIT
    ):
        return None
    if error is not None:
        return output_row(case_id, None, error, float(latency), logs)
    fields = {k: v for k, v in raw.items() if k not in ("case_id", "error", "latency_s", "logs", "output_fingerprint")}
    lists = [fields.get(name) for name in ("citations", "retrieved_ids", "passages")]
    if not all(isinstance(v, list) for v in lists):
        return None
    citations, retrieved, passages = (v if isinstance(v, list) else [] for v in lists)  # as the worker sends them
    fields |= dict(
        citations={"__type__": "list", "items": citations},
        retrieved_ids={"__type__": "list", "items": retrieved},
        passages={"__type__": "list", "items": [{"passage": p} for p in passages]},
    )
    checked, problems = validate_plain(fields)
    if problems or checked is None:
        return None
    return output_row(case_id, checked, None, float(latency), logs)


@dataclass
class Restored:
    """What a journal gives back: outputs by place in the run, verdicts by request digest, notes, and
    where to go on writing (the run's id, the next line's place, the length of its whole lines)."""

    outputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[str, JudgeResponse] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    run: str = ""
    next_seq: int = 0
    whole: int = 0


def _regular(path: Path, flags: int, what: str) -> int:
    """An open descriptor on ``path``, a regular file (never a link, FIFO or folder: opening a FIFO would
    wait for a writer), or FileAccessError (exit 74)."""
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o600)
    except OSError as exc:
        raise FileAccessError(
            path, f"cannot {what} the journal ({exc.strerror or exc}; it must be a regular file, not a link)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileAccessError(path, f"cannot {what} the journal: it is not a regular file")
    return fd


def read_journal(
    path: Path, identity: Mapping[str, Any], case_ids: Sequence[str], *, keep_errors: bool, secret: bytes | None = None
) -> Restored:
    """Read a journal back for ``identity`` (a run of ``case_ids``, trial by trial). A header for another
    run is a UsageError naming what differs (exit 64); a line not written by this qaeval, or damaged
    before the last line, is a JournalError (exit 65)."""
    secret = secret if secret is not None else _secret()
    where = str(path)
    fd = _regular(path, os.O_RDONLY, "read")
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise FileAccessError(path, f"cannot read the journal ({exc.strerror or exc})") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    restored = Restored()
    parsed: list[dict[str, Any]] = []
    run = None
    for number, raw in enumerate(lines, start=1):
        try:
            line = loads_strict(raw.decode("utf-8"))
            if not isinstance(line, dict):
                raise ValueError("not an object")
        except (UnicodeDecodeError, ValueError, TypeError):
            if number == len(lines):  # the run ended while writing it
                restored.notes.append(f"the journal's last line (line {number}) was cut short and is dropped")
                break
            raise JournalError(
                f"line {number} is not valid JSON: the journal is damaged; delete it to start over", file=where
            ) from None
        if run is None and isinstance(line.get("run"), str):
            run = line["run"]
        try:
            ok = (
                isinstance(line.get("mac"), str)
                and line.get("run") == run
                and line.get("seq") == number - 1
                and hmac.compare_digest(line["mac"], _mac(secret, line))
            )
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise JournalError(
                f"line {number} fails authentication or is out of place: it was not written here by "
                "this user's qaeval (edited, spliced from another journal, reordered or repeated); "
                "delete the journal to start over",
                file=where,
            )
        parsed.append(line)
        restored.whole += len(raw) + 1
    restored.run, restored.next_seq = run or "", len(parsed)
    if not parsed or parsed[0].get("kind") != "header" or parsed[0].get("format") != FORMAT:
        raise JournalError("the journal has no header", file=where)
    if parsed[0].get("version") != VERSION:
        raise JournalError(f"journal version {parsed[0].get('version')!r} is not {VERSION}", file=where)
    theirs = parsed[0].get("identity")
    differs = [name for name in identity if not isinstance(theirs, dict) or theirs.get(name) != identity[name]]
    if differs:
        shown = "; ".join(
            f"{name}: {_short((theirs or {}).get(name) if isinstance(theirs, dict) else None)} "
            f"then, {_short(identity[name])} now"
            for name in differs
        )
        raise UsageError(
            f"cannot resume from {where}: the run differs from the journal's ({shown}); run without "
            "--resume to start over"
        )
    for number, line in enumerate(parsed[1:], start=2):
        if line.get("kind") == "output":
            index, cid = line.get("index"), line.get("case_id")
            if not (type(index) is int and 0 <= index < len(case_ids) and cid == case_ids[index]):
                raise JournalError(f"line {number} names a case this run does not have at that place", file=where)
            row = _row_from_plain(line.get("output"), cid)
            if row is None:
                raise JournalError(f"line {number}: the output is not one a system could have returned", file=where)
            restored.outputs[index] = row
        elif line.get("kind") == "verdict":
            response = response_from_plain(line.get("response"))
            digest = line.get("key")
            if response is None or not isinstance(digest, str):
                raise JournalError(f"line {number}: the verdict is malformed", file=where)
            if response.error is None or keep_errors:  # a judge error (an outage) is asked again
                restored.verdicts[digest] = response
        else:
            raise JournalError(f"line {number} is of no kind a journal holds", file=where)
    if not keep_errors:
        errored = [i for i, row in restored.outputs.items() if row["error"] is not None]
        for i in errored:
            del restored.outputs[i]
        if errored:
            restored.notes.append(f"{len(errored)} output(s) that failed are asked again (--keep-errors keeps them)")
    return restored


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class JournalWriter:
    """Appends signed lines to a journal, one at a time, from any thread. ``resumed``: the journal read
    back (``read_journal``), to go on after its last whole line; else a new journal is started."""

    def __init__(
        self, path: Path, identity: Mapping[str, Any], *, resumed: Restored | None = None, secret: bytes | None = None
    ) -> None:
        import secrets

        self.path, self._secret = path, secret if secret is not None else _secret()
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FileAccessError(path, f"cannot write the journal ({exc.strerror or exc})") from None
        if resumed is None and (path.is_symlink() or (path.exists() and not path.is_file())):
            raise FileAccessError(path, "cannot write the journal: something that is not a regular file is there")
        if resumed is None:
            path.unlink(missing_ok=True)  # a new journal, never written through what was there
        fd = _regular(path, os.O_WRONLY | os.O_CREAT | (0 if resumed is not None else os.O_EXCL), "write")
        if resumed is not None:
            os.ftruncate(fd, resumed.whole)  # a last line cut short is cut off, so the next starts whole
            os.lseek(fd, 0, os.SEEK_END)
        os.set_blocking(fd, True)
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        self.run = resumed.run if resumed is not None else secrets.token_hex(16)
        self.seq = resumed.next_seq if resumed is not None else 0
        if resumed is None:
            self._write(dict(kind="header", format=FORMAT, version=VERSION, identity=dict(identity)))

    def _write(self, line: dict[str, Any]) -> None:
        with self._lock:
            if self._file.closed:
                return
            line.update(run=self.run, seq=self.seq)
            line["mac"] = _mac(self._secret, line)
            text = json.dumps(line, sort_keys=True, ensure_ascii=True, allow_nan=False) + "\n"  # no separator inside
            try:
                self._file.write(text)
                self._file.flush()
            except OSError as exc:
                raise FileAccessError(self.path, f"cannot write the journal ({exc.strerror or exc})") from None
            self.seq += 1

    def output(self, index: int, row: Mapping[str, Any], trial: int) -> None:
        plain = {k: v for k, v in row.items() if k not in ("case_id", "output_fingerprint")}
        try:
            self._write(dict(kind="output", index=index, case_id=row["case_id"], trial=trial, output=plain))
        except (TypeError, ValueError):  # text JSON cannot carry: the output is asked again on resume
            pass

    def verdict(self, key: tuple[Any, ...], response: Any) -> None:
        plain = response_to_plain(response)
        if plain is not None:
            self._write(dict(kind="verdict", key=key_digest(key), response=plain))

    def close(self) -> None:
        with self._lock:
            self._file.close()


def memo_from(restored: Restored, keys: Mapping[int, tuple[Any, ...] | None]) -> dict[tuple[Any, ...], MemoEntry]:
    """The judge memo a resumed run starts with: the journal's verdict for each restored output's request."""
    memo = {}
    for key in keys.values():
        if key is not None and (found := restored.verdicts.get(key_digest(key))) is not None:
            memo[key] = MemoEntry(found)
    return memo
