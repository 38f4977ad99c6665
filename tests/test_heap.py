"""``settle_heap``: start-up objects leave the collector's reach (proxy/edge/heap.py)."""

import gc

from context_engine.proxy.edge.heap import settle_heap


def test_settle_heap_freezes_what_is_alive_and_collects_the_garbage_first():
    gc.unfreeze()
    try:
        alive: list[object] = []
        garbage: list[object] = []
        alive.append(alive)  # two cycles: only one still referenced
        garbage.append(garbage)
        collected_before = gc.get_stats()[2]["collected"]
        del garbage
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_stats()[2]["collected"] > collected_before  # the dropped cycle is gone
        assert not any(o is alive for o in gc.get_objects())  # frozen: no generation walks it
    finally:
        gc.unfreeze()
