"""Clear an item only when it is worth more than its expected way back.

Clearing an old result saves its tokens (less its placeholder's) at the cached price on
every later request. If the agent needs it again, it pays a way back: a ``context_recall``
round, which re-sends the request (cached) and brings the result back at the input
price. So an item is cleared only when

    (tokens - placeholder) x cached x H  >  p x (request x cached + tokens)

with ``H`` the session's expected remaining requests (the planner's horizon) and ``p``
the chance a cleared item is needed again, read off the session itself: the results the
agent fetched again after they were cleared (a later call with the same tool and
arguments: ``proxy/engine/rereads.signature``), over the items cleared so far, from a
prior of one in ten (``(rereads + 1) / (cleared + 10)``). A session whose agent keeps
coming back clears less; one that never does clears what pays.

Recall rounds the proxy answered itself never reach the client's history, so they are
not seen here (the ledger counts them: ``report --quality``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_engine.proxy.engine.messages import call_index
from context_engine.proxy.engine.rereads import signature

PRIOR_REREADS = 1.0
PRIOR_CLEARED = 10.0


def calls_by_result(messages: Sequence[Any]) -> dict[int, tuple[str, str]]:
    """Index of each tool result → the signature of the call it answers."""
    calls = call_index(messages)
    return {i: signature(*calls[str(m.get("tool_call_id"))]) for i, m in enumerate(messages)
            if isinstance(m, dict) and m.get("role") == "tool" and str(m.get("tool_call_id")) in calls}


def reread_rate(messages: Sequence[Any], cleared: Sequence[int]) -> float:
    """The session's chance that a cleared item is fetched again."""
    sigs = calls_by_result(messages)
    later: dict[tuple[str, str], int] = {}
    for i, sig in sigs.items():
        later[sig] = max(later.get(sig, -1), i)
    rereads = sum(1 for i in cleared if i in sigs and later[sigs[i]] > i)
    return (rereads + PRIOR_REREADS) / (len(cleared) + PRIOR_CLEARED)


def worth_clearing(tokens: int, kept: int, request: int, horizon: int, cached: float,
                   rate: float) -> bool:
    """Whether clearing an item of ``tokens`` (``kept`` stay in its placeholder) saves more
    over ``horizon`` requests than its expected way back."""
    return (tokens - kept) * cached * horizon > rate * (request * cached + tokens)
