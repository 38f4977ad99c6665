"""Messages on their way back into a message-list API (Anthropic's ``messages``, Gemini's
``contents``): each as its role and its blocks' (parts') texts, and the merge that makes
same-role neighbours the rewrite made neighbours one message, tool results first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

KindOf = Callable[[str], tuple[str, str]]  # a block's text -> (its kind, its tool id)
RESULT = "tool_result"  # the kind ``KindOf`` gives a tool result


@dataclass
class Out:
    """One message on its way back: role, block texts, and ``src`` when it is unchanged."""

    role: str
    blocks: list[str]
    src: int | None = None
    raw: str = ""
    orig: int | None = None  # the client's message it comes from, changed or not


def merge(outs: list[Out], kind_of: KindOf) -> list[Out]:
    """Same-role neighbours the rewrite made neighbours as one message, tool results
    first; one pass, each block's kind read once."""
    merged: list[Out] = []
    run: list[Out] = []  # the outs merged[-1] stands for

    def close() -> None:
        if len(run) > 1:
            blocks = [b for r in run for b in r.blocks]
            result = [kind_of(b)[0] == RESULT for b in blocks]
            merged[-1] = Out(run[-1].role, [b for b, r in zip(blocks, result) if r]
                             + [b for b, r in zip(blocks, result) if not r])

    for o in outs:
        if not o.blocks and not o.raw:  # emptied by the rewrite (one sent empty stays)
            continue
        prev = merged[-1] if merged else None
        sent_so = prev is not None and len(run) == 1 and prev.orig is not None \
            and o.orig == prev.orig + 1
        if prev is not None and prev.role == o.role and not sent_so:
            run.append(o)
        else:
            close()
            merged.append(o)
            run = [o]
    close()
    return merged
