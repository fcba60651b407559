"""``python -m fastst``: the ``fastst`` command."""

import sys

from .cli import main

sys.exit(main())
