"""``GET /dashboard``: one self-contained HTML page (no CDN) that reads ``/stats``."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.lru_cache(maxsize=1)
def dashboard_html() -> str:
    return Path(__file__).with_name("dashboard.html").read_text(encoding="utf-8")
