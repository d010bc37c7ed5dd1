"""The one shape every result shares: run, gate, calibration, drift and comparison.

=====================  ==========================================================================
``ok``                 the verdict is the good one
``verdict``            the word a reviewer reads: GREEN/RED, PASS/BLOCK, TRUSTED/RETUNE JUDGE, OK/ALARM
``reason``             one or two lines saying why
``exit_code``          what the command that produced it exits with
``summary_text()``     what the command prints
``save(path)``         the run record (``qaeval.record``), reloadable with ``qaeval.load_run``
``raise_for_status()`` raises the typed error when not ok (a notebook's last cell)
``_repr_html_()``      a rich view in Jupyter and VS Code (drawn by ``qaeval.reports``)
``repr()``             one short line
=====================  ==========================================================================

Results hold data and say what it means in text. The layers above them plug in what results cannot
know without importing upwards: ``qaeval.record`` installs the writer ``save`` uses (``WRITERS``) when it
is imported, and ``qaeval.reports`` a view per result type for ``_repr_html_`` (``HTML_VIEWS``).
``qaeval.api`` imports the record and registers a loader for the views (``VIEW_LOADERS``), so a notebook
gets rich views without the command line paying for the report layer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from qaeval.errors import VerdictError

HTML_VIEWS: dict[type, Callable[[Any], str]] = {}
WRITERS: list[Callable[..., Path]] = []
VIEW_LOADERS: list[Callable[[], None]] = []  # called once, the first time a view is missing


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
        """Write this result as a run record (see ``qaeval.record``)."""
        if not WRITERS:
            from qaeval.errors import UsageError

            raise UsageError("saving a result needs the record layer: import qaeval.record (qaeval.api does)")
        return WRITERS[0](self, path, **options)

    def _repr_html_(self) -> str:
        while type(self) not in HTML_VIEWS and VIEW_LOADERS:
            VIEW_LOADERS.pop()()
        view = HTML_VIEWS.get(type(self))
        return view(self) if view is not None else f"<pre>{_escape(self.summary_text())}</pre>"

    def __str__(self) -> str:
        return self.summary_text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.verdict}: {self.reason}>"


def _escape(text: str) -> str:
    import html

    return html.escape(text)
