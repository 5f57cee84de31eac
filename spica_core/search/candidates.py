"""A branch's finite legal space: every (variant, legal parallel config, knob combination), by index.

A variant is a backend at a precision on each role's GPU type (``Variant``). Every knob is a list and parallel
configs come from a finite pool, so a branch's candidates can be numbered: the index is mixed-radix over
(variant × config) pairs, then the knobs in
declaration order (the last one fastest), which is also the thorough policy's canonical order.
The only continuous dimension, a ranged ``kv_load_ratio``, is searched on ``FLOAT_LEVELS``
evenly spaced levels. Suggesters pick indices, so a suggestion is always a legal config the
backend can run and can be checked against what was already evaluated before it is replayed.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from spica_core.search.trials import Trial
from spica_core.space.branches import VARIANT_KNOBS, Branch, Variant
from spica_core.space.params import Param
from spica_core.space.parallel import ParallelConfig
from spica_core.space.projection import ProjectionRecord, config_features, has_moe_shape, latent_params

FLOAT_LEVELS = 11  # a ranged kv_load_ratio is searched at lo, lo + (hi-lo)/10, …, hi
_TOL = 1e-9


@dataclass(frozen=True)
class Proposal:
    """A decoded candidate: the study's raw parameters, the knob selection, the projection and the config."""

    raw: dict[str, Any]
    selection: dict[str, Any]
    projection: ProjectionRecord | None
    parallel: ParallelConfig
    suggested_by: str = "enumerated"
    index: int | None = None            # its number in the branch's candidate space


def _levels(param: Param) -> tuple[Any, ...]:
    """The raw values a knob parameter takes in the finite space."""
    if param.kind == "float":
        assert param.bounds is not None
        lo, hi = param.bounds
        return tuple(lo + (hi - lo) * i / (FLOAT_LEVELS - 1) for i in range(FLOAT_LEVELS))
    return tuple(param.values)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return math.isclose(float(a), float(b), rel_tol=_TOL, abs_tol=_TOL)


class CandidateSpace:
    """The numbered legal candidates of one branch (see the module docstring for the order)."""

    def __init__(self, branch: Branch):
        self.branch = branch
        self.pairs: tuple[tuple[Variant, ParallelConfig], ...] = tuple(
            (v, c) for v in branch.variants for c in branch.configs_on(v))
        knobs = branch.knob_params()
        self.variant_params: tuple[Param, ...] = tuple(p for p in knobs if p.name in VARIANT_KNOBS)
        self.knobs: tuple[Param, ...] = tuple(p for p in knobs if p.name not in VARIANT_KNOBS)
        self.levels: tuple[tuple[Any, ...], ...] = tuple(_levels(p) for p in self.knobs)
        self.latent: tuple[Param, ...] = tuple(latent_params(branch))
        self.params: tuple[Param, ...] = self.latent + tuple(knobs)   # the study's dimensions: latent first, then knobs
        self.constants: dict[str, Any] = branch.constants()
        self.combos = math.prod(len(v) for v in self.levels)
        self.size = len(self.pairs) * self.combos
        self._pair_index = {pair: i for i, pair in enumerate(self.pairs)}
        self._variants = {tuple(v.fields().values()): v for v in branch.variants}
        self._variant_knobs = tuple(branch.variants[0].fields()) if branch.variants else ()
        self._with_ffn = has_moe_shape(branch.pool)

    @property
    def mode(self) -> str:
        return self.branch.mode

    # ------------------------------------------------------------ index ⇄ candidate

    def digits(self, index: int) -> tuple[int, tuple[int, ...]]:
        if not 0 <= index < self.size:
            raise IndexError(f"candidate {index} is outside the branch's {self.size} candidates")
        pair, rest = divmod(index, self.combos)
        out: list[int] = []
        for levels in reversed(self.levels):
            rest, d = divmod(rest, len(levels))
            out.append(d)
        return pair, tuple(reversed(out))

    def raw(self, index: int) -> dict[str, Any]:
        """The study's parameters of a candidate: latent parallel features, backend, knob values."""
        pair, digits = self.digits(index)
        variant, config = self.pairs[pair]
        out: dict[str, Any] = {}
        if self.latent:
            features = self._features(config)
            out.update({p.name: features[p.name] for p in self.latent})
        names = variant.fields()
        out.update({p.name: names[p.name] for p in self.variant_params})
        out.update({p.name: levels[d] for p, levels, d in zip(self.knobs, self.levels, digits)})
        return out

    def _features(self, config: ParallelConfig) -> dict[str, Any]:
        return config_features(config, self.branch.gpu_budget, self._with_ffn)

    @cached_property
    def raws(self) -> tuple[dict[str, Any], ...]:
        """Every candidate's parameters (only for spaces small enough to score whole)."""
        return tuple(self.raw(i) for i in range(self.size))

    def proposal(self, index: int, suggested_by: str = "enumerated") -> Proposal:
        pair, _ = self.digits(index)
        variant, config = self.pairs[pair]
        raw = self.raw(index)
        selection: dict[str, Any] = {"deployment_mode": self.mode, **variant.fields()}
        selection.update({p.name: p.decode(raw[p.name]) for p in self.knobs})
        selection.update({k: v for k, v in self.constants.items() if k not in selection})
        projection = None
        if not self.branch.is_strict_pin:
            features = self._features(config)
            projection = ProjectionRecord(features, features, 0.0, False, config)
        return Proposal(raw, selection, projection, config, suggested_by, index)

    def index_of(self, trial: Trial) -> int | None:
        """The candidate a trial evaluated, or None when it is not in this space (e.g. another config)."""
        sel = trial.selection
        variant = self._variants.get(tuple(sel.get(name) for name in self._variant_knobs))
        pair = self._pair_index.get((variant, trial.parallel)) if variant is not None else None
        if pair is None:
            return None
        index = pair
        for p, levels in zip(self.knobs, self.levels):
            if p.name not in trial.params:
                return None
            d = next((i for i, v in enumerate(levels) if _same(v, trial.params[p.name])), None)
            if d is None:
                return None
            index = index * len(levels) + d
        return index

    def seen(self, trials: Iterable[Trial]) -> set[int]:
        return {i for i in (self.index_of(t) for t in trials if t.mode == self.mode) if i is not None}

    def unseen(self, seen: set[int]) -> Iterator[int]:
        """Candidates not yet tried, in canonical order."""
        return (i for i in range(self.size) if i not in seen)


__all__ = ["CandidateSpace", "Proposal", "FLOAT_LEVELS"]
