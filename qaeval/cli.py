"""The command line: parse, call the library, print, map errors to exit codes. No logic lives here.

Exit codes: 0 pass, 1 gate BLOCK (or a baseline refused), 2 judge not trusted, 3 drift alarm, 64 usage
error, 65 bad input data, 70 internal error, 74 a file cannot be read or written. Everything printed
passes through ``qaeval.core.text.printable``, so an ESC sequence in a case id or an answer is shown, not
obeyed by the terminal.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from qaeval import __version__
from qaeval.boundary.plugins import scoped_environ
from qaeval.core import params as P
from qaeval.core.errors import QaevalError, UsageError, exit_code_for
from qaeval.core.text import printable

if TYPE_CHECKING:
    from types import ModuleType

# ``qaeval.api`` (and with it pandas: half a second on one core) is imported once the command is parsed,
# so that a run's worker interpreters can start on the other core meanwhile (``_head_start``).


def _api() -> ModuleType:
    from qaeval import api

    return api


def _common() -> ModuleType:
    from qaeval.commands import common

    return common


def _notebook() -> ModuleType:
    from qaeval import notebook

    return notebook


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit 2, which means "judge not trusted"
        raise UsageError(f"{message}{_closest_choice(message)} (see `{self.prog} --help`)")


def _closest_choice(message: str) -> str:
    """For argparse's "invalid choice: 'gat' (choose from 'gate', ...)": the choice closest to it, if any."""
    import difflib
    import re

    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not found:
        return ""
    choices = re.findall(r"'([^']*)'", found.group(2)) or [c.strip() for c in found.group(2).split(",")]
    close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    flags: list[str] = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags += _flags(sub)
    return sorted(set(flags))


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, and refuse what no option of the chosen command takes, naming that command's closest flag."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = _command_parser(parser, args)
        message = f"unrecognized arguments: {' '.join(extra)}"
        raise UsageError(f"{message}{_did_you_mean(command, parser, extra)} (see `{command.prog} --help`)")
    return args


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the command ``args`` was parsed for."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def _did_you_mean(command: argparse.ArgumentParser, top: argparse.ArgumentParser, extra: list[str]) -> str:
    """For an unknown flag, the command's own flag closest to it, if one is close; a flag of another
    command is said to be one."""
    import difflib

    own, every = _flags(command), _flags(top)
    for word in extra:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            close = difflib.get_close_matches(flag, own, n=1, cutoff=0.7)
            if close:
                return f"; did you mean {close[0]}?"
            if flag in every:
                return f"; {flag} is not an option of `{command.prog}`"
    return ""


def _add_params(p: argparse.ArgumentParser, command: str) -> None:
    """The command's flags, from the one table of parameters (``qaeval.core.params``)."""
    judge_group = p.add_argument_group("judge settings (for qaeval.judges.openai and judges that take settings)")
    for param in P.PARAMS:
        if command not in param.commands or param.name == "record":
            continue
        target = judge_group if param.name.startswith("judge_") and param.name != "judge" else p
        default = P.default(param.name)
        shown = (
            f" (default {default})"
            if default not in (None, [], (), False) and param.kind != "bool" and "default" not in param.help
            else ""
        )
        kwargs: dict[str, Any] = dict(dest=param.name, default=None, help=param.help + shown)
        if param.name in ("judge_cache", "generator_cache"):
            target.add_argument(
                f"--no-{param.name.replace('_', '-')}",
                dest=param.name,
                action="store_const",
                const=False,
                default=None,
                help="bypass the signed cache of replies",
            )
            continue
        if param.kind == "bool":
            target.add_argument(param.flag, action="store_const", const=True, **kwargs)
            continue
        if param.kind in ("list", "plugins"):
            kwargs.update(action="append")
        elif param.kind == "int":
            kwargs.update(type=int)
        elif param.kind == "float":
            kwargs.update(type=float)
        elif param.kind == "choice":
            kwargs.update(choices=param.choices)
        elif param.kind == "tracker":
            kwargs.update(nargs="?", const=True)
        target.add_argument(param.flag, metavar=param.metavar, required=command in param.required, **kwargs)


def _report_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("report")
    g.add_argument("--html", metavar="PATH", help="render the matching notebook to a self-contained HTML report")
    g.add_argument("--show-code", action="store_true", help="keep code cells in the HTML report")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="qaeval", description="Evaluate a cited-answer QA system on a golden set.")
    parser.add_argument("--version", action="version", version=f"qaeval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _scoring_commands(sub)
    _record_commands(sub)
    _data_commands(sub)
    _proposal_commands(sub)
    return parser


def _scoring_commands(sub: Any) -> None:
    """validate, and the commands that call the system and the judge."""
    p = sub.add_parser("validate", help="load the cases strictly and count them")
    _add_params(p, "validate")
    for command, text in (
        ("run", "score a system and print the scoreboard"),
        ("baseline", "score a green run and write it as the baseline record"),
        ("gate", "PASS or BLOCK against a baseline (exit 1 on BLOCK)"),
        ("calibrate", "check the judge against human labels (exit 2 when not trusted)"),
        ("drift", "re-run the frozen split, append to a time series, alarm (exit 3)"),
        ("monitor", "score logged traffic without gold; a time window out of its band alarms (exit 3)"),
    ):
        p = sub.add_parser(command, help=text)
        _add_params(p, command)
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        _report_flags(p)


def _record_commands(sub: Any) -> None:
    """The commands that read saved run records and call nothing."""
    p = sub.add_parser("report", help="render a saved run record to HTML, calling nothing")
    p.add_argument("record", metavar="RECORD", help="a record qaeval saved (--save)")
    p.add_argument("--html", metavar="PATH", required=True, help="where to write the self-contained HTML report")
    p.add_argument("--show-code", action="store_true", help="keep code cells in the HTML report")

    p = sub.add_parser("compare", help="two run records side by side: metric deltas and every changed case")
    p.add_argument("before", metavar="BEFORE", help="the earlier run record")
    p.add_argument("after", metavar="AFTER", help="the later run record")
    p.add_argument("--html", metavar="PATH", help="render the comparison to a self-contained HTML report")

    p = sub.add_parser("runs", help="every saved run record under a folder as a table (and an index page)")
    p.add_argument("folder", metavar="DIR", help="the folder to search for run records (subfolders too)")
    p.add_argument(
        "--html", metavar="PATH", help="an index page: a row per run linking its report, each metric over time"
    )

    p = sub.add_parser("label", help="the labelling round trip through a spreadsheet")
    lsub = p.add_subparsers(dest="label_command", required=True, parser_class=_Parser)
    e = lsub.add_parser("export", help="write a CSV sheet for annotators from a run record")
    e.add_argument("record", metavar="RECORD", help="the run record to label")
    e.add_argument("--out", required=True, metavar="SHEET.csv", help="where to write the sheet")
    e.add_argument("--sample", type=int, metavar="N", help="only N answered cases, drawn at random")
    e.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of --sample's draw (default: 0)")
    i = lsub.add_parser("import", help="check a filled sheet against its run and write labels (JSONL)")
    i.add_argument("sheet", metavar="SHEET.csv", help="the filled label sheet")
    i.add_argument("--record", required=True, metavar="RECORD", help="the run the labels are for")
    i.add_argument("--out", required=True, metavar="LABELS.jsonl", help="where to write the labels")

    p = sub.add_parser("export", help="write a run record's retrieval in another tool's format")
    esub = p.add_subparsers(dest="export_format", required=True, parser_class=_Parser)
    e = esub.add_parser("trec", help="run.trec and qrels.trec, for trec_eval, ir-measures and ranx")
    e.add_argument("record", metavar="RECORD", help="the run record whose retrieval to write")
    e.add_argument("--out", required=True, metavar="DIR", help="the folder to write into (created if needed)")


def _data_commands(sub: Any) -> None:
    """The commands that grow the golden set."""
    from qaeval.data import importers

    p = sub.add_parser("import", help="convert a public QA dataset into golden cases")
    p.add_argument("format", choices=importers.FORMATS, help="the dataset's format")
    p.add_argument(
        "input", metavar="IN", help="the dataset's file (JSON, JSON Lines, CSV or TSV, as the format has it)"
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="the folder to write into, created if needed (DIR/<prefix>.jsonl)"
    )
    p.add_argument("--limit", type=int, metavar="N", help="keep the first N records imported (default: all)")
    p.add_argument("--seed", type=int, metavar="S", help="with --limit: a random sample (else the first N)")
    p.add_argument(
        "--split",
        choices=("frozen", "living"),
        default="frozen",
        help="the split the cases belong to (default: frozen)",
    )
    p.add_argument("--prefix", metavar="TEXT", help="prefix for the case ids (default: the format's name)")
    p.add_argument(
        "--labelled",
        action="store_true",
        help="(wice, expertqa, ares) write a labelled set for calibrate --labelled instead of cases",
    )
    p.add_argument(
        "--corpus",
        action="store_true",
        help="(squad2, hotpotqa, musique) pool every paragraph of IN into DIR/corpus.jsonl; "
        "the cases name their gold passages by corpus id and carry no sources",
    )

    p = sub.add_parser("add-case", help="turn one production miss into a living-split regression case")
    p.add_argument("--data", required=True, metavar="DIR", help="the data folder to add the case to")
    p.add_argument("--from", dest="miss", metavar="MISS.json", help="the production miss, as a JSON file")
    p.add_argument("--interactive", action="store_true", help="ask for the fields the miss file does not give")


def _proposal_commands(sub: Any) -> None:
    """propose and accept: candidate cases for a person to review, and the reviewed ones into the suite."""
    p = sub.add_parser("propose", help="write a review sheet of candidate cases, from a monitor record or a corpus")
    _add_params(p, "propose")
    p.add_argument("--html", metavar="PATH", help="also render the candidates to a self-contained HTML page")
    p = sub.add_parser("accept", help="add the rows of a review sheet marked accept=y to the living split")
    p.add_argument("sheet", metavar="SHEET.csv", help="the review sheet, filled")
    p.add_argument("--data", required=True, metavar="DIR", help="the golden folder to add the cases to")


def _scoring_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        name: getattr(args, name)
        for name in P.names_for(args.command)
        if name != "record" and getattr(args, name, None) is not None
    }


def _score(args: argparse.Namespace) -> tuple[str, int, list[str]]:
    params = _scoring_params(args)
    env = {"QAEVAL_PROGRESS": "0"} if args.quiet else {}
    tracker = {name: params.pop(name) for name in ("mlflow", "mlflow_experiment") if name in params}
    with scoped_environ(env):
        api = _api()
        verb = {
            "run": api.run,
            "baseline": api.baseline,
            "gate": api.gate_run,
            "calibrate": api.calibrate_run,
            "drift": api.drift_run,
            "monitor": api.score_logs,
        }[args.command]
        _common().check_output_paths(
            params | tracker, html=args.html
        )  # before anything runs: no output may overwrite an input
        if tracker:  # logged below, once the report exists to be attached
            _common().check_parameters(args.command, **params, **tracker)
        result = verb(**params)
    notes = []
    if args.command == "baseline":
        default = "" if params.get("adapter") else " (no --adapter given: the bundled reference system)"
        notes.append(f"baseline of {result.adapter}{default} written to {params['out']}")
    if params.get("save"):
        notes.append(f"run record saved to {params['save']}")
    if args.html:
        _notebook().render(result, args.html, show_code=args.show_code)
        notes.append(f"report: {args.html}")
    if tracker.get("mlflow"):
        tracked = api.track(
            result, tracker["mlflow"], tracker.get("mlflow_experiment"), record=params.get("save"), html=args.html
        )
        notes.append(tracked.message if tracked.ok else f"qaeval: warning: {tracked.message}")
    return result.summary_text(), result.exit_code, notes


def _dispatch(args: argparse.Namespace) -> tuple[str, int, list[str]]:
    if args.command in P.SCORING or args.command == "monitor":
        return _score(args)
    api, notebook = _api(), _notebook()
    if args.command == "validate":
        return api.validate(args.data), 0, []
    if args.command == "report":
        result, path = notebook.report(args.record, args.html, show_code=args.show_code)
        notes = [f"report: {path}"]
        if not api.as_run(result).meta.boundary_enforced:  # a gate's, calibration's or drift's run too
            notes.insert(0, "WARNING: isolation none: the boundary was NOT enforced in this run")
        return f"{result.kind} record {args.record}: {result.verdict} ({result.reason})", 0, notes
    if args.command == "compare":
        _common().check_output_paths({"before": args.before, "after": args.after}, html=args.html)
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
            return (
                f"wrote a sheet for {n} answered case(s) to {path}: fill the score (0, 1, 2) and reason columns",
                0,
                [],
            )
        path, n, blank = api.label_import(args.sheet, args.record, args.out)
        return (
            f"wrote {n} label(s) to {path}" + (f"; {blank} row(s) left blank were not imported" if blank else ""),
            0,
            [],
        )
    if args.command == "export":
        return api.export_trec(args.record, args.out).summary_text(), 0, []
    if args.command == "import":
        report_ = api.import_cases(
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
        return report_.summary_text(), 0, []
    if args.command == "propose":
        _common().check_output_paths({"sheet": args.sheet}, html=args.html)
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
    try:
        args = _parse(build_parser(), argv)
        text, code, notes = _dispatch(args)
    except BaseException as exc:  # noqa: BLE001  (anything raised ends in a message and its exit code, never a traceback)
        return _failed(exc)
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


def _failed(exc: BaseException) -> int:
    """The exit code for what a command raised, said in one line (a trace only for qaeval's own bugs)."""
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
        _emit("qaeval: interrupted", sys.stderr)
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
    running (an adapter under isolation none, a judge) cannot keep the process alive."""
    code = main()
    _flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        os._exit(code)
    run_exit_hooks = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_hooks is None:  # pragma: no cover  (CPython has it)
        sys.exit(code)
    # What an exit runs (temporary folders, logging, finalizers), without the interpreter then freeing
    # every object the run made one by one: 0.45 s of a 10,000-case run (benchmarks/bench_run.py).
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
