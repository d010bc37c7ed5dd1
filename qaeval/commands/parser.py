"""The command line's parser, built from the parameter table (``qaeval.core.params``): a flag for every
parameter of each command, its help, and the suggestion a mistyped flag or choice gets ("did you mean
--baseline?"). ``build_parser`` is also what the CLI reference in the docs is generated from.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from qaeval import __version__
from qaeval.core import params as P
from qaeval.core.errors import UsageError


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


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the command ``args`` was parsed for."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return command_parser(chosen, args)
    return parser


def did_you_mean(command: argparse.ArgumentParser, top: argparse.ArgumentParser, extra: list[str]) -> str:
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


# what argparse is told of each kind of parameter (a choice's choices, a bool's action: below)
KINDS: dict[str, dict[str, Any]] = {
    "list": dict(action="append"),
    "plugins": dict(action="append"),
    "int": dict(type=int),
    "float": dict(type=float),
    "tracker": dict(nargs="?", const=True),
}


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
        off: dict[str, Any] = dict(dest=param.name, action="store_const", const=False, default=None)
        if param.name in ("judge_cache", "generator_cache"):
            target.add_argument(
                f"--no-{param.name.replace('_', '-')}", help="bypass the signed cache of replies", **off
            )
        elif param.name == "progress":  # the command line only turns the bar off
            p.add_argument(param.flag, help=param.help, **off)
        elif param.kind == "bool":
            target.add_argument(param.flag, action="store_const", const=True, **kwargs)
        else:
            kwargs.update(KINDS.get(param.kind, {}))
            if param.kind == "choice":
                kwargs.update(choices=param.choices)
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
