"""An on-disk verdict cache (SQLite), keyed by everything that can change a verdict.

The key is a sha256 over the endpoint (base URL without credentials), model, temperature, seed, rubric
version, response format and the full prompt. The API key is never part of a key or a row. Only replies
that parsed are stored: errors are never cached, so a rerun retries them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


def cache_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class VerdictCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, reply TEXT NOT NULL, "
                "prompt_tokens INTEGER, completion_tokens INTEGER, model TEXT, created TEXT DEFAULT CURRENT_TIMESTAMP)")
            self._db.commit()

    def get(self, key: str) -> tuple[str, int | None, int | None] | None:
        with self._lock:
            row = self._db.execute("SELECT reply, prompt_tokens, completion_tokens FROM verdicts WHERE key = ?",
                                   (key,)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def put(self, key: str, reply: str, prompt_tokens: int | None, completion_tokens: int | None, model: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO verdicts (key, reply, prompt_tokens, completion_tokens, model) "
                             "VALUES (?, ?, ?, ?, ?)", (key, reply, prompt_tokens, completion_tokens, model))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
