"""Recall: every lossy rewrite has a way back (``context_recall``, answered inside the proxy).

The engine decides it with each rewrite (``engine/recall_marks.py`` names each lossy spot,
``engine/recall_state.py`` keeps the per-session tool state, ``engine/recall_resolve.py``
answers a call); here ``loop`` and ``stream`` run the rounds, and the request's dialect's
``recall`` wire (``dialects/<api>/recall.py``; the interface in ``dialects/recall_wire.py``)
puts the tool on the wire, reads the calls back and builds the follow-up.
"""
