"""Whether a metric's move is distinguishable from noise: ``sign_flip_test`` (paired, one value a side),
``trials_test`` (each case's trials permuted within the case), and for a case's drop in passing trials
``fisher_drop_p`` held to ``tarone_level``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_EPS = 1e-9
_TIE = 1e-7  # the trials test's sums of many cases: equal when this close
EXACT_LIMIT = 16
MONTE_CARLO = 9999
EXACT_SPLITS = 5_000  # a case's ways to split its trials, enumerated for the trials test's exact null
EXACT_SUPPORT = 200_000  # values held at once while convolving that null over the cases
TRIAL_PERMUTATIONS = 19_999  # the trials test's Monte Carlo draws: p >= 1 / 20,000, below any level it meets
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


@dataclass(frozen=True)
class CaseTrials:
    """One matched case's trials for ``trials_test``: each trial's value (NaN: it does not count) on each
    side, current trial 0 first; for an adaptive run each trial's pass and the ``rule`` that gave a case
    more than its first trial: ``"first"`` (it failed) or ``"first or baseline"`` (or a baseline trial did)."""

    base: tuple[float, ...]
    current: tuple[float, ...]
    base_passed: tuple[bool, ...] = ()
    current_passed: tuple[bool, ...] = ()
    rule: str | None = None


def trials_test(cases: Sequence[CaseTrials], *, higher_is_better: bool, seed: int = 0) -> tuple[float, float, int]:
    """(one-sided p that the current trials are worse, the smallest p these cases allow, cases that can move).

    Each case's pooled trials are permuted, keeping how many each side had (with an adaptive ``rule``,
    only the arrangements under which the rule would have given the case the trials it got). Exact
    (convolved over the cases) within EXACT_SPLITS and EXACT_SUPPORT, else TRIAL_PERMUTATIONS Monte Carlo
    draws with p = (1 + as extreme) / (draws + 1). A case no arrangement changes is left out."""
    sign = 1.0 if higher_is_better else -1.0
    rng = np.random.default_rng(seed)
    nulls, observed = [], 0.0
    for case in cases:
        if not case.base or not case.current:
            continue
        null = _case_null(case, sign, rng)
        if null is not None:
            nulls.append(null)
            observed += null[2]
    if not nulls:
        return 1.0, 1.0, 0
    if all(exact for *_, exact in nulls):
        values, probs = np.zeros(1), np.ones(1)
        for v, pr, _, _ in nulls:
            if values.size * v.size > EXACT_SUPPORT:
                break
            values, probs = _merged((values[:, None] + v[None, :]).ravel(), (probs[:, None] * pr[None, :]).ravel())
        else:
            return min(1.0, float(probs[values <= observed + _TIE].sum())), float(probs[0]), len(nulls)
    draws = np.zeros(TRIAL_PERMUTATIONS)
    for v, pr, _, exact in nulls:
        draws += rng.choice(v, size=TRIAL_PERMUTATIONS, p=pr) if exact else v
    extreme = int(np.sum(draws <= observed + _TIE))
    return (1 + extreme) / (TRIAL_PERMUTATIONS + 1), 1.0 / (TRIAL_PERMUTATIONS + 1), len(nulls)


def _case_null(
    case: CaseTrials, sign: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float, bool] | None:
    """(values, probabilities, observed, exact) of one case's statistic over the arrangements of its pooled
    trials (current, then baseline) the test allows, or None when no arrangement changes it."""
    values = np.asarray(case.current + case.base, dtype=float) * sign
    n, c = values.size, len(case.current)
    valid = ~np.isnan(values)
    finite = values[valid]
    if finite.size == 0 or np.ptp(finite) <= _EPS and valid.all():
        return None
    if case.rule is not None:
        passed = np.asarray(case.current_passed + case.base_passed, dtype=bool)
        if passed.size != n:
            raise ValueError("CaseTrials: a pass label for every trial is needed with an adaptive rule")
    rule = case.rule
    own = np.zeros((1, n), dtype=bool)
    own[0, :c] = True
    if rule is not None and not _allowed(own, np.zeros(1, dtype=int), passed, rule, c).shape[0]:
        rule = None  # trials the rule could not have given (a record that says otherwise): tested as fixed ones
    if math.comb(n, c) * (c if rule is not None else 1) <= EXACT_SPLITS:
        picks = np.array(list(itertools.combinations(range(n), c)))
        if rule is not None:  # each current set with each of its trials as the first
            firsts, picks = picks.reshape(-1), np.repeat(picks, c, axis=0)
        else:
            firsts = picks[:, 0]
        mask = _allowed(_mask(picks, n), firsts, passed if rule else None, rule, c)
        v, pr = _merged(_statistic(mask, values, valid), np.full(mask.shape[0], 1.0 / mask.shape[0]))
        exact = True
    else:
        kept, held = [], 0
        for _ in range(64):  # an arrangement the rule allows is at least 1 in C(n, c) * c
            order = rng.permuted(np.broadcast_to(np.arange(n), (TRIAL_PERMUTATIONS, n)), axis=1)
            allowed = _allowed(_mask(order[:, :c], n), order[:, 0], passed if rule else None, rule, c)
            kept.append(allowed)
            held += allowed.shape[0]
            if held >= TRIAL_PERMUTATIONS:
                break
        drawn = np.concatenate([*kept, own])  # the observed arrangement is allowed: never none
        if drawn.shape[0] < TRIAL_PERMUTATIONS:  # few agree with the rule: drawn again from those found
            drawn = drawn[rng.integers(0, drawn.shape[0], TRIAL_PERMUTATIONS)]
        v, pr, exact = _statistic(drawn[:TRIAL_PERMUTATIONS], values, valid), np.empty(0), False
    if np.ptp(v) <= _EPS:
        return None
    return v, pr, float(_statistic(own, values, valid)[0]), exact


def _mask(picks: np.ndarray, n: int) -> np.ndarray:
    mask = np.zeros((picks.shape[0], n), dtype=bool)
    np.put_along_axis(mask, picks, True, axis=1)
    return mask


def _allowed(mask: np.ndarray, firsts: np.ndarray, passed: np.ndarray | None, rule: str | None, c: int) -> np.ndarray:
    """The arrangements (rows of ``mask``: which pooled trials are current) under which the adaptive
    ``rule`` gives the case as many current trials as it had."""
    if rule is None or passed is None:
        return mask
    more = ~passed[firsts]
    if rule == "first or baseline":
        more |= ((~mask) & ~passed[None, :]).any(axis=1)
    return mask[more == (c > 1)]


def _statistic(mask: np.ndarray, values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per arrangement, the current trials' sum less what the case's mean predicts for as many: every
    trial that counts weighs alike, so later trials add to the evidence and do not dilute it."""
    filled = np.where(valid, values, 0.0)
    counts = valid.astype(float)  # ``mask @ valid`` of two bool arrays would be a bool (any), not a count
    mean = filled.sum() / max(1, int(valid.sum()))
    return mask @ filled - (mask @ counts) * mean


def _merged(values: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same distribution with equal values (to 1e-12) merged, values ascending."""
    keys, inverse = np.unique(np.round(values, 12), return_inverse=True)
    return keys, np.bincount(inverse, weights=probs)


def fisher_drop_p(base_passes: int, base_trials: int, passes: int, trials: int) -> tuple[float, float]:
    """(p, smallest p these margins allow) of the one-sided Fisher exact test that the current pass rate is
    lower than the baseline's: with S passes of N trials in all, p = sum over x <= passes of
    C(S, x) C(N - S, trials - x) / C(N, trials)."""
    total, passing = base_trials + trials, base_passes + passes
    whole = math.comb(total, trials)

    def at(x: int) -> float:
        return math.comb(passing, x) * math.comb(total - passing, trials - x) / whole

    lowest = max(0, passing - base_trials)
    return min(1.0, sum(at(x) for x in range(lowest, passes + 1))), at(lowest)


def tarone_level(min_ps: Sequence[float], alpha: float) -> tuple[float, int]:
    """Tarone's (1990) level for discrete tests, (alpha / m, m): m the smallest count >= 1 such that at most m
    tests could reach p <= alpha / m (``min_ps``: the smallest p each allows); tests that cannot cost nothing."""
    ordered = sorted(min_ps)
    m, reach = 1, 0  # reach: how many tests could reach alpha / m, counted from the smallest floor up
    while True:
        while reach < len(ordered) and ordered[reach] <= alpha / m:
            reach += 1
        while reach > 0 and ordered[reach - 1] > alpha / m:  # alpha / m only shrinks as m grows
            reach -= 1
        if reach <= m:
            return alpha / m, m
        m += 1


def metric_level(min_ps: Sequence[float], alpha: float) -> float:
    """The level each gated metric's trials test is held to: Tarone's for ``alpha`` over those tests' smallest
    p (NaN ones left out); a metric that cannot move costs nothing, so alpha / G when all G metrics can."""
    return tarone_level([m for m in min_ps if not math.isnan(m)], alpha)[0]
