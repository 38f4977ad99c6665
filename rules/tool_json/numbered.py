"""Numbered lines without their padding (``tool_json``'s ``number_padding``).

A file view numbers its lines right-aligned: ``cat -n`` and ``nl -ba`` pad the number to
six columns and end it with a tab, Claude Code's Read ends it with ``→``::

        62	def lazy_related_operation(function, model, *related_models, **kwargs):

The padding says nothing the number does not. Without it (``62<tab>def …``) a line costs
about one token less: 5% of the tool output of the long SWE-bench sessions
(``long_traces_dev.jsonl``). A result changes only where at least ``MIN_LINES`` of its
lines are numbered this way, and only those lines lose their leading spaces: the number,
its separator and the line after it stay as they were. Nothing is lost, so no marker.
The pattern is anchored at a line start and has no nested quantifier (linear time).
"""

from __future__ import annotations

import re

NUMBERED = re.compile(r"(?m)^ +(\d+)(\t|→)")
MIN_LINES = 3


def unpad(text: str) -> str:
    """``text`` with the padding before its line numbers dropped, when at least
    ``MIN_LINES`` lines are numbered; else ``text`` itself."""
    out, lines = NUMBERED.subn(r"\1\2", text)
    return out if lines >= MIN_LINES else text
