"""The names of a run's stages, in order, without their artifacts' schemas (``catalog.py``, which needs pyarrow):
what the command line offers for ``--from-stage`` before anything heavier is imported."""
from __future__ import annotations

from typing import Final, Literal, get_args

StageName = Literal["config", "branches", "shapes", "load_predictor", "trials", "ranking", "candidates"]
STAGE_NAMES: Final[tuple[str, ...]] = get_args(StageName)

__all__ = ["STAGE_NAMES", "StageName"]
