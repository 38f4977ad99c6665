"""The collector and a long-running proxy's start-up objects.

Start-up builds millions of long-lived Python objects (the embedder, tokenizers, the
price map, the rules' tables). Each full (generation 2) collection walks them all; on
this 2-core machine that walk stalled a request now and then by 100-250 ms, enough to
push a cold rewrite past its deadline. ``settle_heap`` collects once and freezes what is
left (``gc.freeze``): later collections walk only what requests allocate. Called once,
after the app is built and before it serves (``cli serve``); the memory bench calls it
for each proxy it starts (``bench/cold_memory.py``).
"""

from __future__ import annotations

import gc


def settle_heap() -> None:
    gc.collect()
    gc.freeze()
