"""The exit-code contract every ``spica`` command keeps (docs/limits.md)."""
from __future__ import annotations

EXIT_OK = 0          # success
EXIT_NO_RESULT = 1   # ran, but found nothing feasible
EXIT_USAGE = 2       # bad input: the message on stderr names the field, or the file and line
EXIT_INTERRUPTED = 130
