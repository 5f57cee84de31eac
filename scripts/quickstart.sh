#!/usr/bin/env bash
# Set up and run the quick-start sweep (Qwen3-32B on 8 × H200); results land in runs/<run id>/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/spica sweep examples/quickstart.yaml "$@"
