"""A run: its identity, its folder, and the catalog of the artifacts its stages write.

The names below are imported on first use (PEP 562), so importing one submodule (say
``spica_core.run.catalog``) does not load the others and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys((
        "BRANCHES_SCHEMA", "CATALOG", "CONFIG_SCHEMA", "DEFAULT_RUNS_ROOT", "FINGERPRINT_KEY",
        "LOAD_PREDICTOR_SCHEMA", "RANKING_SCHEMA", "SHAPES_SCHEMA", "TRIALS_SCHEMA", "RunDir", "Stage",
    ), "catalog"),
    **dict.fromkeys(("RunIdentity", "config_from_row", "config_rows", "engine_versions", "identify"), "identity"),
    **dict.fromkeys(("over_context_note",), "inputs"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.run.catalog import (
        BRANCHES_SCHEMA, CATALOG, CONFIG_SCHEMA, DEFAULT_RUNS_ROOT, FINGERPRINT_KEY, LOAD_PREDICTOR_SCHEMA,
        RANKING_SCHEMA, SHAPES_SCHEMA, TRIALS_SCHEMA, RunDir, Stage
    )
    from spica_core.run.identity import RunIdentity, config_from_row, config_rows, engine_versions, identify
    from spica_core.run.inputs import over_context_note

__all__ = [
    "CATALOG", "Stage", "RunDir", "DEFAULT_RUNS_ROOT", "FINGERPRINT_KEY", "CONFIG_SCHEMA", "BRANCHES_SCHEMA",
    "SHAPES_SCHEMA", "LOAD_PREDICTOR_SCHEMA", "TRIALS_SCHEMA", "RANKING_SCHEMA", "RunIdentity", "identify",
    "engine_versions", "config_rows",
    "config_from_row",
    "over_context_note",
]
