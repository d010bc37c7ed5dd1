"""The candidates a monitor record offers, by kind and stratum: ``Pool`` keeps the best-ranked rows of
each (kind, stratum) in a bounded heap while the record streams by, and ``quotas`` splits the rows asked
for over the kinds that have rows and over their strata in proportion.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from qaeval.scoring.monitor import allocate

KINDS = ("check_failed", "unfaithful", "abstained")
KIND_WORDS = {
    "check_failed": "failed a deterministic check",
    "unfaithful": "judged unfaithful",
    "abstained": "abstained",
}


@dataclass
class Pool:
    """What the scan found: per (kind, stratum) the number of rows and the best-ranked ones kept."""

    rows: int = 0
    decided: int = 0
    added: int = 0
    sizes: dict[tuple[str, str], int] = field(default_factory=dict)
    kept: dict[tuple[str, str], list[tuple[int, int, int, dict[str, Any]]]] = field(default_factory=dict)

    def add(self, kind: str, stratum: str, rank: int, row: dict[str, Any], limit: int) -> None:
        key = (kind, stratum)
        self.sizes[key] = self.sizes.get(key, 0) + 1
        heap = self.kept.setdefault(key, [])
        self.added += 1  # the tie-breaker: two items never compare their rows
        item = (-rank, -row["line"], -self.added, row)  # a max-heap of the kept: the worst is dropped first
        if len(heap) < limit:
            heapq.heappush(heap, item)
        elif item > heap[0]:
            heapq.heapreplace(heap, item)

    def ranked(self, key: tuple[str, str]) -> list[dict[str, Any]]:
        return [row for *_, row in sorted(self.kept.get(key, []), reverse=True)]

    def kind_sizes(self) -> dict[str, int]:
        return {k: sum(n for (kind, _), n in self.sizes.items() if kind == k) for k in KINDS}


def quotas(pool: Pool, n: int) -> dict[tuple[str, str], int]:
    """How many rows each (kind, stratum) gives: ``n`` split evenly over the kinds that have rows, then
    over each kind's strata in proportion to their sizes."""
    sizes = pool.kind_sizes()
    share = {k: 0 for k in KINDS if sizes[k]}
    left = n
    while left and any(share[k] < sizes[k] for k in share):
        open_ = [k for k in share if share[k] < sizes[k]]
        each, extra = divmod(left, len(open_))
        for i, k in enumerate(open_):
            give = min(sizes[k] - share[k], each + (1 if i < extra else 0))
            share[k] += give
            left -= give
    out: dict[tuple[str, str], int] = {}
    for kind, total in share.items():
        strata = {s: size for (k, s), size in pool.sizes.items() if k == kind}
        out.update({(kind, stratum): q for stratum, q in allocate(strata, total).items()})
    return out
