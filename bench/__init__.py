"""The benchmark: the project's real pipeline beside baselines, on the shared JSONL data.

``python3 -m bench`` (or ``context-engine bench``) reports, per data file and per system,
token reduction, evidence retention, validity, rewrite latency and per-rule savings;
``--replay`` feeds growing prefixes as a live agent would and reports prefix stability
and the input cost with provider prompt caching priced in.
"""
