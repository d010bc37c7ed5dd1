"""A drift notify hook to copy: ``--notify examples.notify:page``.

qaeval calls it with the list of alarms after the drift line is written, each a dict with ``metric``,
``current``, ``low``, ``high``, ``mean`` and ``message``. Send them wherever your team looks (a chat
webhook, a pager); if this raises or exits, qaeval notes it and the alarm (exit 3) stands.
"""

from __future__ import annotations

import sys
from typing import Any


def page(alarms: list[dict[str, Any]]) -> None:
    for alarm in alarms:
        print(f"[qaeval drift] {alarm['message']}", file=sys.stderr)
