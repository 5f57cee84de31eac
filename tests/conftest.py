"""Test environment: quiet engines, an isolated Prefect home, a per-session profile cache."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

_TMP = Path(tempfile.mkdtemp(prefix="spica-tests-"))
os.environ.setdefault("DYN_LOG", "error")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("PREFECT_HOME", str(_TMP / "prefect"))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("SPICA_CACHE_DIR", str(_TMP / "cache"))

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
