"""Resolving ``module:factory`` names for adapters, judges and notify hooks, and progress bars."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from qaeval.errors import QaevalError, UsageError

T = TypeVar("T")


def resolve(name: str, *, what: str) -> Callable[..., Any]:
    """Import ``module:attribute`` and return the attribute, which must be callable."""
    if not isinstance(name, str) or name.count(":") != 1 or not all(name.split(":")):
        raise UsageError(f"{what} must be named as module:callable, got {name!r}")
    module_name, attr = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except QaevalError:
        raise
    except ImportError as exc:
        raise UsageError(f"{what} {name!r}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:  # a module that fails while importing is still the user's to fix
        raise UsageError(f"{what} {name!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"{what} {name!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise UsageError(f"{what} {name!r}: {attr!r} is a {type(target).__name__}, not callable")
    return target


def build(name: str, *, what: str) -> Any:
    """Resolve a zero-argument factory and call it."""
    factory = resolve(name, what=what)
    try:
        return factory()
    except QaevalError:
        raise
    except Exception as exc:
        raise UsageError(f"{what} factory {name!r} raised {type(exc).__name__}: {exc}") from None


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    try:
        import ipywidgets  # noqa: F401  (tqdm's notebook bar needs it)
    except ImportError:
        return False
    return True


def progress_enabled(total: int, requested: bool | None = None) -> bool:
    """Whether to draw a progress bar: never when asked not to (argument or QAEVAL_PROGRESS=0), never
    for short runs, otherwise in a terminal or a notebook with widgets."""
    if requested is not None:
        return requested
    env = os.environ.get("QAEVAL_PROGRESS")
    if env is not None:
        return env.strip().lower() not in ("0", "false", "no", "off", "")
    if total < 50:
        return False
    return _in_notebook() or sys.stderr.isatty()


def progress(items: Iterable[T], *, total: int, desc: str, enabled: bool | None = None) -> Iterator[T]:
    """Wrap an iterable in tqdm's auto bar when a bar is wanted."""
    if not progress_enabled(total, enabled):
        yield from items
        return
    from tqdm.auto import tqdm

    yield from tqdm(items, total=total, desc=desc, leave=False)


@contextmanager
def scoped_environ(settings: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a block, then put back what was there."""
    saved = {var: os.environ.get(var) for var in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
