"""The pieces the verbs are built from, for a caller who assembles a run by hand.

Most code wants the verbs at the top (``qaeval.run``, ``qaeval.score``, ``qaeval.gate`` ...): they check
their keywords against the parameter table, build the settings, guard the process and write the record.
What is here skips those steps, so the caller owns them:

    run_suite       ask the system under test every case; the outputs, unscored
    score_outputs   score outputs in the worker pool's shape (``run_suite``'s frame)
    evaluate        ask and score in one pass, streaming, as ``qaeval.run`` does
    RunSettings     how the system is asked and the run scored (what the three above take)
    Settings        a whole command's settings: RunSettings, JudgeSetup and ResumeSettings
    JudgeSetup      which judge, and how it is asked
    ResumeSettings  the journal a run writes and resumes from
    JudgeClient     the judge protocol a custom judge implements
    JudgeSettings   the HTTP judge's endpoint, model and limits
    OfflineJudge    the mechanical judge that needs no model

Everything here is as stable as the verbs; only its arguments are the internal, typed ones.
"""

from __future__ import annotations

from qaeval.commands.pipeline import evaluate
from qaeval.core.settings import JudgeSetup, ResumeSettings, RunSettings, Settings
from qaeval.judges.offline import OfflineJudge
from qaeval.scoring.evaluate import score_outputs
from qaeval.scoring.judge import JudgeClient, JudgeSettings
from qaeval.system.pool import run_suite

__all__ = [
    "JudgeClient",
    "JudgeSettings",
    "JudgeSetup",
    "OfflineJudge",
    "ResumeSettings",
    "RunSettings",
    "Settings",
    "evaluate",
    "run_suite",
    "score_outputs",
]
