"""Private names of other libraries live in one adapter module per library; each adapter says, loudly and
with the pinned version, when the installed library no longer has one of them."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

import spica_cli
import spica_core

ADAPTERS = {"vizier": "spica_core/search/vizier_private.py", "ray": "spica_core/evaluate/ray_private.py"}
# What a sweep once copied from Prefect's temporary server and Python's shutdown to run its own server: its
# command, environment, settings context and exit hook. The supervisor (spica_cli/supervisor.py) needs none.
COPIED_INTERNALS = ("PREFECT__", "SubprocessASGIServer", "uvicorn", "GLOBAL_SETTINGS_CONTEXT", "_register_atexit",
                    "range(8000")
ROOT = Path(spica_core.__file__).parents[1]


def test_the_installed_vizier_has_every_private_name_spica_uses() -> None:
    from spica_core.search import vizier_private

    assert vizier_private.missing() == []


def test_a_renamed_vizier_name_is_reported_with_the_pinned_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from spica_core.search import vizier_private

    VizierGPBandit = vizier_private.designer_classes()[1]

    monkeypatch.delattr(VizierGPBandit, "_optimize_acquisition")
    assert vizier_private.missing() == [
        "VizierGPBandit._optimize_acquisition is gone from the installed Vizier (Spica is tested with "
        "google-vizier 0.1.24)"]


def test_the_names_an_ask_swaps_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """GP-UCB-PE's ``suggest`` runs with ``gp_ucb_pe.jnp`` and ``PaddedArray.unpad`` swapped for numpy joins."""
    from vizier._src.algorithms.designers import gp_ucb_pe
    from vizier._src.jax import types as vizier_types

    from spica_core.search import vizier_private

    monkeypatch.delattr(gp_ucb_pe, "jnp")
    monkeypatch.delattr(vizier_types.PaddedArray, "unpad")
    monkeypatch.delattr(gp_ucb_pe.PEScoreFunction, "aux")
    assert vizier_private.missing() == [
        f"vizier._src.{name} is gone from the installed Vizier (Spica is tested with google-vizier 0.1.24)"
        for name in ("jax.types.PaddedArray.unpad", "algorithms.designers.gp_ucb_pe.PEScoreFunction.aux",
                     "algorithms.designers.gp_ucb_pe.jnp")]


def test_an_ask_predicts_nothing_at_its_picks_and_picks_what_vizier_s_predictions_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GP-UCB-PE's score functions' ``aux`` (the GP's mean and deviations at a pick, traced once per process) only
    feeds the suggestions' debugging metadata: Spica's asks never call it, pick exactly what an ask with it
    picks, and leave it in place afterwards."""
    import contextlib

    from vizier._src.algorithms.designers import gp_ucb_pe

    from spica_core.search import vizier_private
    from spica_core.search.study import Study
    from spica_core.space.params import Param

    params = [Param("size", "discrete", (1, 2, 4, 8), log_scale=True, is_int=True, default=4),
              Param("ratio", "float", bounds=(0.25, 1.0), default=1.0)]
    pool = [{"size": s, "ratio": r} for s in (1, 2, 4, 8) for r in (0.25, 0.4, 0.55, 0.7, 0.85, 1.0)]
    calls: list[str] = []
    for cls in (gp_ucb_pe.UCBScoreFunction, gp_ucb_pe.PEScoreFunction):
        vizier_aux = cls.__dict__["aux"]

        def counted(self: Any, xs: Any, seed: Any = None, _aux: Any = vizier_aux, _name: str = cls.__name__) -> Any:
            calls.append(_name)
            return _aux.__get__(self, type(self))(xs, seed=seed)

        monkeypatch.setattr(cls, "aux", counted)
    counting = {cls: cls.__dict__["aux"] for cls in (gp_ucb_pe.UCBScoreFunction, gp_ucb_pe.PEScoreFunction)}

    def picks() -> list[int]:
        study = Study(params, seed=3)
        for k, raw in enumerate(pool[::5]):
            study.complete(raw, {"objective": float(k % 3) + raw["ratio"]})
        tried = [t.params for t in study.trials]
        pending = [p for p in pool if p not in tried][:2]
        return study.suggest(3, step=1, pool=pool, pending=pending,
                             allowed=[p not in tried and p not in pending for p in pool], exploit=True)

    spica = picks()
    assert calls == []
    assert all(cls.__dict__["aux"] is aux for cls, aux in counting.items())
    monkeypatch.setattr(vizier_private, "without_pick_predictions", contextlib.nullcontext)
    assert picks() == spica
    assert set(calls) == {"UCBScoreFunction", "PEScoreFunction"}


@pytest.mark.parametrize("trials, padded_to", [(5, 64), (64, 64), (65, 128), (100, 128)])
def test_numpy_padding_builds_the_padded_array_vizier_builds(trials: int, padded_to: int) -> None:
    """The numpy schedule (no jax op per array) gives Vizier's own ``PaddedArray.from_array`` result, with the
    trial axis at the next power of two, at least TRIAL_PAD_FLOOR, and the feature axis at the next power of two,
    at least FEATURE_PAD_FLOOR; without trial padding, the trial axis as is; labels keep their one column."""
    import numpy as np
    from vizier._src.jax import types as vizier_types
    from vizier.pyvizier.converters import padding

    from spica_core.search.jax_setup import _runtime
    from spica_core.search.vizier_private import FEATURE_PAD_FLOOR, TRIAL_PAD_FLOOR, numpy_padding

    _runtime()  # x64, as in a sweep
    assert (TRIAL_PAD_FLOOR, FEATURE_PAD_FLOOR) == (64, 16)
    features = np.random.default_rng(trials).random((trials, 3))
    categorical = np.arange(trials * 2).reshape(trials, 2)
    for array, fill in ((features, np.nan), (categorical, -1)):
        ours = numpy_padding(padding, pad_trials=True).pad_features(array)
        theirs = vizier_types.PaddedArray.from_array(array, (padded_to, 16), fill_value=fill)
        assert ours.shape == theirs.shape == (padded_to, 16)
        np.testing.assert_array_equal(np.asarray(ours.padded_array), np.asarray(theirs.padded_array))
        np.testing.assert_array_equal(np.asarray(ours.unpad()), array)
        assert [m.tolist() for m in ours.is_missing] == [m.tolist() for m in theirs.is_missing]
        assert not ours._nopadding_done and not theirs._nopadding_done
    wide = numpy_padding(padding, pad_trials=False).pad_features(np.ones((trials, 9)))
    assert wide.shape == (trials, 16)
    flat = numpy_padding(padding, pad_trials=False).pad_labels(features[:, :1])
    assert flat.shape == (trials, 1) and flat._nopadding_done
    # An ask's floor (its completed + pending + new trials, padded) raises the trial axis of every array it pads.
    floor = {"trials": 4 * padded_to}
    raised = numpy_padding(padding, pad_trials=True, trial_floor=lambda: floor["trials"])
    assert raised.pad_features(features).shape == (4 * padded_to, 16)
    assert raised.pad_labels(features[:, :1]).shape == (4 * padded_to, 1)
    floor["trials"] = 1
    assert raised.pad_labels(features[:, :1]).shape == (padded_to, 1)
    assert numpy_padding(padding, pad_trials=False, trial_floor=lambda: 4 * padded_to).pad_labels(
        features[:, :1]).shape == (trials, 1)


def _private_imports(path: Path, library: str) -> list[str]:
    """`library._x` / `library.x._y` modules a file imports, and `from library... import _y` names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == library:
            parts = node.module.split(".")
            found += [node.module] if any(p.startswith("_") for p in parts) else []
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split(".")[0] == library and any(p.startswith("_") for p in a.name.split("."))]
    return found


@pytest.mark.parametrize("library", sorted(ADAPTERS))
def test_only_the_adapter_imports_a_librarys_private_modules(library: str) -> None:
    users = sorted(str(p.relative_to(ROOT)) for p in _project_files() if _private_imports(p, library))
    assert users in ([], [ADAPTERS[library]])


def test_the_installed_ray_has_the_flag_spica_sets() -> None:
    pytest.importorskip("ray")
    from spica_core.evaluate import ray_private

    assert ray_private.missing() == []
    from ray._private import auto_init_hook

    before = auto_init_hook.enable_auto_connect
    try:
        ray_private.no_auto_init()
        assert auto_init_hook.enable_auto_connect is False
    finally:
        auto_init_hook.enable_auto_connect = before


def test_a_renamed_ray_flag_is_reported_with_the_pinned_version(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    from ray._private import auto_init_hook

    from spica_core.evaluate import ray_private

    monkeypatch.delattr(auto_init_hook, "enable_auto_connect")
    assert ray_private.missing() == ["ray._private.auto_init_hook.enable_auto_connect is gone from the installed "
                                     "Ray (Spica is tested with ray 2.60.0)"]


def _project_files() -> list[Path]:
    return [*Path(spica_core.__file__).parent.rglob("*.py"), *Path(spica_cli.__file__).parent.rglob("*.py"),
            *(ROOT / "tasks").rglob("*.py"), *(ROOT / "flows").rglob("*.py")]


def test_no_prefect_or_python_internals_are_used_or_copied() -> None:
    """Prefect's private modules are imported nowhere, and nothing restates what its server does internally."""
    assert [str(p) for p in _project_files() if _private_imports(p, "prefect")] == []
    copied = {str(p.relative_to(ROOT)): [name for name in COPIED_INTERNALS if name in p.read_text()]
              for p in _project_files()}
    assert {path: names for path, names in copied.items() if names} == {}


@pytest.mark.slow
def test_gp_ucb_pes_joins_in_numpy_give_vizier_s_values_and_compile_nothing_per_pending_count(
        caplog: pytest.LogCaptureFixture) -> None:
    """``_trials_to_data`` and ``_get_predictive_all_features`` of Spica's GP-UCB-PE equal Vizier's own on the same
    trials (labels, and every array of the predictive conditioned on pending trials, noisy or not), and unlike
    Vizier's they compile no jax join when the pending count changes (Vizier's compiled one per pick)."""
    import logging

    import jax
    import numpy as np

    from spica_core.search.jax_setup import _runtime
    from spica_core.search.study import Study
    from spica_core.search.vizier_private import designer_classes
    from spica_core.space.params import Param

    rt = _runtime()
    params = [Param("size", "discrete", (1, 2, 4, 8), log_scale=True, is_int=True, default=4),
              Param("ratio", "float", bounds=(0.25, 1.0), default=1.0),
              Param("backend", "categorical", ("vllm", "sglang"), default="vllm")]
    study = Study(params, seed=3)
    pool = [{"size": s, "ratio": r, "backend": b} for s in (1, 2, 4, 8) for r in (0.25, 0.5, 1.0)
            for b in ("vllm", "sglang")]
    for k, raw in enumerate(pool[:7]):
        study.complete(raw, {"objective": float(k % 3) - raw["ratio"]})
    designer = study._new_designer()
    vizier_ucb_pe = designer_classes()[0]
    completed = study._vizier_trials()
    ours, theirs = designer._trials_to_data(completed), vizier_ucb_pe._trials_to_data(designer, completed)
    np.testing.assert_array_equal(np.asarray(ours.labels.padded_array), np.asarray(theirs.labels.padded_array))
    assert ours.labels.shape == theirs.labels.shape == (64, 1)
    model = designer._build_gp_model_and_optimize_parameters(ours, jax.random.PRNGKey(0))

    def pending(n: int) -> object:
        return designer._converter.to_features(study._pending_trials(pool[7:7 + n], exploit=False))

    for noisy in (False, True):
        a = designer._get_predictive_all_features(pending(3), ours, model, noisy)
        b = vizier_ucb_pe._get_predictive_all_features(designer, pending(3), ours, model, noisy)
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    def joins_compiled(predictive: Any, n: int) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax._src.dispatch"), rt.jax.log_compiles(True):
            predictive(pending(n), ours, model, False)
        return [r.getMessage() for r in caplog.records if "compilation of jit(concatenate)" in r.getMessage()]

    assert joins_compiled(designer._get_predictive_all_features, 4) == []
    assert joins_compiled(lambda *a: vizier_ucb_pe._get_predictive_all_features(designer, *a), 5) != []


@pytest.mark.slow
def test_a_steady_gp_ucb_pe_ask_compiles_no_join_or_slice_and_leaves_jax_as_it_was(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Vizier's ``suggest`` joins completed and pending trials inline (its trust region's trials) and unpads with
    ``jax.lax.slice``: every ask compiled a concatenate and slices for shapes that never recur, the RSS that grew
    a sweep. Spica's asks after the first compile none of them, Vizier's own ``suggest`` on
    the same designer does, and after an ask Vizier's module and ``PaddedArray`` are as they were."""
    import logging
    import re

    import jax.numpy as jnp
    from vizier._src.algorithms.designers import gp_ucb_pe
    from vizier._src.jax import types as vizier_types

    from spica_core.search.jax_setup import _runtime
    from spica_core.search.study import Study
    from spica_core.search.vizier_private import designer_classes
    from spica_core.space.params import Param

    rt = _runtime()
    params = [Param("size", "discrete", (1, 2, 4, 8), log_scale=True, is_int=True, default=4),
              Param("ratio", "float", bounds=(0.25, 1.0), default=1.0)]
    pool = [{"size": s, "ratio": r} for s in (1, 2, 4, 8) for r in (0.25, 0.4, 0.55, 0.7, 0.85, 1.0)]
    study = Study(params, seed=5)
    for k, raw in enumerate(pool[:6]):
        study.complete(raw, {"objective": float(k % 4) - raw["ratio"]})
    unpad = vizier_types.PaddedArray.__dict__["unpad"]
    joins = re.compile(r"jit\((concatenate|slice|dynamic_slice)\)")

    def ask(step: int, pending_count: int | None = None) -> list[str]:
        """One ask with ``1 + step`` picks pending unless told; the joins and slices it compiled."""
        tried = [t.params for t in study.trials]
        pending = [p for p in pool if p not in tried][:1 + step if pending_count is None else pending_count]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax._src.dispatch"), rt.jax.log_compiles(True):
            picks = study.suggest(2, step=step, pool=pool, pending=pending,
                                  allowed=[p not in tried and p not in pending for p in pool])
        assert len(picks) == 2
        assert gp_ucb_pe.jnp is jnp and vizier_types.PaddedArray.__dict__["unpad"] is unpad
        return [m for r in caplog.records if joins.search(m := r.getMessage())]

    ask(1)  # the first model ask traces and compiles the GP
    assert study._designer is not None
    assert ask(2) == [] and ask(3) == [] and ask(4, pending_count=0) == []  # none pending: Vizier's unpad, no slice
    monkeypatch.setattr(type(study._designer), "suggest", designer_classes()[0].suggest)  # Vizier's own
    assert ask(5) != []


@pytest.mark.slow
def test_padded_features_and_pools_give_the_same_picks_and_a_second_space_reuses_the_first_s_gp_executables(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Padding the feature axis and the scored pool's rows changes no pick (padded features are masked out of the
    kernel, padded rows' scores are dropped), and a study whose encoding has two more features and whose pool has
    more candidates than the first's compiles none of the GP's executables again (unpadded it compiles its own,
    20 of them)."""
    import logging
    import random

    from spica_core.search import vizier_private
    from spica_core.search.jax_setup import _runtime
    from spica_core.search.study import Study
    from spica_core.space.params import Param

    rt = _runtime()

    def study_and_pool(floats: int) -> tuple[Study, list[dict[str, Any]]]:  # 40, then 70 candidates
        params = [Param("size", "discrete", (1, 2, 4, 8), log_scale=True, is_int=True, default=4),
                  Param("backend", "categorical", ("vllm", "sglang"), default="vllm")]
        params += [Param(f"r{i}", "float", bounds=(0.25, 1.0), default=1.0) for i in range(floats)]
        rnd = random.Random(floats)
        pool = [{"size": rnd.choice((1, 2, 4, 8)), "backend": rnd.choice(("vllm", "sglang")),
                 **{f"r{i}": rnd.choice((0.25, 0.5, 1.0)) for i in range(floats)}} for _ in range(25 + 15 * floats)]
        study = Study(params, seed=floats)
        for k, raw in enumerate(pool[:6]):
            study.complete(raw, {"objective": float(k % 3) - raw["r0"] + 0.1 * raw["size"]})
        return study, pool

    def ask(floats: int) -> tuple[list[int], list[str]]:
        study, pool = study_and_pool(floats)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax._src.dispatch"), rt.jax.log_compiles(True):
            picks = study.suggest(4, 1, pool, [True] * len(pool), pending=[pool[7]], exploit=True)
        compiled = [r.getMessage() for r in caplog.records if "Finished XLA compilation" in r.getMessage()]
        # Padding the raw arrays compiles a few one-op executables (milliseconds each) per new width;
        # what costs seconds is the GP's own executables, so only those count.
        elementary = re.compile(r"jit\((_pad|concatenate|broadcast_in_dim|dynamic_slice)\)")
        return picks, [m for m in compiled if not elementary.search(m)]

    rt.jax.clear_caches()  # what earlier tests of this process traced would count as reused
    first, compiled = ask(1)
    again, recompiled = ask(3)
    assert len(compiled) > 20 and recompiled == []
    monkeypatch.setattr(vizier_private, "padded_features", lambda count: count)
    monkeypatch.setattr(vizier_private, "padded_pool", lambda count: count)
    rt.jax.clear_caches()
    unpadded_first, _ = ask(1)
    unpadded_again, recompiled = ask(3)
    assert (unpadded_first, unpadded_again) == (first, again)
    assert len(recompiled) > 10
