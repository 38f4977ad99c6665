"""Recall: every lossy rewrite has a way back (``context_recall``, answered inside the proxy).

``marks`` names each lossy spot, ``session`` keeps the per-session tool state, ``resolve``
answers a call, ``loop`` and ``stream`` run the rounds, and each API's wire (``tool`` for
Chat Completions, ``wire_responses``, ``wire_anthropic``; the interface in ``wire``, by
name in ``wires``) puts the tool on the wire, reads the calls back and builds the follow-up.
"""
