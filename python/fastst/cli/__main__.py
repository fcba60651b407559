"""``python -m fastst.cli``: the ``fastst`` command."""

import sys

from .commands import main

sys.exit(main())
