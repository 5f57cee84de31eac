#!/usr/bin/env bash
# Set up and run every test, the slow end-to-end ones included (pass -m "not slow" to skip those).
set -euo pipefail
cd "$(dirname "$0")/.."
SPICA_EXTRAS=test,ray bash scripts/setup.sh
# The real AIPerf client, for the benchmark-plan tests, in its own environment (its pins are not Spica's); the
# version is the one the plans are written for.
aiperf="$(.venv/bin/python -c 'from spica_core.emit.bench_plans import AIPERF; print(AIPERF)')"
if [ "$(cat .venv-aiperf/.spica-aiperf 2>/dev/null)" != "$aiperf" ]; then
  .venv/bin/python -m venv --clear .venv-aiperf
  .venv-aiperf/bin/python -m pip install --quiet "$aiperf"
  echo "$aiperf" > .venv-aiperf/.spica-aiperf
fi
# Dynamo's own frontend and mocker engine, the server those tests measure, in a third environment: ai-dynamo at the
# runtime's pinned version with its dependencies but aisimulate, whose PyPI package is a placeholder that downloads
# its wheel from pypi.nvidia.com while it builds (the mocker needs it only for --ais-perf-model).
dynamo="ai-dynamo==$(.venv/bin/python -c 'from importlib.metadata import version; print(version("ai-dynamo-runtime"))')"
if [ "$(cat .venv-dynamo/.spica-dynamo 2>/dev/null)" != "$dynamo" ]; then
  .venv/bin/python -m venv --clear .venv-dynamo
  .venv-dynamo/bin/python -m pip install --quiet --no-deps "$dynamo"
  .venv-dynamo/bin/python -c 'from importlib.metadata import requires
print("\n".join(r for r in requires("ai-dynamo") if "extra ==" not in r and not r.startswith("aisimulate")))' \
    > .venv-dynamo/requirements.txt
  .venv-dynamo/bin/python -m pip install --quiet -r .venv-dynamo/requirements.txt
  echo "$dynamo" > .venv-dynamo/.spica-dynamo
fi
export PREFECT_HOME="${PREFECT_HOME:-$(mktemp -d)}"
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-120}"
exec .venv/bin/python -m pytest "$@"
