"""``spica serve``: serve the sweep deployment (``spica-sweep/local``) against ``PREFECT_API_URL``."""
from __future__ import annotations

import os

from spica_core.errors import SpicaError


def serve_command() -> int:
    if not os.environ.get("PREFECT_API_URL"):
        raise SpicaError("spica serve needs a Prefect server: start one with `prefect server start --host "
                         "127.0.0.1`, then set PREFECT_API_URL=http://127.0.0.1:4200/api")
    from deployments.serve import serve_all

    serve_all()
    return 0
