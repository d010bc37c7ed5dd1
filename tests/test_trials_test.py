"""The gate's trials test (``qaeval.verdicts.noise.trials_test``): its p-value is valid, exactly, under
an unchanged system, with fixed and with adaptive trials; it is the sign-flip test at one trial a side;
and adaptive trials do not buy a false block by choosing which trials run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from qaeval.verdicts.noise import CaseTrials, sign_flip_test, trials_test


def _outcomes(pass_rate: float, n: int):
    """Every pass/fail sequence of n trials with its probability."""
    for bits in itertools.product((True, False), repeat=n):
        k = sum(bits)
        yield bits, pass_rate**k * (1 - pass_rate) ** (n - k)


def _size(pass_rate: float, cases_of) -> dict[float, float]:
    """P(p <= a) under an unchanged system, for every p the test can give: ``cases_of(base, current)``
    turns one draw of both sides' trials into what the test sees."""
    ps: dict[float, float] = {}
    for base, pb in _outcomes(pass_rate, 2):
        for cur, pc in _outcomes(pass_rate, 3):
            case = cases_of(base, cur)
            p = trials_test([case], higher_is_better=True)[0] if case is not None else 1.0
            ps[round(p, 12)] = ps.get(round(p, 12), 0.0) + pb * pc
    return {a: sum(w for p, w in ps.items() if p <= a + 1e-12) for a in ps}


def _adaptive(base, cur, rule):
    more = not cur[0] or (rule == "first or baseline" and not all(base))
    ran = cur if more else cur[:1]
    return CaseTrials(tuple(map(float, base)), tuple(map(float, ran)), tuple(base), tuple(ran), rule)


@pytest.mark.parametrize("pass_rate", [0.3, 0.7, 0.95])
def test_fixed_trials_give_a_valid_p_whatever_the_pass_rate(pass_rate):
    size = _size(pass_rate, lambda b, c: CaseTrials(tuple(map(float, b)), tuple(map(float, c))))
    assert all(chance <= a + 1e-12 for a, chance in size.items())


@pytest.mark.parametrize("rule", ["first", "first or baseline"])
@pytest.mark.parametrize("pass_rate", [0.3, 0.7, 0.95])
def test_adaptive_trials_give_a_valid_p_because_the_permutation_keeps_to_the_rule(pass_rate, rule):
    size = _size(pass_rate, lambda b, c: _adaptive(b, c, rule))
    assert all(chance <= a + 1e-12 for a, chance in size.items()), size


def test_one_trial_a_side_is_the_one_sided_sign_flip_test():
    diffs = [-1.0, -1.0, 1.0, -1.0, -1.0]
    cases = [CaseTrials((1.0,), (0.0,)) if d < 0 else CaseTrials((0.0,), (1.0,)) for d in diffs]
    p, floor, moved = trials_test(cases, higher_is_better=True)
    two_sided, _, _ = sign_flip_test(np.array(diffs))
    assert (p, moved) == (pytest.approx(two_sided / 2), 5)
    assert floor == pytest.approx(1 / 32)


def test_direction_cases_that_cannot_move_and_nothing_to_test():
    worse = [CaseTrials((0.0,) * 5, (1.0,))] * 6  # an over-refusal rate: lower is better, it rose
    assert trials_test(worse, higher_is_better=False)[0] == pytest.approx(6**-6)
    assert trials_test(worse, higher_is_better=True)[0] == pytest.approx(1.0)
    assert trials_test([CaseTrials((1.0,) * 5, (1.0,) * 5)] * 9, higher_is_better=True) == (1.0, 1.0, 0)
    assert trials_test([], higher_is_better=True) == (1.0, 1.0, 0)
    # a trial that does not count for the metric (NaN) is left out of the means, not read as 0
    assert trials_test([CaseTrials((1.0, float("nan")), (1.0,))], higher_is_better=True) == (1.0, 1.0, 0)


def test_many_trials_fall_back_to_a_seeded_monte_carlo_that_is_the_same_each_time():
    rng = np.random.default_rng(5)
    cases = [CaseTrials(tuple(rng.random(10)), tuple(rng.random(10) - 0.2)) for _ in range(30)]
    first = trials_test(cases, higher_is_better=True)
    assert first == trials_test(cases, higher_is_better=True)
    assert first[0] < 0.01 and first[1] == pytest.approx(1 / 20_000)
