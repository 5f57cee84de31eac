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
        "LOAD_PREDICTOR_SCHEMA", "RANKING_SCHEMA", "RunDir", "SHAPES_SCHEMA", "Stage", "TRIALS_SCHEMA",
    ), "catalog"),
    **dict.fromkeys(("config_from_row", "config_rows", "engine_versions", "identify", "RunIdentity"), "identity"),
    **dict.fromkeys(("Inputs", "load_inputs", "over_context_note"), "inputs"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.run.catalog import (
        BRANCHES_SCHEMA, CATALOG, CONFIG_SCHEMA, DEFAULT_RUNS_ROOT, FINGERPRINT_KEY, LOAD_PREDICTOR_SCHEMA,
        RANKING_SCHEMA, RunDir, SHAPES_SCHEMA, Stage, TRIALS_SCHEMA
    )
    from spica_core.run.identity import config_from_row, config_rows, engine_versions, identify, RunIdentity
    from spica_core.run.inputs import Inputs, load_inputs, over_context_note

__all__ = [
    "BRANCHES_SCHEMA", "CATALOG", "config_from_row", "config_rows", "CONFIG_SCHEMA", "DEFAULT_RUNS_ROOT",
    "engine_versions", "FINGERPRINT_KEY", "identify", "LOAD_PREDICTOR_SCHEMA", "over_context_note",
    "RANKING_SCHEMA", "RunDir", "RunIdentity", "SHAPES_SCHEMA", "Stage", "TRIALS_SCHEMA", "Inputs", "load_inputs",
]
