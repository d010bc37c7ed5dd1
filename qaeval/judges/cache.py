"""An on-disk verdict cache (SQLite), keyed by everything that can change a verdict.

The key is a sha256 over the endpoint (base URL without credentials), model, temperature, seed, rubric
version, response format and the full prompt. The API key is never part of a key or a row. Only replies
that parsed are stored: errors are never cached, so a rerun retries them. A cache file that SQLite cannot
read (a crash mid-write, a disk error, a file that is not a database) is moved aside as
``*.corrupt-<time>`` and a fresh cache is started, with a warning; a cached reply that no longer parses
is forgotten and asked again.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from qaeval.errors import FileAccessError

FILE_NAME = "judge-verdicts.sqlite"


def cache_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class VerdictCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FileAccessError(self.path.parent, f"cannot create the judge cache folder ({exc.strerror or exc})") from None
        try:
            self._db = self._connect()
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self.path.replace(aside)
            warnings.warn(f"the judge cache {self.path} was unreadable ({exc}); moved aside to {aside.name} and started "
                          "afresh", stacklevel=2)
            self._db = self._connect()

    @classmethod
    def open(cls, folder: str | Path) -> VerdictCache:
        return cls(Path(folder) / FILE_NAME)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, reply TEXT NOT NULL, "
                       "prompt_tokens INTEGER, completion_tokens INTEGER, model TEXT, created TEXT DEFAULT CURRENT_TIMESTAMP)")
            db.execute("SELECT key FROM verdicts LIMIT 1").fetchall()
            db.commit()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def get(self, key: str) -> tuple[str, int | None, int | None] | None:
        with self._lock:
            try:
                row = self._db.execute("SELECT reply, prompt_tokens, completion_tokens FROM verdicts WHERE key = ?",
                                       (key,)).fetchone()
            except sqlite3.DatabaseError:
                return None
        if row is None or not isinstance(row[0], str):
            return None
        tokens = [v if isinstance(v, int) else None for v in row[1:]]
        return row[0], tokens[0], tokens[1]

    def put(self, key: str, reply: str, prompt_tokens: int | None, completion_tokens: int | None, model: str) -> None:
        with self._lock:
            try:
                self._db.execute("INSERT OR REPLACE INTO verdicts (key, reply, prompt_tokens, completion_tokens, model) "
                                 "VALUES (?, ?, ?, ?, ?)", (key, reply, prompt_tokens, completion_tokens, model))
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
