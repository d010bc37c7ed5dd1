"""User code: resolving ``module:factory`` names, calling it with every failure contained
(``contained``: only KeyboardInterrupt passes), and progress bars. Proxies of user code in other
processes raise ``UserCodeFailed`` with a finished description."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from qaeval.core.errors import QaevalError, UsageError, describe


class UserCodeFailed(QaevalError):
    """User code run in another process failed; the message says how (raised, exited, hung)."""


@contextmanager
def _importable_here() -> Iterator[None]:
    """The working directory importable while a named module is imported, as ``python -m`` has it, so
    ``--adapter my_rag:make`` works from a project folder without installing it; then off ``sys.path``
    again, so the caller's path is what it was (the ``qaeval`` command keeps it on for the whole command)."""
    here = os.getcwd()
    if here in sys.path or "" in sys.path:
        yield
        return
    sys.path.insert(0, here)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(here)


def _file_hint(module_name: str, attr: str) -> str:
    """For a module given as a file's path (``/work/my_rag.py``): how to name it instead."""
    if not (module_name.endswith(".py") or os.sep in module_name or "/" in module_name):
        return ""
    folder, file = os.path.split(module_name)
    parts = [file.removesuffix(".py")]
    while folder and os.path.isfile(os.path.join(folder, "__init__.py")):  # inside a package: named from its top
        folder, package = os.path.split(folder)
        parts.insert(0, package)
    where = f" and run from {folder} or set PYTHONPATH={folder}" if folder else ""
    return f"; name it by its module ({'.'.join(parts)}:{attr}){where}"


def _search_hint(module_name: str, exc: ImportError) -> str:
    """Where a module that was not found was looked for: the folder qaeval was run from (user code runs
    in a scratch folder, so the harness names it), PYTHONPATH and the installed packages. Running from
    another folder is the usual cause. Nothing when the module was found and something it imports is
    missing (that message names the missing one)."""
    missing = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not missing or not f"{module_name}.".startswith(f"{missing}."):
        return ""
    from qaeval.worker.process import LAUNCHED_FROM

    here = os.environ.get(LAUNCHED_FROM, os.getcwd())
    where = (
        f"in the folder qaeval was run from ({here}), on PYTHONPATH and among installed packages"
        if here  # empty: that folder is the data folder, which user code never sees
        else "on PYTHONPATH and among installed packages (not in the folder qaeval was run from: the data folder)"
    )
    top = module_name.split(".")[0]
    return (
        f"; modules are looked for {where}: run from the folder that holds {top}.py (or {top}/), "
        "or add that folder to PYTHONPATH"
    )


def resolve(name: str, *, what: str, want_callable: bool = True) -> Any:
    """Import ``module:attribute`` and return the attribute, which must be callable (unless not
    ``want_callable``: a registered ``Metric`` is an object)."""
    if not isinstance(name, str) or name.count(":") != 1 or not all(name.split(":")):
        raise UsageError(f"{what} must be named as module:callable, got {name!r}")
    module_name, attr = name.split(":")
    try:
        with _importable_here():
            module = importlib.import_module(module_name)
    except (QaevalError, KeyboardInterrupt):
        raise
    except ImportError as exc:
        hint = _file_hint(module_name, attr) or _search_hint(module_name, exc)
        raise UsageError(f"{what} {name!r}: cannot import module {module_name!r} ({exc}){hint}") from None
    except BaseException as exc:  # noqa: BLE001  (a module that fails or exits while importing is the user's)
        raise UsageError(f"{what} {name!r}: importing {module_name!r} {_did(exc)}") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(
                f"{what} {name!r}: module {module_name!r} has no attribute {attr!r}{_closest_name(part, target)}"
            ) from None
    if want_callable and not callable(target):
        raise UsageError(f"{what} {name!r}: {attr!r} is a {type(target).__name__}, not callable")
    return target


def _closest_name(attr: str, owner: Any) -> str:
    """ "; did you mean make_adapter?" for a misspelt name, when ``owner`` has a public name close to it."""
    import difflib

    try:
        names = [n for n in vars(owner) if not n.startswith("_")]
    except TypeError:
        return ""
    close = difflib.get_close_matches(attr, names, n=1, cutoff=0.7)
    return f"; did you mean {close[0]!r}?" if close else ""


def _did(exc: BaseException) -> str:
    return describe(exc) if isinstance(exc, SystemExit) else f"raised {describe(exc)}"


def contained(fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> tuple[bool, Any]:
    """Call user code. Returns (True, its result) or (False, a one-line description of how it failed:
    raised, or called sys.exit). KeyboardInterrupt is not contained."""
    try:
        return True, fn(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except UserCodeFailed as exc:
        return False, str(exc)
    except BaseException as exc:  # noqa: BLE001  (whatever user code raises is its failure, not qaeval's)
        return False, f"{what} {_did(exc)}"


def pickled(obj: Any, *, cannot: str) -> dict[str, str]:
    """``{"pickle": base64 cloudpickle}`` of ``obj``, for a process to build it from (``unpickle``); a
    UsageError when it cannot be pickled (``cannot``, its ``{}`` filled with why)."""
    import base64

    import cloudpickle

    try:
        blob = cloudpickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001  (whatever pickling raises means it cannot be shipped)
        raise UsageError(cannot.format(describe(exc))) from None
    return {"pickle": base64.b64encode(blob).decode()}


def unpickle(spec: Mapping[str, str]) -> Any:
    """The object a ``{"pickle": base64 cloudpickle}`` spec carries."""
    import base64

    import cloudpickle

    return cloudpickle.loads(base64.b64decode(spec["pickle"]))


def build(factory: Any, *, what: str, settings: Any = None) -> Any:
    """Build a plugin from a ``module:factory`` name or a factory. A factory with a ``settings``
    parameter is given ``settings``; a factory that raises or exits is a usage error naming it."""
    if isinstance(factory, str):
        label, fn = factory, resolve(factory, what=what)
    elif callable(factory):
        label, fn = getattr(factory, "__qualname__", repr(factory)), factory
    else:
        return factory
    kwargs = {}
    try:
        if settings is not None and "settings" in inspect.signature(fn).parameters:
            kwargs["settings"] = settings
    except (TypeError, ValueError):
        pass
    try:
        return fn(**kwargs)
    except (QaevalError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001  (whatever a factory raises is the user's to fix)
        raise UsageError(f"{what} factory {label!r} {_did(exc)}") from None


def _in_notebook() -> bool:
    return "ipykernel" in sys.modules and sys.modules.get("IPython") is not None


def progress_enabled(total: int, requested: bool | None = None) -> bool:
    """Whether to draw a progress bar: never when asked not to (argument or QAEVAL_PROGRESS=0), never
    for short runs, otherwise in a terminal or a notebook."""
    if requested is not None:
        return requested
    env = os.environ.get("QAEVAL_PROGRESS")
    if env is not None:
        return env.strip().lower() not in ("0", "false", "no", "off", "")
    if total < 50:
        return False
    return _in_notebook() or sys.stderr.isatty()


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


def _tqdm_class() -> Any:
    """tqdm's widget bar in a notebook that has ipywidgets, its plain text bar everywhere else (tqdm.auto
    would warn and draw nothing useful without ipywidgets)."""
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401  (only whether the widgets are installed)
            from tqdm.notebook import tqdm

            return tqdm
        except ImportError:
            pass
    from tqdm import tqdm

    return tqdm


@contextmanager
def progress_bar(total: int, *, desc: str, enabled: bool | None = None) -> Iterator[Any]:
    """A bar counting completions (``.update()``), or an object that ignores them."""
    if not progress_enabled(total, enabled):
        yield _NoBar()
        return
    bar = _tqdm_class()(total=total, desc=desc, leave=False, file=sys.stderr)
    try:
        yield bar
    finally:
        bar.close()
