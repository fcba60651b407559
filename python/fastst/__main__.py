"""``python -m fastst``: the ``fastst`` command, or a program run with the drop-in hook on.

``python -m fastst run (script.py | -m module) [args...]`` (or ``fastst run
...``) runs a program with ``import safetensors`` served by fastst, in the
processes it starts too (see ``fastst._dropin.hook.run``)."""

import sys

if sys.argv[1:2] == ["run"]:
    from ._dropin.hook import run

    sys.exit(run(sys.argv[2:]))

from .cli import main  # noqa: E402

sys.exit(main())
