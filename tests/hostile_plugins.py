"""Custom judges and notify hooks that attack the harness: they exit the process, patch the verdict
classes, hang, or misreport. Each runs in its own process; none may decide a verdict or hang a run."""

from __future__ import annotations

import json
import os
import time

from qaeval.judges.offline import OfflineJudge
from qaeval.scoring.judge import JudgeConfig, JudgeResponse


def _hang() -> None:
    while True:
        try:
            time.sleep(5)
        except BaseException:  # noqa: BLE001  (nothing interrupts it)
            pass


class _Judge(OfflineJudge):
    """The offline judge's grades under another name, so only the attack differs."""

    def __init__(self) -> None:
        super().__init__()
        self.config = JudgeConfig(name="hostile", model="token-overlap")


class ExitingJudge(_Judge):
    def judge(self, requests):
        os._exit(0)


class PatchingJudge(_Judge):
    """Makes every gate pass, in whatever process it runs in, then grades normally."""

    def judge(self, requests):
        from qaeval.verdicts.gate import GateResult

        GateResult.ok = property(lambda self: True)
        print("GATE: PASS")
        return super().judge(requests)


class HangingJudge(_Judge):
    def judge(self, requests):
        _hang()


class HangsOnFirstChunk(_Judge):
    """Hangs on the first chunk only when QAEVAL_TEST_MARK names a file it has not made yet."""

    def judge(self, requests):
        mark = os.environ["QAEVAL_TEST_MARK"]
        if not os.path.exists(mark):
            open(mark, "w").close()
            _hang()
        return super().judge(requests)


class MisreportingJudge(_Judge):
    """Answers with wrong types, a wrong case id and a verdict that is not a verdict."""

    def judge(self, requests):
        out = super().judge(requests)
        out[0] = {"case_id": requests[0].case_id}
        out[1] = JudgeResponse("someone-else", out[1].verdicts)
        out[2].verdicts = ["not a verdict"] + out[2].verdicts[1:]
        out[3].prompt_tokens = "many"
        return out


class UnsendableJudge(_Judge):
    """Full marks, but rationales that are not valid Unicode (an unpaired surrogate)."""

    def judge(self, requests):
        out = super().judge(requests)
        for r in out:
            for v in r.verdicts:
                v.rationale = "broken \ud800 text"
        return out


class DumpableReporter(_Judge):
    """Grades as the offline judge and says, in every rationale, whether its process is dumpable (Linux)."""

    def judge(self, requests):
        import ctypes

        dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
        out = super().judge(requests)
        for r in out:
            for v in r.verdicts:
                v.rationale = f"dumpable={dumpable}"
        return out


def make_dumpable_reporter():
    return DumpableReporter()


def make_exiting_judge():
    return ExitingJudge()


def make_patching_judge():
    return PatchingJudge()


def make_hanging_judge():
    return HangingJudge()


def make_hangs_on_first_chunk():
    return HangsOnFirstChunk()


def make_misreporting_judge():
    return MisreportingJudge()


def make_unsendable_judge():
    return UnsendableJudge()


def make_hanging_factory():
    _hang()


def make_judge_with_settings(settings):
    """Reports the settings it was given as its model name, to show what crossed."""
    judge = _Judge()
    seen = {"model": settings.model, "cache_dir": settings.cache_dir, "has_key": settings.api_key is not None}
    judge.config = JudgeConfig(name="settings", model=json.dumps(seen, sort_keys=True))
    return judge


def notify_to_file(alarms):
    with open(os.environ["QAEVAL_TEST_ALARMS"], "a") as f:
        f.write(json.dumps(alarms) + "\n")


def notify_os_exit(alarms):
    os._exit(0)


def notify_hangs(alarms):
    _hang()


def notify_prints(alarms):
    print(f"paged about {len(alarms)} alarm(s)")
