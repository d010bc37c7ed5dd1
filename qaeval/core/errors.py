"""The exception tree. Every error qaeval raises on purpose descends from QaevalError.

    QaevalError
    ├── UsageError(ValueError)          a bad flag or parameter, a plugin that does not resolve    exit 64
    ├── DatasetError(ValueError)        bad cases, labels, baseline, record or history (.problems)  exit 65
    │   ├── BaselineError               a missing or corrupt baseline
    │   └── RecordError                 a run record that cannot be read
    ├── FileAccessError(OSError)        a file cannot be read or written (.path)                  exit 74
    ├── VerdictError                    a verdict that says no (carries .result)
    │   ├── TierOneFailed               a run with a failing deterministic check or adapter error  exit 1
    │   ├── GateBlocked                 the gate said BLOCK                                        exit 1
    │   ├── BaselineRefused             a failing run offered as a baseline                         exit 1
    │   ├── JudgeNotTrusted             calibration refused the judge                              exit 2
    │   └── DriftAlarm                  a metric left its band                                     exit 3
    ├── JudgeError(RuntimeError)        a judge could not produce a verdict (recorded per case)
    └── ReportError(RuntimeError)       a notebook could not be executed or rendered               exit 70

``exit_code_for`` is the one place that maps errors to process exit codes; a result's own
``exit_code`` says what a finished command exits with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class QaevalError(Exception):
    """Root of every error qaeval raises deliberately."""

    exit_code = 1


class UsageError(QaevalError, ValueError):
    """The caller asked for something that cannot work: a bad option, parameter or plugin name."""

    exit_code = 64


def install_extra(extra: str) -> str:
    """How to install one of qaeval's extras (qaeval is installed from a clone or a wheel, not PyPI).

    Args:
        extra: The extra's name (``dask``, ``langchain``, ...).

    Returns:
        The advice, one line, to end an error message with.
    """
    return f"install qaeval with the {extra} extra (from its clone: pip install -e '.[{extra}]')"


@dataclass(frozen=True)
class Problem:
    """One problem found while loading a file: where it is and what is wrong.

    Attributes:
        file: The file the problem is in.
        line: Its line (1-based), or None when the problem is the file's as a whole.
        message: What is wrong.
    """

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


class DatasetError(QaevalError, ValueError):
    """Input data (cases, labels, a baseline, a record, a history file) is malformed.

    `problems` lists every problem found, each with file and line, so one load reports them all.

    Args:
        problems: Every problem found, or one message (then about ``file`` as a whole).
        file: The file a one-message problem is about.

    Attributes:
        problems: Every problem found (the message lists the first ``SHOWN``).
    """

    exit_code = 65
    SHOWN = 50  # problems the message lists (``problems`` holds every one): a file wrong on each of its
    # 100,000 lines printed 100,000 lines

    def __init__(self, problems: list[Problem] | str, *, file: str = "<input>") -> None:
        if isinstance(problems, str):
            problems = [Problem(file, None, problems)]
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = str(self.problems[0])
        else:
            shown = self.problems[: self.SHOWN]
            message = f"{len(self.problems)} problems in the input data:\n" + "\n".join(f"  {p}" for p in shown)
            if len(self.problems) > len(shown):
                message += f"\n  ... and {len(self.problems) - len(shown)} more (fix these and load again)"
        super().__init__(message)


class BaselineError(DatasetError):
    """The baseline is missing or unreadable: a hard failure, never a skipped tier."""


class RecordError(DatasetError):
    """A run record is missing, of an unknown version, or malformed."""


class FileAccessError(QaevalError, OSError):
    """A file cannot be read or written (permissions, a full disk, a folder in the way).

    Args:
        path: The file.
        reason: What went wrong (``cannot read (Permission denied)``).

    Attributes:
        path: The file, as text.
        reason: What went wrong.
    """

    exit_code = 74

    def __init__(self, path: Any, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        QaevalError.__init__(self, f"{reason}: {path}")

    def __str__(self) -> str:
        return f"{self.reason}: {self.path}"


class VerdictError(QaevalError):
    """A finished command whose verdict says no. ``result`` is the result object behind it.

    Args:
        message: The verdict, one line.
        result: The result object behind it.

    Attributes:
        result: The result object behind the verdict (a RunResult, GateResult, CalibrationResult or
            DriftResult).
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class TierOneFailed(VerdictError):
    """A run failed a deterministic check or had an adapter error (``RunResult.raise_for_status``)."""

    exit_code = 1


class GateBlocked(VerdictError):
    """The regression gate blocked. `result` is the GateResult with every failed tier."""

    exit_code = 1


class BaselineRefused(VerdictError):
    """A run that is not green was offered as a baseline (pass ``allow_failing`` to keep it anyway)."""

    exit_code = 1


class JudgeNotTrusted(VerdictError):
    """The judge disagrees with human labels on at least one axis. `result` is the CalibrationResult."""

    exit_code = 2


class DriftAlarm(VerdictError):
    """At least one metric left its band. `result` is the DriftResult."""

    exit_code = 3


class JudgeError(QaevalError, RuntimeError):
    """A judge could not produce a verdict (network, parsing, refusal, a crash in its code)."""


class ReportError(QaevalError, RuntimeError):
    """A notebook could not be executed or rendered for a reason other than its own verdict."""

    exit_code = 70


def exit_code_for(error: BaseException) -> int:
    """The process exit code for an error; anything unexpected is 70 (internal software error).

    Args:
        error: The exception that ended a command.

    Returns:
        Its own ``exit_code`` for a QaevalError, 74 for another OSError, else 70.
    """
    if isinstance(error, QaevalError):
        return error.exit_code
    if isinstance(error, OSError):
        return 74
    return 70


def describe(error: BaseException) -> str:
    """``Type: message`` for an exception raised by user code, one line, bounded.

    Args:
        error: The exception (or SystemExit) user code raised.

    Returns:
        ``Type: message`` on one line, at most about 300 characters of message; ``called
        sys.exit(CODE)`` for a SystemExit.
    """
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r})"
    text = str(error).strip().replace("\n", " ")
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
