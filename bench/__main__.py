"""``python3 -m bench``: see ``bench.cli``."""

import sys

from bench.cli import main

sys.exit(main())
