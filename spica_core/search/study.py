"""A seeded Vizier study over one branch's finite candidate pool (designer API: no service, no database).

The trials table is the source of truth: a :class:`Study` holds its completed trials as plain
:class:`TrialRecord` values, and :meth:`Study.suggest` picks positions in a pool of legal
candidates the caller has not evaluated, so no suggestion is a repeat. A GP study keeps one
designer alive and feeds it only the trials it has not seen; its random key is reset from
``(seed, step)`` before every suggest, so the same seed, trials, pool and step give the same
picks whether the designer is warm or rebuilt after a resume.

Runtime notes: Vizier's GP designers need ``jax_enable_x64``; padding the
trial axis to powers of two (at least ``TRIAL_PAD_FLOOR``) bounds JIT compiles. jax keeps every executable it
compiled. GP-UCB-PE's joins of completed and pending trials are done in numpy (``vizier_private``), so a steady
ask compiles nothing new but a few small steps of jaxopt's L-BFGS-B result, one set per count of its stored
corrections (at most 10). jax's caches are cleared only when a study's padded trial count grows (the smaller
shapes are dead: it retraces anyway), and the freed heap is handed back to the system. GP designers reject a
0-dimensional space, hence the dummy ``_spica_constant`` categorical.

jax's and Vizier's set-up is ``jax_setup.py``, the pool and an ask's picks from it ``study_pool.py``, tracing
GP-UCB-PE ahead of the first ask ``gp_warm_up.py``.
"""
from __future__ import annotations

import datetime
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Final, Iterable, Literal, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from spica_core.search.jax_setup import MODEL_ASK, _release_compiled, _runtime
from spica_core.search.study_pool import _Choice, _Pool
from spica_core.search.vizier_private import (
    TRIAL_PAD_FLOOR, finite_designers, numpy_padding, padded_trials, reseed, unpadded,
)
from spica_core.space.params import Param

ALGORITHMS: Final = ("DEFAULT", "GAUSSIAN_PROCESS_BANDIT", "RANDOM_SEARCH", "QUASI_RANDOM_SEARCH")
GP_ALGORITHMS: Final = frozenset({"DEFAULT", "GAUSSIAN_PROCESS_BANDIT"})
CONSTANT_PARAM: Final = "_spica_constant"
# Random restarts of the GP's ARD fit (Vizier's default is 4, plus its fixed start). Each restart is a scipy
# L-BFGS-B run of a few hundred jitted steps, most of an ask's time (a steady ask 1.51 s at
# 4, 1.15 s at 1, measured when this was set). At 1, DEFAULT's median best at 64 evaluations is the optimum on both benchmark spaces
# (measured when this was set: dense 0.939-1.000, MoE 1.000 on all 5 seeds), and
# on tests/test_study.py's toy space its next picks score higher on 3 seeds of 6 and the same on the others
# (at 4 it stays on the backend it knows; at 1 it also tries the other one at the best size).
ARD_RESTARTS = 1
# GP-UCB-PE's ARD fit gets at most this many L-BFGS-B iterations per completed trial, up to Vizier's own cap of
# 500. A few trials hold little to fit, yet at the default a first ask with 4 trials spent 772 loss evaluations
# (~2.3 s) on them. At 25, DEFAULT's best at 32 and 64 evaluations is as before on both benchmark spaces
# (bench/results/search_quality_ard_per_trial25_2026-12-04.log). The cap depends only on the trial count, so a
# resumed study fits exactly as the uninterrupted one did.
ARD_ITERATIONS_PER_TRIAL: Final = 25
ARD_MAX_ITERATIONS: Final = 500  # vizier's gp_ucb_pe.default_ard_optimizer
_QUASI_RANDOM_SKIP: Final = 1000  # Vizier's default burn-in of the Halton sequence
_FLOAT_TOL: Final = 1e-9
# Vizier's GP-UCB-PE picks by UCB when a trial completed after the newest pending one was created, and by
# pure exploration (PE) otherwise. Trials get fixed clocks (completion n at EPOCH + n s; pending ones created
# before EPOCH for an ask that exploits first, long after it for one that only explores), so which picks are
# UCB is the caller's choice, however fast the machine is.
_EPOCH: Final = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
_EXPLORE_ONLY_CREATED: Final = _EPOCH + datetime.timedelta(days=3650)

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

def ard_iterations(trials: int) -> int:
    """The L-BFGS-B iteration cap of GP-UCB-PE's ARD fit on this many completed trials."""
    return max(1, min(ARD_MAX_ITERATIONS, ARD_ITERATIONS_PER_TRIAL * trials))


def derive_seed(seed: int, step: int) -> int:
    """A 32-bit seed from (study seed, step), stable across processes and Python versions."""
    if seed < 0 or step < 0:
        raise ValueError(f"seed and step must be >= 0 (got seed={seed}, step={step})")
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, dtype=np.uint32)[0])


# ---------------------------------------------------------------- the study


class Study:
    """One branch's optimisation: parameters, objectives, algorithm, seed and completed trials."""

    def __init__(self, params: Sequence[Param], objectives: Sequence[tuple[str, Goal]] = (("objective", "max"),),
                 algorithm: str = "DEFAULT", seed: int = 0, *,
                 trials: Iterable[TrialRecord] = (), prior: Iterable[TrialRecord] = ()) -> None:
        self.params: tuple[Param, ...] = tuple(params)
        self.objectives: tuple[tuple[str, Goal], ...] = tuple((str(n), g) for n, g in objectives)
        self.algorithm = str(getattr(algorithm, "value", algorithm))
        self.seed = int(seed)
        self._by_name = {p.name: p for p in self.params}
        self._check_declaration()
        self._problem: Any = None
        self._trials: list[TrialRecord] = []
        self._designer: Any = None          # the warm GP designer and how many trials it was fed
        self._fed = 0
        self._slot = _Slot()
        self._pool: _Pool | None = None
        self._unpadded_converter: Any = None
        self.waited = 0.0  # seconds the last suggest waited for MODEL_ASK (not what the ask cost)
        self._ard_cap: int | None = None  # trace_gp's: its fit only needs to run, not to converge
        for record in trials:
            self.complete(record.params, record.metrics, record.infeasible_reason, record.metadata)
        # A related earlier study (another trace): a GP bandit's prior, never one of this study's trials.
        self.prior: tuple[TrialRecord, ...] = tuple(
            self._record(r.params, r.metrics, r.infeasible_reason, r.metadata) for r in prior)

    # ------------------------------------------------------------ declaration

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
        record = self._record(params, metrics, infeasible_reason, metadata)
        self._trials.append(record)
        return record

    def _record(self, params: dict[str, Any], metrics: dict[str, float] | None,
                infeasible_reason: str | None, metadata: dict[str, Any] | None) -> TrialRecord:
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

    def sync(self, records: Sequence[TrialRecord]) -> None:
        """Make the study's trials exactly ``records``: when the known ones are a prefix, only the new
        ones are appended (the designer stays warm); anything else rebuilds the study from scratch."""
        checked = [self._record(r.params, r.metrics, r.infeasible_reason, r.metadata) for r in records]
        if checked[:len(self._trials)] != self._trials:
            self._trials, self._designer, self._fed = [], None, 0
        self._trials.extend(checked[len(self._trials):])

    def _vizier_params(self, raw: dict[str, Any]) -> dict[str, Any]:
        return dict(raw) if self.params else {CONSTANT_PARAM: "0"}

    def _vizier_trials(self, start: int = 0, records: Sequence[TrialRecord] | None = None) -> list[Any]:
        """Vizier's completed trials for ``records`` (default: this study's own, from ``start`` on)."""
        vz = _runtime().vz
        objective_names = [n for n, _ in self.objectives]
        out = []
        for trial_id, record in enumerate((self._trials if records is None else records)[start:], start=start + 1):
            trial = vz.Trial(parameters=self._vizier_params(record.params), id=trial_id)
            if record.feasible:
                assert record.metrics is not None
                trial.complete(vz.Measurement(metrics={n: record.metrics[n] for n in objective_names}))
            else:
                trial.complete(vz.Measurement(), infeasibility_reason=record.infeasible_reason)
            trial.completion_time = _EPOCH + datetime.timedelta(seconds=trial_id)
            out.append(trial)
        return out

    def _pending_trials(self, pending: Sequence[dict[str, Any]], exploit: bool) -> list[Any]:
        """Vizier's active trials for candidates being evaluated now: created before every completion when
        the ask's first pick exploits (UCB), after them when it explores (PE)."""
        vz = _runtime().vz
        created = _EPOCH - datetime.timedelta(days=1) if exploit else _EXPLORE_ONLY_CREATED
        return [vz.Trial(parameters=self._vizier_params(self._checked_params(raw)), creation_time=created)
                for raw in pending]

    # ------------------------------------------------------------ suggest

    def suggest(self, count: int, step: int, pool: Sequence[dict[str, Any]],
                allowed: Sequence[bool] | None = None, *, model: bool = True,
                pending: Sequence[dict[str, Any]] = (), exploit: bool = True) -> list[int]:
        """Positions in ``pool`` (raw parameter dicts) of up to ``count`` distinct allowed candidates.

        GP algorithms score their acquisition on the pool with the designer kept warm; random
        search draws uniformly from the allowed candidates; quasi-random (and a GP study's first
        batch, or ``model=False``) takes the allowed candidate nearest to each Halton point. The
        random key comes from ``(seed, step)``, so the same trials, pool and step give the same picks.
        ``pending`` are the raw parameters of candidates being evaluated (the caller keeps them out of
        ``allowed``): GP-UCB-PE's exploration picks condition on them, and the Halton sequence moves past them.
        ``exploit``: GP-UCB-PE's first pick is UCB (else, with candidates pending, every pick explores).
        A model ask takes :data:`MODEL_ASK` first; :attr:`waited` is how long it waited for it.
        """
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self.waited = 0.0
        free = np.ones(len(pool), dtype=bool) if allowed is None else np.array(allowed, dtype=bool)
        if free.shape != (len(pool),):
            raise ValueError(f"allowed has {free.size} entries for a pool of {len(pool)}")
        if int(free.sum()) <= count:
            return [int(i) for i in np.flatnonzero(free)]
        choice = _Choice(self._pool_cache(pool), free)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.algorithm == "RANDOM_SEARCH":
                rng = np.random.default_rng(derive_seed(self.seed, step))
                choice.take(rng.permutation(np.flatnonzero(free))[:count])
            elif self.algorithm in GP_ALGORITHMS and self._trials and model:
                asked = time.perf_counter()
                with MODEL_ASK:  # the tracing's, or another study's model ask (a space-filling ask never waits)
                    self.waited = time.perf_counter() - asked
                    self._model_suggest(choice, count, step, pending, exploit)
            if len(choice.taken) < count:  # quasi-random, a GP study's first batch, or a short answer
                first_gp_batch = self.algorithm in GP_ALGORITHMS and not self._trials and not pending
                self._space_filling(choice, count - len(choice.taken), centre=first_gp_batch, pending=len(pending))
        return list(choice.taken)

    def _pool_cache(self, pool: Sequence[dict[str, Any]]) -> _Pool:
        """The pool's Vizier trials and features, reused while the caller passes the same pool object."""
        if self._pool is None or self._pool.raws is not pool:
            vz = _runtime().vz
            trials = [vz.Trial(parameters=self._vizier_params(raw)) for raw in pool]
            self._pool = _Pool(pool, trials, self._converter().to_features(trials))
        return self._pool

    def _converter(self) -> Any:
        if self._unpadded_converter is None:  # its arrays are read unpadded (numpy padding: no jax op per shape)
            rt = _runtime()
            self._unpadded_converter = rt.converters.TrialToModelInputConverter.from_problem(
                self.problem, scale=True, max_discrete_indices=0, flip_sign_for_minimization_metrics=True,
                padding_schedule=numpy_padding(rt.padding, pad_trials=False))
        return self._unpadded_converter

    def _model_suggest(self, choice: _Choice, count: int, step: int, pending: Sequence[dict[str, Any]],
                       exploit: bool) -> None:
        """The warm GP designer, fed only the trials it has not seen, scores its acquisition on the pool."""
        rt = _runtime()
        if self._designer is None:
            self._designer, self._fed = self._new_designer(), 0
        self._designer.update(rt.vza.CompletedTrials(self._vizier_trials(self._fed)),
                              rt.vza.ActiveTrials(self._pending_trials(pending, exploit)))
        self._fed = len(self._trials)
        bucket = padded_trials(len(self._trials) + len(pending) + count)  # the largest shape this ask pads to
        if bucket > self._slot.trial_floor:  # bound memory (see the module's notes)
            _release_compiled(rt.jax)
        self._slot.trial_floor = bucket  # one trial shape for every array of this ask
        reseed(self._designer, rt.jax.random.PRNGKey(derive_seed(self.seed, step)))  # step-keyed: resume == live
        self._slot.choice = choice
        # a function of the trials (resume == live), or the tracing's cap
        self._slot.ard_iterations = self._ard_cap or ard_iterations(len(self._trials))
        try:
            # One BLAS thread: the GP's small Cholesky solves gain nothing from more, and beside busy replay
            # workers OpenBLAS's waiting threads spun: an ask took 4-13 s of CPU instead of 1 s.
            with threadpool_limits(limits=1):
                self._designer.suggest(count)
        finally:
            self._slot.choice = None

    def _new_designer(self) -> Any:
        rt = _runtime()
        ucb_pe, bandit, optimizer = finite_designers(rt.jax, rt.vza.GradientFreeOptimizer)
        # Padding the trial axis to powers of two, and at least TRIAL_PAD_FLOOR, bounds the compiled shapes
        # to two or three per sweep; GP-UCB-PE refuses trial padding for several metrics, so those run unpadded.
        single = len(self.objectives) == 1
        slot = self._slot
        pad = numpy_padding(rt.padding, pad_trials=single, trial_floor=lambda: slot.trial_floor)
        # No trust region: it keeps a continuous acquisition search near the trials so far; on a finite
        # pool of legal candidates it only hides good configs far from the first picks
        # (bench/bench_search.py: on the dense space it held GP-UCB-PE at 0.81-0.94 of the optimum).
        if self.algorithm == "DEFAULT":
            designer = ucb_pe(self.problem, rng=rt.jax.random.PRNGKey(0), padding_schedule=pad,
                              use_trust_region=False, ard_random_restarts=ARD_RESTARTS,
                              ard_optimizer=_ArdFit(slot, rt.optimizers),
                              acquisition_optimizer_factory=lambda _converter: optimizer(slot))
        else:
            designer = bandit(self.problem, rng=rt.jax.random.PRNGKey(0), padding_schedule=pad,
                              use_trust_region=False, ard_random_restarts=ARD_RESTARTS)
            if self.prior and single:  # Vizier's transfer learning (GP-UCB-PE has none): a stacked prior GP
                designer.set_priors([rt.vza.CompletedTrials(self._vizier_trials(records=self.prior))])
        designer.spica_slot = slot
        return designer

    def _space_filling(self, choice: _Choice, count: int, centre: bool, pending: int = 0) -> None:
        """The free candidate nearest to the centre (a GP study's first pick, as Vizier seeds), then to
        each next point of the study's Halton sequence (past the points of the trials and pending ones)."""
        rt = _runtime()
        width_c, width_k = choice.pool.continuous.shape[1], choice.pool.categorical.shape[1]
        targets = [(np.full(width_c, 0.5), np.zeros(width_k, dtype=int))] if centre else []
        halton = rt.QuasiRandomDesigner(self.problem.search_space, seed=derive_seed(self.seed, 0),
                                                     skip_points=_QUASI_RANDOM_SKIP + len(self._trials) + pending)
        if count > len(targets):
            points = [rt.vz.Trial(parameters=s.parameters) for s in halton.suggest(count - len(targets))]
            features = self._converter().to_features(points)
            targets += zip(unpadded(features.continuous), unpadded(features.categorical))
        for continuous, categorical in targets[:count]:
            nearest = choice.nearest(continuous, categorical)
            if nearest is None:
                return
            choice.take([nearest])


# ---------------------------------------------------------------- what a designer reads during an ask


class _Slot:
    """Where a designer finds the current ask's choice (set for the duration of one suggest), its ARD
    fit's iteration cap and the padded trial count of all its arrays (that of the last model ask)."""

    choice: _Choice | None = None
    ard_iterations: int = ARD_MAX_ITERATIONS
    trial_floor: int = TRIAL_PAD_FLOOR


class _ArdFit:
    """GP-UCB-PE's ARD optimizer (Vizier's default L-BFGS-B: 20 line-search steps, tolerance 1e-5) with the
    iteration cap of the current ask (``ard_iterations``) instead of a fixed 500."""

    def __init__(self, slot: _Slot, optimizers: Any) -> None:
        self._slot, self._optimizers = slot, optimizers

    def __call__(self, init_params: Any, loss_fn: Any, rng: Any, *, constraints: Any = None,
                 best_n: int | None = None) -> Any:
        options = self._optimizers.LbfgsBOptions(num_line_search_steps=20, tol=1e-5,
                                                 maxiter=self._slot.ard_iterations)
        return self._optimizers.JaxoptScipyLbfgsB(options)(init_params, loss_fn, rng, constraints=constraints,
                                                           best_n=best_n)


def _plain_number(value: Any) -> int | float:
    """Integral discrete values as int (JSON- and Parquet-friendly), others as float."""
    number = float(value)
    return int(number) if number.is_integer() else number


__all__ = ["Study", "TrialRecord", "ALGORITHMS", "GP_ALGORITHMS", "CONSTANT_PARAM", "derive_seed", "ard_iterations"]
