"""The command line: parse, call the library, print, map errors to exit codes (the errors' own,
``qaeval.core.errors``). Everything printed passes through ``qaeval.core.text.printable``, so an ESC
sequence in a case id or an answer is shown, not obeyed by the terminal. ``qaeval.api`` (and pandas, slow
to import) is imported once the command is parsed."""

from __future__ import annotations

import argparse
import atexit
import os
import shlex
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from qaeval.commands.parser import build_parser, command_parser, did_you_mean
from qaeval.core import params as P
from qaeval.core.errors import QaevalError, UsageError, exit_code_for
from qaeval.core.text import printable


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, and refuse what no option of the chosen command takes, naming that command's closest flag."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = command_parser(parser, args)
        message = f"unrecognized arguments: {' '.join(extra)}"
        raise UsageError(f"{message}{did_you_mean(command, parser, extra)} (see `{command.prog} --help`)")
    return args


def _scoring_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        name: getattr(args, name)
        for name in P.names_for(args.command)
        if name != "record" and getattr(args, name, None) is not None
    }


def _score(args: argparse.Namespace) -> tuple[str, int, list[str]]:
    from qaeval import api, notebook
    from qaeval.commands.common import check_parameters

    params = _scoring_params(args)  # --quiet is progress=False, passed down like every other setting
    # checked once, the report this command adds included (no output may overwrite an input)
    settings = check_parameters(args.command, html=args.html, **params)
    result = api.perform(settings, log=False)  # logged below, once the report exists to be attached
    notes = []
    if args.command == "baseline":
        default = "" if params.get("adapter") else " (no --adapter given: the bundled reference system)"
        notes.append(f"baseline of {result.adapter}{default} written to {params['out']}")
    if params.get("save"):
        notes.append(f"run record saved to {params['save']}")
    if args.html:
        notebook.render(result, args.html, show_code=args.show_code)
        notes.append(f"report: {args.html}")
    if settings.mlflow:
        tracked = api.track(result, settings.mlflow, settings.mlflow_experiment, record=settings.save, html=args.html)
        notes.append(tracked.message if tracked.ok else f"qaeval: warning: {tracked.message}")
    return result.summary_text(), result.exit_code, notes


def _dispatch(args: argparse.Namespace) -> tuple[str, int, list[str]]:
    if args.command in P.SCORING or args.command == "monitor":
        return _score(args)
    from qaeval import api, notebook
    from qaeval.commands.common import check_output_paths

    if args.command == "validate":
        return api.validate(args.data), 0, []
    if args.command == "report":
        result, path = notebook.report(args.record, args.html, show_code=args.show_code)
        notes = [f"report: {path}"]
        if not api.as_run(result).meta.boundary_enforced:  # a gate's, calibration's or drift's run too
            notes.insert(0, "WARNING: isolation none: the boundary was NOT enforced in this run")
        return f"{result.kind} record {args.record}: {result.verdict} ({result.reason})", 0, notes
    if args.command == "compare":
        check_output_paths({"before": args.before, "after": args.after}, html=args.html)
        comparison = api.compare(args.before, args.after)
        notes = []
        if args.html:
            notebook.render(comparison, args.html)
            notes.append(f"report: {args.html}")
        return comparison.summary_text(), comparison.exit_code, notes
    if args.command == "runs":
        from qaeval.record.runs import summary_text

        if args.html:
            table, page = notebook.runs_index(args.folder, args.html)
            return summary_text(table, args.folder), 0, [f"index: {page}"]
        return summary_text(api.runs(args.folder), args.folder), 0, []
    if args.command == "label":
        if args.label_command == "export":
            path, n = api.label_export(args.record, args.out, sample=args.sample, seed=args.seed)
            fill = "fill the score (0, 1, 2) and reason columns"
            return f"wrote a sheet for {n} answered case(s) to {path}: {fill}", 0, []
        path, n, blank = api.label_import(args.sheet, args.record, args.out)
        left = f"; {blank} row(s) left blank were not imported" if blank else ""
        return f"wrote {n} label(s) to {path}{left}", 0, []
    if args.command == "export":
        return api.export_trec(args.record, args.out).summary_text(), 0, []
    if args.command == "import":
        imported = api.import_cases(
            args.format,
            args.input,
            args.out,
            limit=args.limit,
            seed=args.seed,
            split=args.split,
            prefix=args.prefix,
            labelled=args.labelled,
            corpus=args.corpus,
        )
        return imported.summary_text(), 0, []
    if args.command == "propose":
        check_output_paths({"sheet": args.sheet}, html=args.html)
        proposal = api.propose(**_scoring_params(args))
        notes = []
        if args.html:
            from qaeval.reports.render import render_proposal

            notes.append(f"report: {render_proposal(proposal, args.html)}")
        return proposal.summary_text(), proposal.exit_code, notes
    if args.command == "accept":
        return api.accept(args.sheet, data=args.data).summary_text(), 0, []
    if args.command == "add-case":
        case_id, path = api.add_case(args.data, args.miss, interactive=args.interactive)
        return f"added {case_id} to {path}", 0, []
    raise UsageError(f"unknown command {args.command!r}")  # pragma: no cover


def _emit(text: str, stream: Any) -> None:
    print(printable(text), file=stream, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (never raises, never prints a traceback for a user error)."""
    args = None
    try:
        args = _parse(build_parser(), argv)
        text, code, notes = _dispatch(args)
    except BaseException as exc:  # noqa: BLE001  (anything raised ends in a message and its exit code, never a traceback)
        return _failed(exc, _resume_hint(args, argv) if isinstance(exc, KeyboardInterrupt) else None)
    try:
        _emit(text, sys.stdout)
        for note in notes:
            _emit(note, sys.stderr)
    except BrokenPipeError:  # `qaeval ... | head`: the reader left; the command's own exit code stands
        _quiet_stdout()
    return code


def _quiet_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not complain either


def _resume_hint(args: argparse.Namespace | None, argv: Sequence[str] | None) -> str | None:
    """For a command Ctrl-C stopped: the journal it leaves beside its record and the command that picks
    it up, when there is one."""
    record = getattr(args, "save", None) or getattr(args, "out", None)
    if not isinstance(record, str):
        return None
    from qaeval.scoring.journal import journal_path

    journal = journal_path(record)
    if not journal.is_file():
        return None
    given = list(sys.argv[1:] if argv is None else argv)
    again = shlex.join(["qaeval", *given, *([] if "--resume" in given else ["--resume"])])
    return f"{journal} keeps what the run did; to go on from there, run: {again}"


def _failed(exc: BaseException, resume: str | None = None) -> int:
    """The exit code for what a command raised, said in one line (a trace only for qaeval's own bugs).
    ``resume``: for Ctrl-C, the journal kept and how to pick it up (``_resume_hint``)."""
    if isinstance(exc, QaevalError):
        _emit(f"qaeval: {exc}", sys.stderr)
        return exit_code_for(exc)
    if isinstance(exc, BrokenPipeError):  # the reader of our output left before we wrote it
        _quiet_stdout()
        return 0
    if isinstance(exc, OSError):  # a path the user gave cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        _emit(f"qaeval: {exc.strerror or exc}{where}", sys.stderr)
        return 74
    if isinstance(exc, KeyboardInterrupt):
        _emit("qaeval: interrupted" + (f"; {resume}" if resume else ""), sys.stderr)
        return 130
    if isinstance(exc, SystemExit):  # argparse's --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    if isinstance(exc, Exception):  # a bug in qaeval, not the user's mistake: say so, with the trace
        traceback.print_exception(exc)
        _emit("qaeval: internal error (exit 70); please report it with the trace above", sys.stderr)
        return 70
    raise exc


def entry() -> NoReturn:
    """The ``qaeval`` console script: ``main``, then exit at once, so a thread that user code left
    running (an adapter under isolation none, a judge) cannot keep the process alive. The process is the
    command's own: the working directory is importable for all of it, as ``python -m qaeval`` has it, so
    user code named ``module:factory`` run in it (isolation none) finds its neighbours when it is called."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    code = main()
    _flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        os._exit(code)
    run_exit_hooks = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_hooks is None:  # pragma: no cover  (CPython has it)
        sys.exit(code)
    # What an exit runs (temporary folders, logging, finalizers), without the interpreter then freeing
    # every object the run made one by one (benchmarks/bench_run.py measures what that saves).
    run_exit_hooks()
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":  # pragma: no cover
    entry()
