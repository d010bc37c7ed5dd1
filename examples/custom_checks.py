"""Two rules of a team's own, registered without forking qaeval (copy and edit them).

    qaeval run --data golden --check examples.custom_checks:no_email_address \
        --metric examples.custom_checks:answer_length

``no_email_address`` is a tier-1 check: an answer that carries an e-mail address fails it, and a gate
blocks, as it does on a failing built-in deterministic check. ``answer_length`` is an informational
metric: the share of answered cases whose answer is at most ``MAX_WORDS`` words; it joins the
scoreboard, the slices and drift, and gates nothing (it has no tolerance).

Both run in a process of their own, once per case; what they raise or return wrongly fails the case,
with the reason.
"""

from __future__ import annotations

import re

from qaeval import Metric, Sample, SUTOutput, check

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
MAX_WORDS = 60


@check(tier=1, name="no_email_address")
def no_email_address(case, output: SUTOutput, passages) -> tuple[bool, str]:
    """Fails an answer that carries an e-mail address (its passages may: answers must not)."""
    found = EMAIL.search(output.answer or "")
    if found:
        return False, f"the answer carries an e-mail address ({found.group()})"
    return True, "no e-mail address in the answer"


def _within_length(sample: Sample) -> tuple[float, float]:
    if not sample.facts.answered:
        return 0.0, 0.0  # abstentions and failures are not counted
    return float(len(sample.output.answer.split()) <= MAX_WORDS), 1.0


answer_length = Metric(
    "answer_length_ok", True, "answered cases", f"answered cases of at most {MAX_WORDS} words", unit=_within_length
)
