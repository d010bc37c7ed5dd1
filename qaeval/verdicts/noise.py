"""Whether a metric's move is distinguishable from noise: an exact (or Monte Carlo) paired sign-flip test
over the cases whose unit moved between the baseline and the run. It informs the gate's report; the
tolerances decide.
"""

from __future__ import annotations

import numpy as np

_EPS = 1e-9
EXACT_LIMIT = 16
MONTE_CARLO = 9999
CHUNK = 2_000_000  # sign-pattern entries held at once on the Monte Carlo path


def sign_flip_test(diffs: np.ndarray, *, seed: int = 0) -> tuple[float, float, int]:
    """(two-sided p, smallest p this many cases could reach, cases that moved) for paired differences.

    Exact over every sign pattern of the nonzero differences when there are at most EXACT_LIMIT of
    them; otherwise Monte Carlo with MONTE_CARLO patterns and p = (1 + extreme) / (B + 1)."""
    moved = diffs[diffs != 0]
    m = int(moved.size)
    if m == 0:
        return 1.0, 1.0, 0
    observed = abs(moved.sum())
    if m <= EXACT_LIMIT:
        patterns = ((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2 - 1
        sums = np.abs(patterns @ moved)
        p = float(np.mean(sums >= observed - _EPS))
        return p, 2.0 / 2**m, m
    rng = np.random.default_rng(seed)
    extreme, rows = 0, max(1, CHUNK // m)  # sign patterns in blocks, so memory stays bounded for any m
    for start in range(0, MONTE_CARLO, rows):
        signs = rng.choice([-1.0, 1.0], size=(min(rows, MONTE_CARLO - start), m))
        extreme += int(np.sum(np.abs(signs @ moved) >= observed - _EPS))
    return (1 + extreme) / (MONTE_CARLO + 1), 1.0 / (MONTE_CARLO + 1), m


def format_p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def noise_note(p: float, floor: float, moved: int, paired: int) -> tuple[bool, str]:
    if paired == 0:
        return False, "no paired cases"
    if moved == 0:
        return False, f"no paired case moved ({paired} paired)"
    if floor > 0.05:
        return (
            False,
            f"too few paired cases to tell ({moved} of {paired} moved; the smallest p reachable is {floor:.3f})",
        )
    if p < 0.05:
        return True, f"distinguishable from noise (p={format_p(p)}, {moved} of {paired} paired cases moved)"
    return False, f"within noise (p={p:.2f}, {moved} of {paired} paired cases moved)"
