"""What an adapter runs, known without running it: ``adapter_code(adapter)`` gives ``(files, weaker)``,
each source file of the adapter's module with a short sha256, and why that identity is weaker than the
code the system runs (None: it is not). A resumed run compares it with its journal's.

A ``module:factory`` name is found as the worker imports it, without importing it here; a module of a
package is known by every ``.py`` file of its top-level package. An object or factory given in Python is
known by the module it was defined in (not what it was built with); code defined outside a file by its
source or compiled code. Only regular files are read, at most ``MAX_FILES`` of ``MAX_BYTES`` each."""

from __future__ import annotations

import hashlib
import importlib.machinery
import inspect
import os
import stat
import sys
from pathlib import Path
from typing import Any

MAX_FILES = 5000
MAX_BYTES = 16 << 20


def adapter_code(adapter: Any) -> tuple[dict[str, str], str | None]:
    """The adapter's source files and their digests, and why that is a weaker identity (None: it is not)."""
    if isinstance(adapter, str):
        return module_files(adapter.split(":", 1)[0])
    defined = adapter if isinstance(adapter, type) or inspect.isfunction(adapter) else type(adapter)
    built = "" if defined is adapter else "; what the object was built with (its arguments, its state) is not known"
    module = getattr(defined, "__module__", None)
    weaker: str | None = "defined in __main__ or a notebook"
    if isinstance(module, str) and module != "__main__":
        files, weaker = module_files(module)
        if files:
            said = f"the adapter was given in Python: its module's code is known{built}" if built else None
            return files, weaker or said
    source = _defined_source(defined)
    if source is not None:
        return {"<source>": source}, f"only the adapter's own source is known, not the code it calls ({weaker}){built}"
    return {}, f"the adapter's code is not known ({weaker}): a resume trusts that it did not change"


def code_digest(files: dict[str, str]) -> str | None:
    """One short sha256 over the adapter's files and their digests (``adapter_code``'s first part), what a
    run record keeps (``RunMeta.adapter_code``) so a gate can say the code changed since its baseline; None
    when the code is not known."""
    if not files:
        return None
    text = "\n".join(f"{name}\x00{digest}" for name, digest in sorted(files.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def module_files(module: str) -> tuple[dict[str, str], str | None]:
    """The files of ``module`` (dotted), as the worker would import it, with their digests."""
    parts = module.split(".")
    path = [os.getcwd(), *(p or os.getcwd() for p in sys.path)]  # the worker puts the working folder first
    try:
        top = importlib.machinery.PathFinder.find_spec(parts[0], path)
        spec = top
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                spec = None
                break
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), spec.submodule_search_locations)
    except (ImportError, ValueError, OSError):
        top = spec = None
    if top is None or spec is None:
        return {}, f"module {module!r} was not found on the import path: its code is not known"
    if top.submodule_search_locations:  # a package: every .py file of it
        return _package_files(list(top.submodule_search_locations))
    if not top.origin or not os.path.isabs(top.origin):
        return {}, f"module {module!r} has no source file: its code is not known"
    digest = _digest(Path(top.origin))
    if digest is None:
        return {}, f"module {module!r}'s file cannot be read: its code is not known"
    return {os.path.basename(top.origin): digest}, None


def _package_files(folders: list[str]) -> tuple[dict[str, str], str | None]:
    files: dict[str, str] = {}
    skipped = 0
    for folder in folders:
        root = Path(folder)
        for here, dirs, names in os.walk(root):  # links to folders are not followed
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                if not name.endswith(".py"):
                    continue
                if len(files) >= MAX_FILES:
                    return files, f"the adapter's package has more than {MAX_FILES} .py files: only the first are known"
                digest = _digest(Path(here) / name)
                if digest is None:
                    skipped += 1
                    continue
                files[str((Path(here) / name).relative_to(root.parent))] = digest
    if skipped:
        return files, f"{skipped} .py file(s) of the adapter's package could not be read: their code is not known"
    return files, None


def _digest(path: Path) -> str | None:
    """A short sha256 of a regular file's bytes; None for anything else, or one too large."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            return hashlib.sha256(handle.read(MAX_BYTES + 1)).hexdigest()[:16]
    except OSError:
        return None
    finally:
        os.close(fd)


def _defined_source(obj: Any) -> str | None:
    """A digest of the source (else the compiled code) of something defined outside a file."""
    import marshal

    try:
        text = inspect.getsource(obj).encode()
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        if code is None:
            return None
        try:
            text = marshal.dumps(code)
        except ValueError:
            return None
    return hashlib.sha256(text).hexdigest()[:16]
