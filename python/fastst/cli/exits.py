"""Exit codes of every subcommand of the ``fastst`` command."""

#: Clean (``diff``: identical).
EXIT_OK = 0
#: Findings at or above ``--fail-on`` (``diff``: different).
EXIT_FINDINGS = 1
#: An error: unreadable or non-safetensors input, bad usage, or an
#: inconclusive verification.
EXIT_ERROR = 2
#: Interrupted (SIGINT).
EXIT_INTERRUPTED = 130
#: The output pipe was closed (SIGPIPE).
EXIT_PIPE = 141
