"""Test environment: quiet engines, an isolated Prefect home, a per-session profile cache."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from absl import logging as absl_logging

_TMP = Path(tempfile.mkdtemp(prefix="spica-tests-"))
os.environ.setdefault("DYN_LOG", "error")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("PREFECT_HOME", str(_TMP / "prefect"))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("SPICA_CACHE_DIR", str(_TMP / "cache"))

# absl's handler keeps the stderr it was created with and closes it when logging is reconfigured (Prefect's
# dictConfig closes every handler) unless it is sys.stderr then; under pytest's capture it would close
# pytest's capture file, and every later test's teardown fails. Outside pytest that stream is sys.stderr.
absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
