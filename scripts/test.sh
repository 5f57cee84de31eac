#!/usr/bin/env bash
# Set up and run every test, the slow end-to-end ones included (pass -m "not slow" to skip those).
set -euo pipefail
cd "$(dirname "$0")/.."
SPICA_EXTRAS=test,ray bash scripts/setup.sh
export PREFECT_HOME="${PREFECT_HOME:-$(mktemp -d)}"
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-120}"
exec .venv/bin/python -m pytest "$@"
