"""What clearing costs the agent: the way back to next-action evidence a rewrite hid, counted
per replayed session and summed per system (the figures beside the bill).

``bench/reread.py`` decides and prices the way back at each cut point; this module only
holds what it found. A session's figures under one billing model:

- ``usd``: the extra requests (``context_recall`` follow-ups the proxy makes, re-run turns
  the agent takes), each priced through the provider's cache as the replay prices its
  requests, plus the output tokens of the calls the agent writes for them;
- ``carry_usd``: a re-run's call and result stay in the client's history, so each later
  request of the session reads them again (at the cached price) until the next epoch;
- counts: cut points and evidence pieces missing, pieces brought back by recall or by a
  re-run, pieces no way back reaches, recall rounds and re-run commands (each re-run is
  one more agent turn; a recall round is one more request inside the proxy, the client
  sees no extra turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COUNTS = ("checked", "cuts", "probes", "probes_back", "pieces", "recalled", "rerun", "unreachable",
          "recall_rounds", "rereads", "recall_chosen", "rerun_chosen", "both", "both_recall")


@dataclass
class WayBack:
    usd: float = 0.0  # extra requests: input at the sim's cache price, plus the calls' output
    carry_usd: float = 0.0  # re-run results carried by later requests until the next epoch
    checked: int = 0  # next-action probes with evidence checked at cut points (this replay's)
    cuts: int = 0  # cut points whose next-action evidence was not all visible
    probes: int = 0  # next-action probes not visible
    probes_back: int = 0  # of those, all of whose evidence the way back brought back
    pieces: int = 0  # evidence strings not visible (one per string per cut point)
    recalled: int = 0  # pieces brought back by a recall round
    rerun: int = 0  # pieces brought back by re-running the command that produced them
    unreachable: int = 0  # pieces no marker names and no command produced (lost)
    recall_rounds: int = 0  # follow-up requests the proxy makes to answer context_recall
    rereads: int = 0  # commands re-run: one extra agent turn (request) each
    recall_chosen: int = 0  # cut points where a recall round was the cheaper way (or the only one)
    rerun_chosen: int = 0  # cut points where re-running was
    both: int = 0  # cut points where a piece could come back either way (a choice was made)
    both_recall: int = 0  # of those, where the recall round was the cheaper
    carried: int = 0  # tokens of re-run turns in the client's history now (replay state)
    sessions: int = 0  # sessions merged into these totals

    @property
    def total_usd(self) -> float:
        return self.usd + self.carry_usd

    def merge(self, other: WayBack) -> None:
        """Add one session's figures (``other``) to these totals."""
        self.usd += other.usd
        self.carry_usd += other.carry_usd
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.sessions += 1

    def summary(self, direct: float, billed: float) -> dict[str, Any]:
        """The bill with the way back (against the direct bill) and the counts, in all and
        per session."""
        per = max(self.sessions, 1)
        return {
            "cost_vs_direct": round((billed + self.total_usd) / direct, 4) if direct else None,
            "billed_usd": round(billed + self.total_usd, 4),
            "extra_usd": round(self.usd, 4), "carry_usd": round(self.carry_usd, 4),
            **{name: getattr(self, name) for name in COUNTS},
            "visible": self.checked - self.probes, "reachable": self.checked - self.probes + self.probes_back,
            "extra_turns": self.rereads, "extra_requests": self.recall_rounds + self.rereads,
            "sessions": self.sessions,
            "per_session": {"recall_rounds": round(self.recall_rounds / per, 2),
                            "rereads": round(self.rereads / per, 2),
                            "extra_turns": round(self.rereads / per, 2)},
        }


def worse(worst: tuple[float, str] | None, billed: float, direct: float,
          session: str) -> tuple[float, str] | None:
    """The session billed highest against its direct bill: ``worst`` or this one."""
    if direct > 0 and (worst is None or billed / direct > worst[0]):
        return billed / direct, session
    return worst


def worst_session(worst: tuple[float, str] | None) -> dict[str, Any] | None:
    return None if worst is None else {"case": worst[1], "cost_vs_direct": round(worst[0], 4)}
