"""``python3 -m bench``: see ``context_engine.bench.cli``."""

import sys

from context_engine.bench.cli import main

sys.exit(main())
