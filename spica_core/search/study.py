"""A seeded Vizier study over one branch, driven through Vizier's designers (no service, no database).

The trials table is the source of truth: a :class:`Study` holds its completed trials as plain
:class:`TrialRecord` values and rebuilds a fresh designer from them on every :meth:`Study.suggest`.
The designer's random key comes from ``(seed, step)``, so the same seed, the same trials and the
same step always give the same suggestions -- a killed sweep resumes exactly where it stopped.

Runtime notes (spec/orchestration.md §2): Vizier's GP designers need ``jax_enable_x64``; a fresh
GP designer per call leaks compiled code unless ``jax.clear_caches()`` runs first; GP designers
reject a 0-dimensional space, hence the dummy ``_spica_constant`` categorical.
"""
from __future__ import annotations

import importlib.util
import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Final, Iterable, Literal, Sequence

import numpy as np

from spica_core.space.params import Param

ALGORITHMS: Final = ("DEFAULT", "GAUSSIAN_PROCESS_BANDIT", "RANDOM_SEARCH", "QUASI_RANDOM_SEARCH")
GP_ALGORITHMS: Final = frozenset({"DEFAULT", "GAUSSIAN_PROCESS_BANDIT"})
CONSTANT_PARAM: Final = "_spica_constant"
_QUASI_RANDOM_SKIP: Final = 1000  # Vizier's default burn-in of the Halton sequence
_FLOAT_TOL: Final = 1e-9

Goal = Literal["max", "min"]


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class TrialRecord:
    """One completed trial as the trials table stores it: raw parameters plus outcome."""

    params: dict[str, Any]
    metrics: dict[str, float] | None = None
    infeasible_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.infeasible_reason is None


# ---------------------------------------------------------------- Vizier runtime


_RUNTIME: SimpleNamespace | None = None


def _runtime() -> SimpleNamespace:
    """Import jax and Vizier once, configured for a CPU sweep: x64 on, warnings and absl quiet."""
    global _RUNTIME
    if _RUNTIME is not None:
        return _RUNTIME
    if "JAX_PLATFORMS" not in os.environ and importlib.util.find_spec("jax_cuda12_plugin") is None:
        os.environ["JAX_PLATFORMS"] = "cpu"
    for name in ("absl", "jax", "jax._src.xla_bridge", "vizier", "equinox", "jaxopt"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
        import jax

        jax.config.update("jax_enable_x64", True)
        from vizier import algorithms as vza
        from vizier import pyvizier as vz
        from vizier._src.algorithms.designers import gp_bandit, gp_ucb_pe, quasi_random
        from vizier._src.algorithms.designers import random as vrandom
        from vizier.pyvizier.converters import padding
    _RUNTIME = SimpleNamespace(jax=jax, vz=vz, vza=vza, gp_bandit=gp_bandit, gp_ucb_pe=gp_ucb_pe,
                               quasi_random=quasi_random, random=vrandom, padding=padding)
    return _RUNTIME


def derive_seed(seed: int, step: int) -> int:
    """A 32-bit seed from (study seed, step), stable across processes and Python versions."""
    if seed < 0 or step < 0:
        raise ValueError(f"seed and step must be >= 0 (got seed={seed}, step={step})")
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, dtype=np.uint32)[0])


# ---------------------------------------------------------------- the study


class Study:
    """One branch's optimisation: parameters, objectives, algorithm, seed and completed trials."""

    def __init__(self, params: Sequence[Param], objectives: Sequence[tuple[str, Goal]] = (("objective", "max"),),
                 algorithm: str = "DEFAULT", seed: int = 0, *, constants: dict[str, Any] | None = None,
                 trials: Iterable[TrialRecord] = (), clear_jax_caches: bool = True) -> None:
        self.params: tuple[Param, ...] = tuple(params)
        self.objectives: tuple[tuple[str, Goal], ...] = tuple((str(n), g) for n, g in objectives)
        self.algorithm = str(getattr(algorithm, "value", algorithm))
        self.seed = int(seed)
        self.constants: dict[str, Any] = dict(constants or {})
        self.clear_jax_caches = clear_jax_caches  # False only to measure the leak (bench/bench_study.py)
        self._by_name = {p.name: p for p in self.params}
        self._check_declaration()
        self._problem: Any = None
        self._trials: list[TrialRecord] = []
        for record in trials:
            self.complete(record.params, record.metrics, record.infeasible_reason, record.metadata)

    # ------------------------------------------------------------ declaration (§7.3)

    def _check_declaration(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm {self.algorithm!r} is not supported; allowed: {list(ALGORITHMS)}")
        if not self.objectives:
            raise ValueError("a study needs at least one objective")
        for name, goal in self.objectives:
            if goal not in ("max", "min"):
                raise ValueError(f"objective {name!r}: goal must be 'max' or 'min', got {goal!r}")
        if len({n for n, _ in self.objectives}) != len(self.objectives):
            raise ValueError(f"objective names must be distinct: {[n for n, _ in self.objectives]}")
        if len(self._by_name) != len(self.params):
            raise ValueError(f"parameter names must be distinct: {[p.name for p in self.params]}")
        if CONSTANT_PARAM in self._by_name:
            raise ValueError(f"{CONSTANT_PARAM} is reserved for the empty search space")
        clash = sorted(set(self.constants) & set(self._by_name))
        if clash:
            raise ValueError(f"{clash} are both searched parameters and injected constants")
        for p in self.params:
            if p.kind in ("categorical", "discrete") and not p.values:
                raise ValueError(f"parameter {p.name!r}: a {p.kind} parameter needs values")
            if p.kind == "float" and (p.bounds is None or not p.bounds[0] < p.bounds[1]):
                raise ValueError(f"parameter {p.name!r}: a float parameter needs bounds (lo < hi), got {p.bounds}")

    @property
    def problem(self) -> Any:
        """The vz.ProblemStatement (built on first use so importing this module stays cheap)."""
        if self._problem is None:
            self._problem = self._build_problem()
        return self._problem

    def _build_problem(self) -> Any:
        vz = _runtime().vz
        problem = vz.ProblemStatement()
        root = problem.search_space.root
        for p in self.params:
            scale = vz.ScaleType.LOG if p.log_scale else vz.ScaleType.LINEAR
            if p.kind == "categorical":
                root.add_categorical_param(p.name, [str(v) for v in p.values],
                                           default_value=None if p.default is None else str(p.default))
            elif p.kind == "discrete":
                root.add_discrete_param(p.name, [float(v) for v in p.values], scale_type=scale,
                                        default_value=None if p.default is None else float(p.default))
            else:
                assert p.bounds is not None
                root.add_float_param(p.name, float(p.bounds[0]), float(p.bounds[1]), scale_type=scale,
                                     default_value=None if p.default is None else float(p.default))
        if not self.params:
            root.add_categorical_param(CONSTANT_PARAM, ["0"], default_value="0")
        for name, goal in self.objectives:
            direction = vz.ObjectiveMetricGoal.MAXIMIZE if goal == "max" else vz.ObjectiveMetricGoal.MINIMIZE
            problem.metric_information.append(vz.MetricInformation(name, goal=direction))
        return problem

    # ------------------------------------------------------------ trials

    @property
    def trials(self) -> tuple[TrialRecord, ...]:
        return tuple(self._trials)

    def complete(self, params: dict[str, Any], metrics: dict[str, float] | None = None,
                 infeasible_reason: str | None = None, metadata: dict[str, Any] | None = None) -> TrialRecord:
        """Record a finished trial: feasible with every objective's metric, or infeasible with a reason."""
        raw = self._checked_params(params)
        if infeasible_reason is not None:
            if not str(infeasible_reason).strip():
                raise ValueError("an infeasible trial needs a non-empty reason")
        else:
            if metrics is None:
                raise ValueError("a feasible trial needs metrics (or give infeasible_reason)")
            for name, _ in self.objectives:
                if name not in metrics:
                    raise ValueError(f"metrics lack objective {name!r} (got {sorted(metrics)})")
                value = float(metrics[name])
                if not math.isfinite(value):
                    raise ValueError(f"metric {name!r} is not finite ({value}); report the trial as infeasible")
        record = TrialRecord(params=raw,
                             metrics=None if metrics is None else {k: float(v) for k, v in metrics.items()},
                             infeasible_reason=None if infeasible_reason is None else str(infeasible_reason),
                             metadata=dict(metadata or {}))
        self._trials.append(record)
        return record

    def _checked_params(self, params: dict[str, Any]) -> dict[str, Any]:
        given = {k: v for k, v in params.items() if k != CONSTANT_PARAM}
        missing = [p.name for p in self.params if p.name not in given]
        unknown = sorted(set(given) - set(self._by_name))
        if missing or unknown:
            raise ValueError(f"trial parameters do not match the study: missing {missing}, unknown {unknown}")
        out: dict[str, Any] = {}
        for p in self.params:
            value = given[p.name]
            if p.kind == "categorical":
                if str(value) not in {str(v) for v in p.values}:
                    raise ValueError(f"parameter {p.name!r}: {value!r} is not one of {list(p.values)}")
                out[p.name] = str(value)
            elif p.kind == "discrete":
                match = next((v for v in p.values if math.isclose(float(v), float(value), rel_tol=_FLOAT_TOL,
                                                                  abs_tol=_FLOAT_TOL)), None)
                if match is None:
                    raise ValueError(f"parameter {p.name!r}: {value!r} is not one of {list(p.values)}")
                out[p.name] = _plain_number(match)
            else:
                assert p.bounds is not None
                lo, hi = p.bounds
                v = float(value)
                span = (hi - lo) * _FLOAT_TOL
                if not lo - span <= v <= hi + span:
                    raise ValueError(f"parameter {p.name!r}: {v} is outside [{lo}, {hi}]")
                out[p.name] = min(max(v, lo), hi)
        return out

    def _vizier_trials(self) -> list[Any]:
        vz = _runtime().vz
        objective_names = [n for n, _ in self.objectives]
        out = []
        for trial_id, record in enumerate(self._trials, start=1):
            params = dict(record.params) if self.params else {CONSTANT_PARAM: "0"}
            trial = vz.Trial(parameters=params, id=trial_id)
            if record.feasible:
                assert record.metrics is not None
                trial.complete(vz.Measurement(metrics={n: record.metrics[n] for n in objective_names}))
            else:
                trial.complete(vz.Measurement(), infeasibility_reason=record.infeasible_reason)
            out.append(trial)
        return out

    # ------------------------------------------------------------ suggest

    def _designer(self, step: int) -> Any:
        rt = _runtime()
        rng_seed = derive_seed(self.seed, step)
        if self.algorithm in GP_ALGORITHMS:
            # Padding the trial axis to powers of two bounds the number of distinct compiled shapes;
            # GP-UCB-PE refuses trial padding for several metrics, so those run unpadded.
            single = len(self.objectives) == 1
            pad = rt.padding.PaddingSchedule(num_trials=rt.padding.PaddingType.POWERS_OF_2) if single \
                else rt.padding.PaddingSchedule()
            cls = rt.gp_ucb_pe.VizierGPUCBPEBandit if self.algorithm == "DEFAULT" else rt.gp_bandit.VizierGPBandit
            return cls(self.problem, rng=rt.jax.random.PRNGKey(rng_seed), padding_schedule=pad)
        if self.algorithm == "RANDOM_SEARCH":
            return rt.random.RandomDesigner(self.problem.search_space, seed=rng_seed)
        # Quasi-random: one scrambled Halton sequence per study, continued past the points already
        # tried, so every suggestion is still low-discrepancy with the earlier ones.
        return rt.quasi_random.QuasiRandomDesigner(self.problem.search_space, seed=derive_seed(self.seed, 0),
                                                   skip_points=_QUASI_RANDOM_SKIP + len(self._trials))

    def suggest(self, count: int, step: int) -> list[dict[str, Any]]:
        """``count`` raw parameter dicts from a fresh designer seeded by (seed, step) and fed all trials."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        rt = _runtime()
        if self.algorithm in GP_ALGORITHMS and self.clear_jax_caches:
            rt.jax.clear_caches()  # each fresh designer compiles anew; without this RSS grows per call
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            designer = self._designer(step)
            if self._trials:
                designer.update(rt.vza.CompletedTrials(self._vizier_trials()), rt.vza.ActiveTrials([]))
            suggestions = designer.suggest(count)
        return [self._raw(s.parameters) for s in suggestions]

    def _raw(self, parameters: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.params:
            value = parameters[p.name].value
            if p.kind == "categorical":
                out[p.name] = str(value)
            elif p.kind == "discrete":
                out[p.name] = _plain_number(value)
            else:
                out[p.name] = float(value)
        return out

    # ------------------------------------------------------------ decode

    def decode(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Knob values of a raw suggestion: each parameter decoded, plus the injected constants."""
        out = {p.name: p.decode(raw[p.name]) for p in self.params}
        out.update(self.constants)
        return out


def _plain_number(value: Any) -> int | float:
    """Integral discrete values as int (JSON- and Parquet-friendly), others as float."""
    number = float(value)
    return int(number) if number.is_integer() else number


__all__ = ["Study", "TrialRecord", "ALGORITHMS", "GP_ALGORITHMS", "CONSTANT_PARAM", "derive_seed"]
