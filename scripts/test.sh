#!/usr/bin/env bash
# Set up and run every test, the slow end-to-end ones included (pass -m "not slow" to skip those).
set -euo pipefail
cd "$(dirname "$0")/.."
SPICA_EXTRAS=test,ray bash scripts/setup.sh
# The real AIPerf client, for the benchmark-plan test, in its own environment (its pins are not Spica's); the
# version is the one the plans are written for.
aiperf="$(.venv/bin/python -c 'from spica_core.emit.bench_plans import AIPERF; print(AIPERF)')"
if [ "$(cat .venv-aiperf/.spica-aiperf 2>/dev/null)" != "$aiperf" ]; then
  .venv/bin/python -m venv --clear .venv-aiperf
  .venv-aiperf/bin/python -m pip install --quiet "$aiperf"
  echo "$aiperf" > .venv-aiperf/.spica-aiperf
fi
export PREFECT_HOME="${PREFECT_HOME:-$(mktemp -d)}"
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-120}"
exec .venv/bin/python -m pytest "$@"
