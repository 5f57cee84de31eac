"""A run: its identity, its folder, and the catalog of the artifacts its stages write."""
from spica_core.run.catalog import (
    BRANCHES_SCHEMA,
    CATALOG,
    CONFIG_SCHEMA,
    DEFAULT_RUNS_ROOT,
    FINGERPRINT_KEY,
    LOAD_PREDICTOR_SCHEMA,
    RANKING_SCHEMA,
    SHAPES_SCHEMA,
    TRIALS_SCHEMA,
    RunDir,
    Stage,
)
from spica_core.run.fingerprint import canonical_json, file_fingerprint, fingerprint
from spica_core.run.identity import RunIdentity, config_from_row, config_rows, engine_versions, identify

__all__ = [
    "CATALOG", "Stage", "RunDir", "DEFAULT_RUNS_ROOT", "FINGERPRINT_KEY",
    "CONFIG_SCHEMA", "BRANCHES_SCHEMA", "SHAPES_SCHEMA", "LOAD_PREDICTOR_SCHEMA", "TRIALS_SCHEMA", "RANKING_SCHEMA",
    "canonical_json", "fingerprint", "file_fingerprint",
    "RunIdentity", "identify", "engine_versions", "config_rows", "config_from_row",
]
