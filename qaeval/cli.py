"""The command line: parse, call the library, print, map errors to exit codes. No logic lives here.

Exit codes: 0 pass, 1 gate BLOCK, 2 judge not trusted, 3 drift alarm, 64 usage error, 65 bad input data,
70 internal error, 74 a file cannot be read or written.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from qaeval import api
from qaeval.api import DEFAULT_ADAPTER, DEFAULT_JUDGE
from qaeval.errors import QaevalError, UsageError, exit_code_for
from qaeval.plugins import scoped_environ





class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit 2, which means "judge not trusted"
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _common(p: argparse.ArgumentParser, *, scores: bool = True) -> None:
    p.add_argument("--data", required=True, metavar="DIR", help="folder whose *.jsonl files are the cases")
    if not scores:
        return
    p.add_argument("--adapter", default=DEFAULT_ADAPTER, metavar="MODULE:FACTORY",
                   help=f"system under test (default {DEFAULT_ADAPTER})")
    p.add_argument("--judge", default=DEFAULT_JUDGE, metavar="MODULE:FACTORY",
                   help=f"judge (default {DEFAULT_JUDGE}, the offline mechanical judge)")
    p.add_argument("--k", type=int, default=5, help="cut-off for retrieval metrics (default 5)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="per-case adapter timeout (default 60)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("judge settings (read by qaeval.judges.openai)")
    g.add_argument("--judge-model", metavar="NAME", help="sets QAEVAL_JUDGE_MODEL")
    g.add_argument("--judge-base-url", metavar="URL", help="sets OPENAI_BASE_URL")
    g.add_argument("--judge-concurrency", type=int, metavar="N", help="sets QAEVAL_JUDGE_CONCURRENCY")
    g.add_argument("--no-judge-cache", action="store_true", help="bypass the verdict cache (QAEVAL_JUDGE_CACHE=off)")
    r = p.add_argument_group("report")
    r.add_argument("--html", metavar="PATH", help="also render the matching notebook to a self-contained HTML report")
    r.add_argument("--show-code", action="store_true", help="keep code cells in the HTML report")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="qaeval", description="Evaluate a cited-answer QA system on a golden set.")
    parser.add_argument("--version", action="version", version=f"qaeval {api.version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("validate", help="load the cases strictly and count them")
    _common(p, scores=False)

    p = sub.add_parser("run", help="score a system and print the scoreboard")
    _common(p)

    p = sub.add_parser("baseline", help="score a system and write a reviewable JSON baseline")
    _common(p)
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the baseline JSON")

    p = sub.add_parser("gate", help="PASS or BLOCK against a baseline (exit 1 on BLOCK)")
    _common(p)
    p.add_argument("--baseline", required=True, metavar="FILE")
    p.add_argument("--tolerances", metavar="FILE", help='JSON {"metric": tolerance} over the defaults')
    p.add_argument("--tolerance", action="append", default=[], metavar="METRIC=VALUE",
                   help="override one tolerance (repeatable)")

    p = sub.add_parser("calibrate", help="check the judge against hand labels (exit 2 when not trusted)")
    _common(p)
    p.add_argument("--labels", required=True, metavar="FILE")
    p.add_argument("--min-agreement", type=float, default=0.7, metavar="X",
                   help="exact agreement every axis must reach (default 0.7)")

    p = sub.add_parser("drift", help="re-run the frozen split, append to a time series, alarm (exit 3)")
    _common(p)
    p.add_argument("--timeseries", required=True, metavar="FILE")
    p.add_argument("--window", type=int, default=10, metavar="N", help="trailing runs in the band (default 10)")
    p.add_argument("--notify", metavar="MODULE:FUNCTION", help="called with the list of alarms")
    return parser


@contextmanager
def _judge_env(args: argparse.Namespace) -> Iterator[None]:
    """Flags that configure judges and progress travel as environment variables (judge factories take
    no arguments, and notebook kernels inherit them); restored afterwards."""
    settings = {var: str(getattr(args, flag)) for flag, var in (
        ("judge_model", "QAEVAL_JUDGE_MODEL"), ("judge_base_url", "OPENAI_BASE_URL"),
        ("judge_concurrency", "QAEVAL_JUDGE_CONCURRENCY")) if getattr(args, flag, None) is not None}
    if getattr(args, "no_judge_cache", False):
        settings["QAEVAL_JUDGE_CACHE"] = "off"
    if getattr(args, "quiet", False):
        settings["QAEVAL_PROGRESS"] = "0"
    with scoped_environ(settings):
        yield


def _params(args: argparse.Namespace) -> dict[str, Any]:
    names = ("data", "adapter", "judge", "k", "timeout", "baseline", "tolerances", "tolerance", "labels",
             "min_agreement", "timeseries", "window", "notify")
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "validate":
            print(api.validate(args.data))
            return 0
        params = _params(args)
        if args.command == "baseline":
            params["out"] = args.out
        with _judge_env(args):
            outcome = api.execute(args.command, params, html=args.html, show_code=args.show_code)
        print(outcome.text)
        for note in outcome.notes:
            print(note, file=sys.stderr)
        return outcome.exit_code
    except QaevalError as exc:
        print(f"qaeval: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except OSError as exc:  # a path the user gave cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        print(f"qaeval: {exc.strerror or exc}{where}", file=sys.stderr)
        return 74
    except KeyboardInterrupt:
        print("qaeval: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug in qaeval, not the user's mistake: say so, with the trace
        traceback.print_exc()
        print("qaeval: internal error (exit 70); please report it with the trace above", file=sys.stderr)
        return 70


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
