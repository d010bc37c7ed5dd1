"""The old name of the demo saboteur, kept so ``--adapter qaeval.buggy_hub:make_adapter`` still works.
It lives in ``qaeval.system.saboteur``."""

from qaeval.system.saboteur import BuggyHub, make_adapter

__all__ = ["BuggyHub", "make_adapter"]
