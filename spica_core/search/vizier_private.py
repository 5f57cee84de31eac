"""Every private Vizier name Spica uses, in one module (tested with google-vizier 0.1.24, pinned in pyproject).

The designers are imported from their own modules: ``vizier.algorithms.designers`` imports every designer,
BOCS's cvxpy included, which Spica does not install. Vizier's designer API has no public way to reseed a warm designer before an ask (its ``_rng``), to score a
finite pool with the feature converter a designer built (``_converter``), to replace a GP bandit's continuous
acquisition search (``_optimize_acquisition``), or to build a padded array in numpy with a floor on the trial axis
(``vizier._src.jax.types.PaddedArray`` and its private fields), or to skip GP-UCB-PE's per-pick predictions
for debugging metadata (its score functions' ``aux``). They are used here and nowhere else; :func:`missing` lists those the
installed Vizier lacks, and a test runs it, so an upgrade that renames one fails loudly with the pinned
version instead of deep inside a sweep.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, Callable, ClassVar

PINNED = "google-vizier 0.1.24"
TRIAL_PAD_FLOOR = 64  # completed + pending trials are padded to this many at least: one shape for a branch's
#                       first 64 trials instead of one per power of two (a new shape costs 5-8 s of tracing in
#                       each of the next asks; bench/results/asks.log: 35 s for 14 asks at 64, 49 s at 32)

FEATURE_PAD_FLOOR = 16  # and the feature axis to the next power of two, at least this: spaces whose encodings
#                         differ by a few features share the GP's executables (a second such study compiled its
#                         own, over 20; none with the padding: tests/test_private_names.py). At 8 the one-hour
#                         case's agg (7 features) and disagg (10) branches still had a shape each: disagg's first
#                         ask took 5.4 s after agg's, 2.6 s at 16; steady asks unchanged (bench/results/asks.log)
POOL_PAD_FLOOR = 1024  # a scored pool's rows are padded to the next power of two, at least this: pools up to
#                        1024 candidates (and suggesters.MAX_POOL's 4096) score with at most three acquisition
#                        executables, not one per power of two (dense's disagg branch, 568 candidates, after agg's
#                        120: first ask 2.65 s unpadded, 1.42 s padded; bench/results/asks.log, --space dense)
_DESIGNERS: dict[bool, tuple[type, type, type]] = {}
_PADDING: dict[bool, type] | None = None
PLAIN_ENV = "SPICA_PLAIN_VIZIER"


def plain() -> bool:
    """``SPICA_PLAIN_VIZIER=1``: Vizier as it ships, none of the performance patches below (the padding floors
    and numpy padding, the numpy joins, the skipped pick predictions). The finite-pool designers stay: scoring
    the pool of legal candidates is what Spica's search is, not a speed-up. The picks are the same either way
    (tests/test_study.py); only the time and memory of an ask differ (docs/search.md)."""
    return os.environ.get(PLAIN_ENV, "").strip() == "1"


def designer_classes() -> tuple[type, type, type]:
    """Vizier's GP-UCB-PE, GP-bandit and quasi-random designers."""
    from vizier._src.algorithms.designers.gp_bandit import VizierGPBandit
    from vizier._src.algorithms.designers.gp_ucb_pe import VizierGPUCBPEBandit
    from vizier._src.algorithms.designers.quasi_random import QuasiRandomDesigner

    return VizierGPUCBPEBandit, VizierGPBandit, QuasiRandomDesigner


def reseed(designer: Any, key: Any) -> None:
    """Set a designer's random key before an ask (the same trials and step then give the same picks)."""
    designer._rng = key


def padded_trials(count: int) -> int:
    """How many trials an axis of ``count`` is padded to: the next power of two, at least TRIAL_PAD_FLOOR."""
    return _power_of_two_at_least(count, TRIAL_PAD_FLOOR)


def padded_features(count: int) -> int:
    """How many features an axis of ``count`` is padded to (padded features are masked out of the GP's kernel)."""
    return _power_of_two_at_least(count, FEATURE_PAD_FLOOR)


def padded_pool(count: int) -> int:
    """How many rows a scored pool of ``count`` candidates is padded to (padded rows' scores are dropped)."""
    return _power_of_two_at_least(count, POOL_PAD_FLOOR)


def pool_features(features: Any) -> Any:
    """A pool's features (a Vizier ``ModelInput`` of padded arrays) with the rows padded to :func:`padded_pool`
    (as they are under :func:`plain`)."""
    if plain():
        return features
    from vizier._src.jax import types as vizier_types

    def rows(array: Any) -> Any:
        values = unpadded(array)
        return padded_array(values, (padded_pool(values.shape[0]), array.shape[1]), array.fill_value)

    return vizier_types.ModelInput(continuous=rows(features.continuous), categorical=rows(features.categorical))


def padded_array(values: Any, shape: Sequence[int], fill: Any) -> Any:
    """``values`` padded with ``fill`` to ``shape`` as Vizier's ``PaddedArray`` (its mask marks the real entries),
    built in numpy."""
    import numpy as np
    from vizier._src.jax import types as vizier_types

    values = np.asarray(values)
    spec = [(0, new - old) for old, new in zip(values.shape, shape)]
    return vizier_types.PaddedArray(
        padded_array=np.pad(values, spec, constant_values=fill), fill_value=fill,
        _original_shape=np.asarray(values.shape),
        _mask=np.pad(np.ones(values.shape, dtype=bool), spec, constant_values=False),
        _nopadding_done=tuple(shape) == values.shape)


def _power_of_two_at_least(count: int, floor: int) -> int:
    return max(floor, 1 << max(0, count - 1).bit_length())


def numpy_padding(padding: Any, pad_trials: bool, trial_floor: Callable[[], int] = lambda: TRIAL_PAD_FLOOR) -> Any:
    """Vizier's padding schedule (``padding``: ``vizier.pyvizier.converters.padding``), built in numpy: the
    trial axis goes to the next power of two and at least TRIAL_PAD_FLOOR (``pad_trials=True``) or stays as it
    is (``False``; several metrics: GP-UCB-PE refuses trial padding there), and the feature axis of features
    (not of labels) to :func:`padded_features`. ``trial_floor()`` raises a padded trial axis further: the study
    returns the padded size of an ask's completed + pending + new trials, so the completed trials' arrays (the
    ARD fit) and the joined ones (the pending picks) share one shape and an ask traces one GP, not two. Vizier's
    own schedule pads with ``jnp.pad``, one dispatched jax op per array, about 0.8 s of every ask
    (measured when this was added). Built on first use so that importing this module never imports Vizier.
    Under :func:`plain`, Vizier's own default schedule (no padding)."""
    global _PADDING
    if plain():
        return padding.PaddingSchedule()
    if _PADDING is not None:
        return _PADDING[pad_trials](trial_floor=trial_floor)
    import attrs
    import numpy as np

    @attrs.define(frozen=True)
    class NumpyPadding(padding.PaddingSchedule):
        trial_floor: Callable[[], int] = attrs.field(kw_only=True)
        pads_trials: ClassVar[bool] = False

        def pad_features(self, features: Any) -> Any:
            return self._padded(features, pad_features=True)

        def pad_labels(self, labels: Any) -> Any:
            return self._padded(labels)

        def _padded(self, array: Any, pad_features: bool = False) -> Any:
            """Integer (categorical) arrays are filled with -1 and float ones with NaN, as Vizier fills them."""
            array = np.asarray(array)
            shape = list(array.shape)
            if self.pads_trials and len(shape) >= 2 and shape[-2] > 0:
                shape[-2] = max(self.trial_floor(), padded_trials(shape[-2]))
            if pad_features and len(shape) >= 2 and shape[-1] > 0:
                shape[-1] = padded_features(shape[-1])
            return padded_array(array, shape, -1 if np.issubdtype(array.dtype, np.integer) else np.nan)

    @attrs.define(frozen=True)
    class NumpyTrialPadding(NumpyPadding):
        pads_trials: ClassVar[bool] = True

    _PADDING = {False: NumpyPadding, True: NumpyTrialPadding}
    return _PADDING[pad_trials](trial_floor=trial_floor)


def unpadded(array: Any) -> Any:
    """A PaddedArray's values as a numpy array (``PaddedArray.unpad`` slices in jax: one compile per shape)."""
    import numpy as np

    return np.asarray(array.padded_array)[tuple(slice(0, int(n)) for n in np.asarray(array._original_shape))]


def _numpy_joins(eqx: Any) -> Any:
    """GP-UCB-PE's joins of completed and pending trials, in numpy.

    Vizier concatenates the completed trials' arrays with the pending ones' in jax, once per pick, and the
    pending count grows with each pick: every ask compiled a dozen small executables (``concatenate``, ``slice``,
    ``pad``) for shapes that never recur, about 20 MB of RSS per ask that only a cache clear (and a
    retrace of the GP) gave back. Here the same values are joined and padded in numpy and only the padded
    arrays, whose shapes are fixed, reach jax. ``trials_to_data`` and ``predictive_all_features`` replace
    ``_trials_to_data`` and ``_get_predictive_all_features`` of ``VizierGPUCBPEBandit`` (tested against Vizier's
    own in test_private_names.py). ``during_suggest`` covers the join left inline in its ``suggest`` (the trust
    region's trials, built even with the trust region off): for the length of an ask, ``PaddedArray.unpad``
    slices concrete arrays in numpy and the module's ``jnp.concatenate`` joins concrete arrays in numpy. Those
    four executables per ask (about 1 MB each, hardly freed by ``jax.clear_caches`` alone) were what grew a
    sweep's RSS; traced code (a tracer among the arrays) still goes to jax.
    """
    import contextlib

    import jax
    import jax.numpy as jnp
    import numpy as np
    from vizier._src.algorithms.designers import gp_ucb_pe
    from vizier._src.algorithms.designers.gp import output_warpers
    from vizier._src.jax import stochastic_process_model as sp
    from vizier._src.jax import types as vizier_types

    def trials_to_data(self: Any, trials: Sequence[Any]) -> Any:
        """Scaled features and warped labels (each metric warped by a fresh default warper, as Vizier does)."""
        data = self._converter.to_xy(trials)
        labels = unpadded(data.labels)
        self._output_warpers = [output_warpers.create_default_warper() for _ in range(labels.shape[1])]
        warped = [w.warp(labels[:, i:i + 1]) for i, w in enumerate(self._output_warpers)]
        return vizier_types.ModelData(features=data.features,
                                      labels=self._padding_schedule.pad_labels(np.concatenate(warped, axis=-1)))

    def predictive_all_features(self: Any, pending: Any, data: Any, model: Any, noise_is_high: bool) -> Any:
        """The GP conditioned on the completed and the pending trials (zero labels: only its variance is used)."""
        pad = self._padding_schedule
        features = vizier_types.ModelInput(
            continuous=pad.pad_features(np.concatenate([unpadded(data.features.continuous),
                                                        unpadded(pending.continuous)])),
            categorical=pad.pad_features(np.concatenate([unpadded(data.features.categorical),
                                                         unpadded(pending.categorical)])))
        labels = unpadded(data.labels)
        dummy = np.zeros((unpadded(pending.continuous).shape[0], labels.shape[-1]), dtype=labels.dtype)
        all_data = vizier_types.ModelData(features=features, labels=pad.pad_labels(np.concatenate([labels, dummy])))
        if noise_is_high:  # pure exploration then assumes noiseless observations
            params = {**model.params, "observation_noise_variance": np.array([1e-10])}
            model = sp.StochasticProcessWithCoroutine(model.coroutine, params)
        return sp.UniformEnsemblePredictive(predictives=eqx.filter_jit(model.precompute_predictive)(all_data))

    def concrete(*arrays: Any) -> bool:
        return not any(isinstance(a, jax.core.Tracer) for a in arrays)

    vizier_unpad = vizier_types.PaddedArray.__dict__["unpad"]

    def unpad(self: Any) -> Any:
        if self._nopadding_done or not concrete(self.padded_array):
            return vizier_unpad.__get__(self, type(self))()  # equinox's method wrapper wants the owner
        return jnp.asarray(unpadded(self))

    class NumpyConcatenate:
        """``jax.numpy`` as GP-UCB-PE's module sees it during an ask, with concrete joins made in numpy."""

        def __getattr__(self, name: str) -> Any:
            return getattr(jnp, name)

        @staticmethod
        def concatenate(arrays: Sequence[Any], axis: int = 0, **kwargs: Any) -> Any:
            arrays = list(arrays)
            if kwargs or not concrete(*arrays) or len({np.result_type(a) for a in arrays}) > 1:
                return jnp.concatenate(arrays, axis=axis, **kwargs)  # jax's own type promotion
            return jnp.asarray(np.concatenate([np.asarray(a) for a in arrays], axis=axis))

    @contextlib.contextmanager
    def during_suggest() -> Any:
        gp_ucb_pe.jnp = NumpyConcatenate()
        setattr(vizier_types.PaddedArray, "unpad", unpad)
        try:
            yield
        finally:
            gp_ucb_pe.jnp = jnp
            setattr(vizier_types.PaddedArray, "unpad", vizier_unpad)

    return SimpleNamespace(trials_to_data=trials_to_data, predictive_all_features=predictive_all_features,
                           during_suggest=during_suggest)


def _score_functions() -> tuple[type, type]:
    """GP-UCB-PE's UCB and pure-exploration score functions (equinox modules)."""
    from vizier._src.algorithms.designers.gp_ucb_pe import PEScoreFunction, UCBScoreFunction

    return UCBScoreFunction, PEScoreFunction


def _no_predictions(xs: Any, seed: Any = None) -> dict[str, Any]:
    """NaN where a score function's ``aux`` gives the GP's mean and deviations, one per row of ``xs``."""
    import jax.numpy as jnp

    nan = jnp.full(xs.continuous.padded_array.shape[:-1], jnp.nan)
    return {"mean": nan, "stddev": nan, "stddev_from_all": nan}


def without_pick_predictions() -> Any:
    """For the length of an ask, GP-UCB-PE's score functions predict nothing at a pick.

    After each pick Vizier calls the score function's ``aux`` (the GP's mean and deviations there) only to write
    them into the suggestion's debugging metadata, which Spica never reads. Each ``aux`` is a jax trace of its own
    (the GP's predictive distribution through tensorflow-probability's shape inference), once per process: a
    process's first ask took 12.1-12.7 s with them and 9.3-9.6 s without, steady asks unchanged
    (measured when this was added). Here ``aux`` is one plain function, the same object on every
    pick, so its trivial trace is cached at once; the metadata reads NaN."""
    import contextlib

    @contextlib.contextmanager
    def swapped() -> Any:
        kept = {cls: cls.__dict__["aux"] for cls in _score_functions()}
        for cls in kept:
            setattr(cls, "aux", staticmethod(_no_predictions))
        try:
            yield
        finally:
            for cls, aux in kept.items():
                setattr(cls, "aux", aux)

    return swapped()


def finite_designers(jax: Any, gradient_free_optimizer: type) -> tuple[type, type, type]:
    """GP-UCB-PE and GP-bandit designers whose acquisition step scores the current pool, and GP-UCB-PE's
    acquisition optimizer (``FiniteSetOptimizer``). A designer finds the ask's choice (its pool and free
    candidates) on its ``spica_slot``; GP-UCB-PE asks the optimizer for one point at a time, with the pool's
    features converted once; the GP bandit's acquisition step is its ``_optimize_acquisition`` hook."""
    is_plain = plain()
    if is_plain in _DESIGNERS:
        return _DESIGNERS[is_plain]
    import equinox as eqx

    VizierGPUCBPEBandit, VizierGPBandit, _ = designer_classes()

    # One jitted entry point for every acquisition call: the score function (an equinox module) is an
    # argument, so a new one of the same structure reuses the compiled code instead of adding its own.
    apply = eqx.filter_jit(lambda fn, *args: fn(*args))

    class FiniteUCBPE(VizierGPUCBPEBandit):
        spica_slot: Any

        def get_score_fn_on_trials(self, score_fn: Any) -> Callable[[Sequence[Any]], dict[str, Any]]:
            pool = self.spica_slot.choice.pool

            def acquisition(trials: Sequence[Any]) -> dict[str, Any]:
                features = pool.for_converter(self._converter) if trials is pool.trials \
                    else self._converter.to_features(trials)
                return {"acquisition": apply(score_fn, features)}

            return acquisition

    if not is_plain:
        numpy_joins = _numpy_joins(eqx)

        class PatchedUCBPE(FiniteUCBPE):
            """Also joins and pads arrays in numpy where Vizier dispatches jax ops on them (``numpy_joins``), and
            skips the per-pick predictions (``without_pick_predictions``)."""

            _trials_to_data = numpy_joins.trials_to_data
            _get_predictive_all_features = numpy_joins.predictive_all_features

            def suggest(self, count: int | None = None) -> Any:
                with numpy_joins.during_suggest(), without_pick_predictions():
                    return super().suggest(count)

        FiniteUCBPE = PatchedUCBPE  # type: ignore[misc]

    class FiniteGPBandit(VizierGPBandit):
        spica_slot: Any

        def _optimize_acquisition(self, scoring_fn: Any, count: int) -> list[Any]:
            choice = self.spica_slot.choice
            assert choice is not None
            seed, self._rng = jax.random.split(self._rng)
            scores = apply(scoring_fn.score, choice.pool.for_converter(self._converter), seed)
            return [choice.trial(p, s) for p, s in choice.best(scores, count)]

    class FiniteSetOptimizer(gradient_free_optimizer):  # type: ignore[misc, valid-type]
        """The best free candidates of the current pool (GP-UCB-PE's acquisition optimizer)."""

        def __init__(self, slot: Any):
            self.slot = slot

        def optimize(self, score_fn: Any, problem: Any, *, count: int = 1, budget_factor: float = 1.0,
                     seed_candidates: Sequence[Any] = ()) -> list[Any]:
            choice = self.slot.choice
            assert choice is not None
            scores = score_fn(choice.pool.trials)["acquisition"]
            return [choice.trial(p, s) for p, s in choice.best(scores, count)]

    _DESIGNERS[is_plain] = (FiniteUCBPE, FiniteGPBandit, FiniteSetOptimizer)
    return _DESIGNERS[is_plain]


def missing() -> list[str]:
    """The private names above that the installed Vizier lacks, each naming the version Spica is tested with.

    Builds one GP-UCB-PE and one GP-bandit designer on a one-parameter problem (no ask, no compile)."""
    from vizier import pyvizier as vz

    try:
        VizierGPUCBPEBandit, VizierGPBandit, _ = designer_classes()
    except (ImportError, AttributeError) as exc:
        return [f"the designer modules are gone from the installed Vizier ({exc}; Spica is tested with {PINNED})"]

    problem = vz.ProblemStatement()
    problem.search_space.root.add_float_param("x", 0.0, 1.0)
    problem.metric_information.append(vz.MetricInformation("y", goal=vz.ObjectiveMetricGoal.MAXIMIZE))
    out = []
    for cls in (VizierGPUCBPEBandit, VizierGPBandit):
        designer = cls(problem)
        out += [f"{cls.__name__}.{name}" for name in ("_rng", "_converter") if not hasattr(designer, name)]
    if not callable(getattr(VizierGPBandit, "_optimize_acquisition", None)):
        out.append("VizierGPBandit._optimize_acquisition")
    try:
        from vizier._src.jax import types as vizier_types

        fields = getattr(vizier_types.PaddedArray, "__dataclass_fields__", {})
        out += [f"vizier._src.jax.types.PaddedArray.{name}" for name in
                ("padded_array", "fill_value", "_original_shape", "_mask", "_nopadding_done") if name not in fields]
        if "unpad" not in vizier_types.PaddedArray.__dict__:  # swapped during an ask
            out.append("vizier._src.jax.types.PaddedArray.unpad")
    except ImportError:
        out.append("vizier._src.jax.types")
    out += [f"vizier._src.algorithms.designers.gp_ucb_pe.{cls.__name__}.aux" for cls in _score_functions()
            if "aux" not in cls.__dict__]  # swapped during an ask
    from vizier._src.algorithms.designers import gp_ucb_pe

    if getattr(gp_ucb_pe, "jnp", None) is None:  # the module's jax.numpy, swapped during an ask
        out.append("vizier._src.algorithms.designers.gp_ucb_pe.jnp")
    return [f"{name} is gone from the installed Vizier (Spica is tested with {PINNED})" for name in out]


__all__ = ["PINNED", "PLAIN_ENV", "POOL_PAD_FLOOR", "TRIAL_PAD_FLOOR", "designer_classes", "finite_designers", "missing", "plain",
           "padded_array", "padded_pool", "padded_trials", "pool_features", "reseed", "numpy_padding",
           "without_pick_predictions"]
