"""``GET /dashboard``: one self-contained HTML page (no CDN) that reads ``/stats``."""

from __future__ import annotations

import functools
from importlib import resources


@functools.lru_cache(maxsize=1)
def dashboard_html() -> str:
    return resources.files("proxy").joinpath("dashboard.html").read_text(encoding="utf-8")
