"""The rule registry: names to classes. The run order is the ``rules:`` list in config.yaml.

No import-time self-registration: a rule exists when it is listed here.
"""

from __future__ import annotations

from typing import Any

from rules.budget import Budget
from rules.summarize import Summarize

REGISTRY: dict[str, type[Any]] = {
    "summarize": Summarize,
    "budget": Budget,
}

# The rules enabled when neither config.yaml, CONTEXT_ENGINE_RULES nor --rules names any,
# in run order.
DEFAULT_RULES: tuple[str, ...] = ()
