"""Long tool-using assistant sessions that are not coding agents (issue 48, part 1).

A deterministic scripted agent works through environments backed by real public data
(tau-bench's retail and airline databases, FastAPI's documentation, the ISO country-code
table), so every tool result is real JSON or markdown. ``build`` records the sessions,
cuts each one at up to three points and writes ``bench/data/long_tools_dev.jsonl.gz`` in
the shared case format with ``next_action`` and ``task`` probes.
"""
