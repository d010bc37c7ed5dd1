"""An on-disk verdict cache (SQLite), keyed by everything that can change a verdict (never the API key),
holding only replies that parsed. A file SQLite cannot read is moved aside as ``*.corrupt-<time>`` and a
fresh cache started, with a warning. Every row carries an HMAC-SHA256 over its key, reply and token counts
under a secret kept outside the cache folder (``key_path``: ``$QAEVAL_CACHE_KEY``, else the user's state
folder; made on first use, readable by its owner only); a row whose HMAC is missing or wrong is a miss,
asked again and rewritten. Code running as the same user can read the secret, and so forge rows."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from qaeval.core.errors import FileAccessError

FILE_NAME = "judge-verdicts.sqlite"
KEY_BYTES = 32


def cache_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def key_path() -> Path:
    """Where the cache's secret lives: QAEVAL_CACHE_KEY, else the user's state folder."""
    given = os.environ.get("QAEVAL_CACHE_KEY")
    if given:
        return Path(given)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "qaeval" / "cache-key"
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "qaeval" / "cache-key"


def load_secret(path: Path | None = None) -> bytes:
    """The cache's secret, made (0600, in a 0700 folder) on first use. FileAccessError when it cannot be
    read or made, or is not one."""
    path = path or key_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise FileAccessError(path, f"cannot make the judge cache's key ({exc.strerror or exc})") from None
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(KEY_BYTES) + "\n")
    try:
        text = path.read_text("ascii").strip()
        secret = bytes.fromhex(text)
    except OSError as exc:
        raise FileAccessError(path, f"cannot read the judge cache's key ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != KEY_BYTES:
        raise FileAccessError(
            path,
            f"the judge cache's key is not {KEY_BYTES * 2} hex digits; delete it and a new "
            "one is made (every cached verdict is then asked again)",
        )
    return secret


def sign(secret: bytes, key: str, reply: str, prompt_tokens: int | None, completion_tokens: int | None) -> str:
    message = json.dumps([key, reply, prompt_tokens, completion_tokens], ensure_ascii=True, separators=(",", ":"))
    return hmac.new(secret, message.encode("ascii"), hashlib.sha256).hexdigest()


class VerdictCache:
    def __init__(self, path: str | Path, secret: bytes | None = None) -> None:
        self.path = Path(path)
        self._secret = secret if secret is not None else load_secret()
        self._lock = threading.Lock()
        self.rejected = 0  # rows read that failed authentication
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FileAccessError(
                self.path.parent, f"cannot create the judge cache folder ({exc.strerror or exc})"
            ) from None
        try:
            self._db = self._connect()
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self.path.replace(aside)
            warnings.warn(
                f"the judge cache {self.path} was unreadable ({exc}); moved aside to {aside.name} and started afresh",
                stacklevel=2,
            )
            self._db = self._connect()

    @classmethod
    def open(cls, folder: str | Path) -> VerdictCache:
        return cls(Path(folder) / FILE_NAME)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, reply TEXT NOT NULL, "
                "prompt_tokens INTEGER, completion_tokens INTEGER, model TEXT, created TEXT DEFAULT CURRENT_TIMESTAMP, "
                "mac TEXT)"
            )
            columns = {row[1] for row in db.execute("PRAGMA table_info(verdicts)")}
            if "mac" not in columns:  # a cache from before rows were signed: every row is a miss until rewritten
                db.execute("ALTER TABLE verdicts ADD COLUMN mac TEXT")
            db.execute("SELECT key FROM verdicts LIMIT 1").fetchall()
            db.commit()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def get(self, key: str) -> tuple[str, int | None, int | None] | None:
        """(reply, prompt tokens, completion tokens) of an authentic row, else None (a miss)."""
        with self._lock:
            try:
                row = self._db.execute(
                    "SELECT reply, prompt_tokens, completion_tokens, mac FROM verdicts WHERE key = ?", (key,)
                ).fetchone()
            except sqlite3.DatabaseError:
                return None
        if row is None:
            return None
        reply, pt, ct, mac = row
        if not (
            isinstance(reply, str)
            and all(v is None or type(v) is int for v in (pt, ct))
            and isinstance(mac, str)
            and hmac.compare_digest(mac, self._mac(key, reply, pt, ct))
        ):
            with self._lock:
                self.rejected += 1
            return None
        return reply, pt, ct

    def _mac(self, key: str, reply: str, prompt_tokens: int | None, completion_tokens: int | None) -> str:
        try:
            return sign(self._secret, key, reply, prompt_tokens, completion_tokens)
        except (TypeError, ValueError):  # text no file should hold: never authentic
            return ""

    def put(self, key: str, reply: str, prompt_tokens: int | None, completion_tokens: int | None, model: str) -> None:
        mac = self._mac(key, reply, prompt_tokens, completion_tokens)
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO verdicts (key, reply, prompt_tokens, completion_tokens, model, mac) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (key, reply, prompt_tokens, completion_tokens, model, mac),
                )
                self._db.commit()
            except sqlite3.DatabaseError as exc:  # a full disk: the verdict stands, it just is not cached
                warnings.warn(f"could not cache a judge verdict ({exc})", stacklevel=2)

    def forget(self, key: str) -> None:
        with self._lock:
            try:
                self._db.execute("DELETE FROM verdicts WHERE key = ?", (key,))
                self._db.commit()
            except sqlite3.DatabaseError:
                pass

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
