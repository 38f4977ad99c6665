"""Repeated lines of tool results (``tool_json``'s ``line_repeats``).

Coding agents see the same lines again and again: an edit answers with the window that
``open`` showed a turn earlier, most of it unchanged; a second ``cat`` or ``grep`` repeats
the first. A tool result (as it goes out: its text, or its JSON after compaction) whose
run of at least ``min_lines`` consecutive lines equals a run of an earlier result as it
was sent goes out with that run replaced by one line naming it::

    [File: src/marshmallow/fields.py (1997 lines total)]
    [24 lines: lines 3-26 of the result of tool call call_ahTo… above]
    1471:    def _serialize(self, value, attr, obj, **kwargs):

Line numbers count the earlier result as it was sent. Nothing is lost while that result
is in the request (``fold_duplicates`` refers to an exact repeat the same way); the fold
reads only earlier messages, which the client resends unchanged, so the result's text is
fixed when it arrives and the prefix stays stable. A run folds only when its tokens
exceed the marker's by ``min_saving``. Where several results above carry the same tool
call id (recorded demonstrations reuse them), only the latest is referred to, as "the
latest result of tool call <id> above".
"""

from __future__ import annotations

import re

from context_engine.proxy.engine.tokens import TokenCounter

LINES_REF = "[{n} lines: lines {a}-{b} of the {which} of tool call {id} above]"
# reference lines and tool_json's own markers (stubs, cuts) are never part of a run
_MARK = re.compile(r"\[(\d+ lines: lines \d+-\d+ of the (latest )?result of tool call .* above"
                   r"|tool_json: .*)\]")
MAX_CANDIDATES = 16  # latest places of a line tried as a run start (bounds the work per line)


class LineRepeats:
    """The tool results of one request as sent so far, line by line; folds repeated runs."""

    def __init__(self, counter: TokenCounter, min_lines: int, min_saving: int) -> None:
        self._counter = counter
        self._min_lines = max(1, min_lines)
        self._min_saving = min_saving
        self._results: list[tuple[str, list[str]]] = []  # (tool_call_id, lines as sent)
        self._places: dict[str, list[tuple[int, int]]] = {}  # line -> (result, line index)
        self._ids: dict[str, tuple[int, int]] = {}  # tool_call_id -> (results, the latest)

    def fold(self, text: str) -> str | None:
        """``text`` with each worthwhile run of earlier lines replaced by a reference; None
        when nothing folds."""
        if not self._places:
            return None
        lines = text.split("\n")
        marks = [_is_mark(line) for line in lines]  # a second pass meets its own markers
        out: list[str] = []
        p, folded = 0, False
        while p < len(lines):
            found = self._longest(lines, marks, p) if lines[p].strip() and not marks[p] else None
            if found is not None:
                n, ref = found
                marker = self._marker(lines[p:p + n], n, ref)
                if marker is not None:
                    out.append(marker)
                    p, folded = p + n, True
                    continue
            out.append(lines[p])
            p += 1
        return "\n".join(out) if folded else None

    def shown(self, call_id: str, text: str) -> None:
        """Record a result as sent: later results may refer to its lines."""
        k = len(self._results)
        lines = text.split("\n")
        self._results.append((call_id, lines))
        self._ids[call_id] = (self._ids.get(call_id, (0, 0))[0] + 1, k)
        for q, line in enumerate(lines):
            if line.strip() and not _is_mark(line):
                self._places.setdefault(line, []).append((k, q))

    def _longest(self, lines: list[str], marks: list[bool],
                 p: int) -> tuple[int, tuple[int, int]] | None:
        """The longest earlier run equal to ``lines[p:]``'s head (the latest on ties), when
        it has at least ``min_lines`` lines and its result can be named: the latest one
        above with its tool call id."""
        best: tuple[int, tuple[int, int]] | None = None
        for k, q in reversed(self._places.get(lines[p], [])[-MAX_CANDIDATES:]):
            ref_id, earlier = self._results[k]
            if not ref_id or self._ids[ref_id][1] != k:
                continue
            n = 1
            while p + n < len(lines) and q + n < len(earlier) and not marks[p + n] \
                    and lines[p + n] == earlier[q + n]:
                n += 1
            if n >= self._min_lines and (best is None or n > best[0]):
                best = (n, (k, q))
        return best

    def _marker(self, run: list[str], n: int, ref: tuple[int, int]) -> str | None:
        """The reference line for ``run`` when it saves at least ``min_saving`` tokens."""
        k, q = ref
        ref_id = self._results[k][0]
        which = "latest result" if self._ids[ref_id][0] > 1 else "result"
        marker = LINES_REF.format(n=n, a=q + 1, b=q + n, which=which, id=ref_id)
        saved = self._counter.text("\n".join(run)) - self._counter.text(marker)
        return marker if saved >= self._min_saving else None


def _is_mark(line: str) -> bool:
    return line.startswith("[") and _MARK.fullmatch(line) is not None
