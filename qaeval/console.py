"""The ``qaeval`` console script (and ``python -m qaeval``): before importing the command line, and with it
pandas and the rest of qaeval (0.6 s on the one core a run uses then), a scoring command's ``--data``
folder is handed to ``qaeval.data.ahead.read_early``, so a forked copy starts reading its case files on
another core while this process imports. Nothing else happens before the command line has parsed the
arguments: a wrong argument, or a folder that is not one, is reported by the command as always."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from qaeval.params import SCORING


def data_folder(argv: Sequence[str]) -> str | None:
    """The ``--data`` folder of a scoring command's arguments, or None."""
    if not argv or argv[0] not in SCORING:
        return None
    found = None
    for i, arg in enumerate(argv):
        if arg == "--data" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--data="):
            found = arg.split("=", 1)[1]
    return found or None


def entry() -> NoReturn:
    folder = data_folder(sys.argv[1:])
    if folder is not None:
        from qaeval.data.ahead import read_early

        read_early(folder)
    from qaeval.cli import entry as command_line

    command_line()
