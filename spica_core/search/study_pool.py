"""A candidate pool as a :class:`~spica_core.search.study.Study` scores it (raw dicts, Vizier trials, scaled
features) and one ask's picks from it: the finite-set acquisition that keeps every suggestion a legal, unseen
candidate. A designer reaches the current ask's choice through the study's slot (``vizier_private``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from spica_core.search.jax_setup import _runtime
from spica_core.search.vizier_private import pool_features, unpadded

_POOL_POSITION: Final = "spica_pool_position"


@dataclass
class _Pool:
    """A candidate pool as the study scores it: raw dicts, Vizier trials, scaled features."""

    raws: Sequence[dict[str, Any]]
    trials: list[Any]
    features: Any                                       # vizier ModelInput, read through unpadded()
    designer_features: dict[int, Any] = field(default_factory=dict)   # per designer converter

    @property
    def continuous(self) -> np.ndarray:
        return unpadded(self.features.continuous)

    @property
    def categorical(self) -> np.ndarray:
        return unpadded(self.features.categorical)

    def for_converter(self, converter: Any) -> Any:
        key = id(converter)
        if key not in self.designer_features:
            self.designer_features[key] = pool_features(converter.to_features(self.trials))
        return self.designer_features[key]


class _Choice:
    """One ask's picks from a pool: which positions are still free, and which were taken, in order."""

    def __init__(self, pool: _Pool, free: np.ndarray):
        self.pool = pool
        self.free = free.copy()
        self.taken: list[int] = []

    def take(self, positions: Iterable[int]) -> None:
        for p in positions:
            p = int(p)
            if not self.free[p]:
                raise ValueError(f"candidate {p} is not free")
            self.free[p] = False
            self.taken.append(p)

    def best(self, scores: Any, count: int) -> list[tuple[int, float]]:
        """Take the ``count`` free positions with the highest score (NaN lowest; ties: lower position)."""
        values = np.asarray(scores, dtype=float).reshape(-1)[:len(self.pool.raws)]
        values = np.where(np.isnan(values), -np.inf, values)
        order = [int(i) for i in np.argsort(-values, kind="stable") if self.free[i]][:count]
        self.take(order)
        return [(i, float(values[i])) for i in order]

    def nearest(self, continuous: np.ndarray, categorical: np.ndarray) -> int | None:
        """The free position closest to a point: squared scaled distance plus categorical mismatches."""
        if not self.free.any():
            return None
        distance = ((self.pool.continuous - continuous) ** 2).sum(axis=1) + \
            (self.pool.categorical != categorical).sum(axis=1)
        distance = np.where(self.free, distance, np.inf)
        return int(np.argmin(distance))

    def trial(self, position: int, score: float) -> Any:
        """What a designer's acquisition step returns for a pick: the pool trial, scored, tagged."""
        vz = _runtime().vz
        out = vz.Trial(parameters=self.pool.trials[position].parameters,
                       metadata=vz.Metadata({_POOL_POSITION: str(position)}))
        out.complete(vz.Measurement(metrics={"acquisition": score}))
        return out
