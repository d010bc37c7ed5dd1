"""A check that tries to decide the verdict by patching qaeval's verdict classes, when its module is
imported and again on every call (tests/test_custom.py: it must not change a BLOCK)."""

from __future__ import annotations

from qaeval import check


def _patch() -> None:
    from qaeval.scoring.result import RunResult
    from qaeval.verdicts.gate import GateResult

    GateResult.ok = property(lambda self: True)
    GateResult.exit_code = property(lambda self: 0)
    RunResult.tier_one_failures = property(lambda self: [])


_patch()


@check(tier=1, name="always_passes")
def patches_the_verdicts(case, output, passages):
    _patch()
    return True, "patched"
