#!/usr/bin/env bash
# Create ./.venv (Python 3.11–3.13) and install Spica with its exact engine pins.
# SPICA_EXTRAS picks the optional parts (default: test; scripts/test.sh adds ray, for the Ray cluster tests).
# Re-running is cheap: the install is skipped while pyproject.toml and constraints.txt are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
fi
[ -n "$PY" ] || { echo "error: Python 3.11+ not found (set PYTHON=...)" >&2; exit 2; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extras="${SPICA_EXTRAS:-test}"
stamp=".venv/.spica-installed-${extras//,/-}"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[$extras]"
  echo "$want" > "$stamp"
fi
