"""The one shape every result shares: run, gate, calibration, drift and comparison.

=====================  ==========================================================================
``ok``                 the verdict is the good one
``verdict``            the word a reviewer reads: GREEN/RED, PASS/BLOCK, TRUSTED/RETUNE JUDGE, OK/ALARM
``reason``             one or two lines saying why
``exit_code``          what the command that produced it exits with
``summary_text()``     what the command prints
``save(path)``         the run record (``qaeval.record.write``), reloadable with ``qaeval.load_run``
``raise_for_status()`` raises the typed error when not ok (a notebook's last cell)
``_repr_html_()``      a rich view in Jupyter and VS Code (drawn by ``qaeval.reports``)
``repr()``             one short line
=====================  ==========================================================================

Results hold data and say what it means in text. Two methods reach the layers above, when they are
called and never at import: ``save`` imports the record's writer (``qaeval.record.write``) and
``_repr_html_`` the report's view (``qaeval.reports.views``); so nothing needs wiring up, and the
command line does not pay for the report layer until a notebook draws a result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from qaeval.core.errors import VerdictError

ResultKind = Literal["run", "gate", "calibrate", "drift", "compare", "monitor"]


class Result:
    kind: ClassVar[ResultKind]
    error_type: ClassVar[type[VerdictError]] = VerdictError
    words: ClassVar[tuple[str, str]] = ("OK", "NOT OK")  # the verdict when ok, and when not

    @property
    def ok(self) -> bool:
        raise NotImplementedError

    @property
    def verdict(self) -> str:
        return self.words[0] if self.ok else self.words[1]

    @property
    def reason(self) -> str:
        raise NotImplementedError

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else self.error_type.exit_code

    def summary_text(self) -> str:
        raise NotImplementedError

    def headline(self) -> Any:
        """The scoreboard that speaks for this result (a DataFrame: metric, value, ci_low, ci_high, n, ...):
        its run's, unless the result keeps one of its own (a monitor's, over every logged row)."""
        run: Any = getattr(self, "run", self)
        return run.scoreboard

    def raise_for_status(self) -> None:
        """Raise this result's typed error (carrying the result) when it is not ok."""
        if not self.ok:
            raise self.error_type(f"{self.verdict}: {self.reason}", self)

    def save(self, path: str | Path, **options: Any) -> Path:
        """Write this result as a run record (``qaeval.record.write.write_record``)."""
        from qaeval.record.write import write_record

        return write_record(self, path, **options)

    def _repr_html_(self) -> str:
        """The rich view a notebook shows (``qaeval.reports.views.view``)."""
        from qaeval.reports.views import view

        return view(self)

    def __str__(self) -> str:
        return self.summary_text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.verdict}: {self.reason}>"
