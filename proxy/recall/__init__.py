"""Recall: every lossy rewrite has a way back (``context_recall``, answered inside the proxy).

``marks`` names each lossy spot, ``session`` keeps the per-session tool state, ``resolve``
answers a call, ``tool`` puts the tool on the wire, ``loop`` and ``stream`` run the rounds.
"""
