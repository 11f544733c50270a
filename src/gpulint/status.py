"""Exit statuses of the `gpulint` command, and the error that means "exit 2": below both the
command line (gpulint.cli) and the commands it dispatches to (gpulint.checkcmd), so that neither
imports the other to say how a run ended."""

from __future__ import annotations

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
# gpulint itself failed somewhere (GPU001: a rule or a front-end raised on a file); the run went
# on, but its report is incomplete. 2, as for a usage error and as ruff exits on an internal
# error, and whatever `--exit-zero` says: no finding was hidden, the analysis was.
EXIT_INTERNAL_ERROR = 2


class UsageError(Exception):
    """A command line that cannot be carried out (exit 2)."""
