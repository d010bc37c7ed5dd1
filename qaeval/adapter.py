"""The old name of the reference system, kept so ``--adapter qaeval.adapter:make_adapter`` still works.
It lives in ``qaeval.system.reference``."""

from qaeval.system.reference import ReferenceHub, make_adapter

__all__ = ["ReferenceHub", "make_adapter"]
