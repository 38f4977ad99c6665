"""The rule registry: names to classes. The run order is the ``rules:`` list in config.yaml.

No import-time self-registration: a rule exists when it is listed here.
"""

from __future__ import annotations

from typing import Any

from rules.retrieve import Retrieve

REGISTRY: dict[str, type[Any]] = {
    "retrieve": Retrieve,
}

# The rules enabled when neither config.yaml, CONTEXT_ENGINE_RULES nor --rules names any,
# in run order.
DEFAULT_RULES: tuple[str, ...] = ()
