"""MkDocs hook: the CLI reference is written from qaeval's own argparse parser at build time, so it
cannot go stale. A page holding the marker ``<!-- qaeval-cli -->`` gets every command's ``--help``."""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- qaeval-cli -->"


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def cli_reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal's width: fix it
    from qaeval.commands.parser import build_parser

    parts = []
    for path, parser in _commands(build_parser()):
        title = " ".join(("qaeval", *path))
        parts += [f"## `{title}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs) -> str:
    return markdown.replace(MARKER, cli_reference()) if MARKER in markdown else markdown
