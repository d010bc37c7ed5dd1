"""The old home of the judge layer, kept so ``--judge qaeval.judging:make_judge`` still works. The judge
protocol and validation live in ``qaeval.scoring.judge``; the offline judge in ``qaeval.judges.offline``."""

from qaeval.judges.offline import OfflineJudge, make_judge
from qaeval.scoring.judge import AxisVerdict, JudgeClient, JudgeConfig, JudgeRequest, JudgeResponse

__all__ = ["AxisVerdict", "JudgeClient", "JudgeConfig", "JudgeRequest", "JudgeResponse", "OfflineJudge", "make_judge"]
