"""``qaeval propose`` and ``qa.propose``: the edges (files, the generator) around the pure parts.

``propose(from_monitor=RECORD | from_corpus=DIR, out=SHEET, n=N)`` returns a ``Proposal`` and writes
the review sheet; ``accept(SHEET, data=DIR)`` is ``qaeval.proposals.accept.accept``.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.errors import Problem, UsageError
from qaeval.core.files import check_writable, refuse_overwrite
from qaeval.core.settings import ProposeSettings
from qaeval.core.text import one_line
from qaeval.proposals.accept import Accepted, accept  # noqa: F401 (qa.accept)
from qaeval.proposals.candidates import Candidate, write_sheet
from qaeval.proposals.ledger import Ledger, read_ledger

DEFAULT_GENERATOR = "qaeval.judges.generator:make_generator"
CANDIDATE_COLUMNS = (
    "candidate_id origin kind source question answer expected_behavior gold_answer gold_source_ids why checks".split()
)


@dataclass
class Proposal:
    """What ``propose`` found: the candidates (written to ``sheet``), what was dropped and why, and for
    traffic the pool it chose from (kind, stratum, rows, chosen)."""

    origin: str
    candidates: list[Candidate]
    dropped: dict[str, int]
    notes: list[str]
    sheet: Path | None = None
    pool: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["kind", "stratum", "rows", "chosen"]))
    calls: int = 0
    generation_seconds: float = 0.0  # (corpus) from the first generator request to the last reply
    exit_code: int = 0

    def to_frame(self) -> pd.DataFrame:
        """One row per candidate (``CANDIDATE_COLUMNS``)."""
        rows = [
            {
                **vars(c),
                "candidate_id": c.id,
                "gold_source_ids": ", ".join(c.gold_source_ids),
                "checks": "; ".join(c.checks),
            }
            for c in self.candidates
        ]
        return pd.DataFrame(rows, columns=CANDIDATE_COLUMNS)

    def dropped_frame(self) -> pd.DataFrame:
        return pd.DataFrame(sorted(self.dropped.items(), key=lambda kv: -kv[1]), columns=["reason", "dropped"])

    def summary_text(self) -> str:
        where = f" written to {self.sheet}" if self.sheet else ""
        head = (
            f"PROPOSED: {len(self.candidates)} candidate(s) from {self.origin}{where}"
            if self.candidates
            else f"PROPOSED: no candidate from {self.origin}{where}"
        )
        lines = [head] + [f"  note: {n}" for n in self.notes]
        if self.dropped:
            lines.append(
                "  dropped: "
                + ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items(), key=lambda kv: -kv[1]))
            )
        if self.candidates:
            lines.append("  next: fill accept (y/n) and the gold columns, then `qaeval accept SHEET --data DIR`")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from html import escape

        return "<pre>" + escape(self.summary_text()) + "</pre>" + self.to_frame().to_html(index=False)


def _generator(s: ProposeSettings, settings: Any, stack: ExitStack) -> Any:
    """The built-in generator in this process; any other in its own (``GeneratorProcess``)."""
    from qaeval.host.clients import GeneratorProcess, spec_of
    from qaeval.judges import generator as gen
    from qaeval.worker.plugins import build

    spec = s.generator

    if spec in (None, DEFAULT_GENERATOR, gen.make_generator) or s.isolation == "none":
        built = build(spec or DEFAULT_GENERATOR, what="generator", settings=settings)
        if not callable(getattr(built, "generate", None)):
            raise UsageError(f"the generator is a {type(built).__name__}, with no generate(requests) method")
        return built
    proc = GeneratorProcess(
        spec_of(spec, what="generator"),
        settings=settings,
        timeout=s.generator_timeout,
        startup=s.startup_timeout,
        data_dir=None,
    )
    stack.callback(proc.close)
    return proc


def _label_of(made: Any) -> str:
    """How the generator names itself (its config's label); its type's name when asking it fails (a
    generator in this process is the user's code: its config may raise)."""
    from qaeval.worker.plugins import contained

    ok, label = contained(lambda: made.config.label(), what="the generator's config")
    return one_line(label) if ok and isinstance(label, str) else type(made).__name__


def _data(data: str | os.PathLike[str] | None) -> tuple[Any, Ledger | None]:
    from qaeval.data.cases import load_suite

    if data is None:
        return None, None
    return load_suite(Path(data)), read_ledger(Path(data))


def _refuse_a_reviewed_sheet(path: str) -> None:
    """A review sheet someone has started deciding is never replaced: a UsageError naming how many of its
    rows carry an ``accept`` or a ``note`` (accept it first, or write to another path). One that cannot be
    read (saved in another encoding, a broken row) is not replaced either: a DatasetError (65) says why,
    for its decisions cannot be counted. (``refuse_overwrite`` has refused any file that is not a review
    sheet.)"""
    from qaeval.core.errors import DatasetError
    from qaeval.proposals.candidates import SHEET_COLUMNS
    from qaeval.verdicts.sheets import sheet_rows

    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    try:
        decided = sum(
            1 for _, _, row in sheet_rows(path, "review sheet", SHEET_COLUMNS) if row["accept"] or row["note"]
        )
    except DatasetError as exc:
        raise DatasetError(
            [
                *exc.problems,
                Problem(
                    path,
                    None,
                    "refusing to replace this review sheet: its rows cannot be read, "
                    "so the reviewer's decisions in it cannot be told apart; fix it, or give another --out",
                ),
            ]
        ) from None
    if decided:
        raise UsageError(
            f"refusing to replace the review sheet {path}: {decided} of its row(s) hold a reviewer's decision "
            "(accept or note filled in); run `qaeval accept` on it first, or give another --out"
        )


def propose(
    *,
    from_monitor: str | os.PathLike[str] | None = None,
    from_corpus: str | os.PathLike[str] | None = None,
    sheet: str | os.PathLike[str] | None = None,
    n: int | None = None,
    seed: int | None = None,
    data: str | os.PathLike[str] | None = None,
    logs: str | None = None,
    generator: Any = None,
    generator_model: str | None = None,
    generator_base_url: str | None = None,
    generator_concurrency: int | None = None,
    generator_cache: bool | None = None,
    generator_timeout: float | None = None,
    startup_timeout: float | None = None,
    isolation: str | None = None,
    max_calls: int | None = None,
) -> Proposal:
    """Candidate cases from a monitor record (``from_monitor``) or a corpus (``from_corpus``: a folder
    holding ``corpus.jsonl``, or the file), written to the review sheet ``sheet``. ``data``: the golden
    folder they are for (its cases are not proposed again, nor what its ledger holds)."""
    given = dict(locals())  # every parameter, by name, before anything else is defined here
    from qaeval.core import params as P

    p = P.check("propose", {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in given.items()})
    s = ProposeSettings.from_params(p)
    if s.from_corpus is not None and s.data is None:
        s = replace(s, data=_cases_beside(Path(s.from_corpus)))
    inputs = [("from_monitor", s.from_monitor), ("from_corpus", s.from_corpus), ("logs", s.logs)]
    outputs = [("out", s.sheet, "review")]
    refuse_overwrite(outputs, inputs, data=s.data)
    check_writable(outputs)
    _refuse_a_reviewed_sheet(s.sheet)
    if s.from_monitor is not None:
        from qaeval.proposals.traffic import propose_from_monitor

        suite, ledger = _data(s.data)
        found = propose_from_monitor(s.from_monitor, s.n, seed=s.seed, logs=s.logs, suite=suite, ledger=ledger)
        result = Proposal("traffic", found.candidates, found.dropped, found.notes, pool=found.pool)
    else:
        result = _from_corpus(s)
    result.sheet = write_sheet(result.candidates, s.sheet)
    return result


def _cases_beside(path: Path) -> str | None:
    """A corpus folder that also holds case files is the golden set its candidates are for."""
    from qaeval.data.cases import case_files

    return str(path) if path.is_dir() and case_files(path) else None


def _from_corpus(s: ProposeSettings) -> Proposal:
    from qaeval.core.errors import DatasetError
    from qaeval.data.corpus import CORPUS_FILE, Corpus
    from qaeval.judges import generator as gen
    from qaeval.proposals.documents import propose_from_corpus
    from qaeval.scoring.judge import JudgeSettings
    from qaeval.system.retriever import CorpusRetriever

    assert s.from_corpus is not None  # one of the two sources (ProposeSettings)
    path, data = Path(s.from_corpus), s.data
    model = s.generator_model or os.environ.get("QAEVAL_GENERATOR_MODEL") or None
    settings = JudgeSettings.from_env(
        model=model, base_url=s.generator_base_url, concurrency=s.generator_concurrency, cache=s.generator_cache
    )
    file = path / CORPUS_FILE if path.is_dir() else path
    if not file.is_file():
        raise DatasetError(
            f"no corpus: {file} is not a file (give a folder holding {CORPUS_FILE}, or the file)", file=str(path)
        )
    notes = (
        [f"the cases in {path} are the golden set the candidates are for (--data)"]
        if data is not None and Path(data) == path
        else []
    )
    custom = s.generator not in (None, DEFAULT_GENERATOR, gen.make_generator)
    boundary = (
        ["WARNING: isolation none: the generator ran inside qaeval (no process boundary)"]
        if custom and s.isolation == "none"
        else []
    )
    suite, ledger = _data(data)
    with ExitStack() as stack:
        corpus = stack.enter_context(Corpus.open(file))
        made = _generator(s, settings, stack)
        retriever = CorpusRetriever.build(corpus, settings.cache_dir)  # the index is kept whatever the reply cache
        stack.callback(retriever.close)
        found = propose_from_corpus(
            corpus,
            s.n,
            made,
            retriever=retriever,
            seed=s.seed,
            existing=[c.question for c in suite] if suite is not None else (),
            ledger=ledger,
            concurrency=settings.concurrency,
            max_calls=s.max_calls,
        )
        label = _label_of(made)
    if suite is not None and suite.corpus is not None:
        suite.corpus.close()
    return Proposal(
        "corpus",
        found.candidates,
        found.dropped,
        [f"generator: {label}", *notes, *boundary, *found.notes],
        calls=found.calls,
        generation_seconds=found.seconds,
    )
