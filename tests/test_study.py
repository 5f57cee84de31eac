"""The seeded Vizier study: declaration, determinism, infeasible trials, decoding, rebuild, memory."""
from __future__ import annotations

import math
from typing import Any

import pytest

from spica_core.space.params import Param
from spica_core.search.study import CONSTANT_PARAM, Study, TrialRecord, derive_seed

PARAMS: list[Param] = [
    Param("backend", "categorical", ("vllm", "sglang"), default="vllm"),
    Param("size", "discrete", (1, 2, 4, 8), log_scale=True, is_int=True, default=4),
    Param("ratio", "float", bounds=(0.25, 1.0), default=1.0),
    Param("policy", "categorical", ("0", "1"), entries=("throughput_180_5", {"enable_load_scaling": True})),
]
SMALL: list[Param] = PARAMS[:3]  # GP tests: fewer dimensions, faster fits


def score(d: dict[str, Any]) -> float:
    return -(math.log2(d["size"]) - 2) ** 2 - (d["ratio"] - 0.6) ** 2 + (0.3 if d["backend"] == "vllm" else 0.0)


def filled(params: list[Param], algorithm: str, seed: int, n: int, *, infeasible_every: int = 0,
           objectives: tuple[tuple[str, str], ...] = (("objective", "max"),)) -> Study:
    """A study with n trials from random search (deterministic), some infeasible if asked."""
    source = Study(params, algorithm="RANDOM_SEARCH", seed=99)
    study = Study(params, objectives=objectives, algorithm=algorithm, seed=seed)  # type: ignore[arg-type]
    for i, raw in enumerate(source.suggest(n, step=0)):
        if infeasible_every and i % infeasible_every == infeasible_every - 1:
            study.complete(raw, None, "KV capacity: 0 blocks")
            continue
        d = study.decode(raw)
        metrics = {"objective": score(d)} if len(objectives) == 1 else {
            "throughput": score(d), "latency": 1.0 + d["ratio"] * d["size"]}
        study.complete(raw, metrics)
    return study


# ---------------------------------------------------------------- declaration (§7.3)


def test_problem_declares_types_scales_defaults_and_goals() -> None:
    study = Study(PARAMS, objectives=[("throughput", "max"), ("latency", "min")])
    problem = study.problem
    from vizier import pyvizier as vz

    space = problem.search_space
    assert space.get("backend").type == vz.ParameterType.CATEGORICAL
    assert space.get("backend").default_value == "vllm"
    size = space.get("size")
    assert size.type == vz.ParameterType.DISCRETE and size.scale_type == vz.ScaleType.LOG
    assert list(size.feasible_values) == [1.0, 2.0, 4.0, 8.0] and size.default_value == 4.0
    ratio = space.get("ratio")
    assert ratio.type == vz.ParameterType.DOUBLE and ratio.bounds == (0.25, 1.0) and ratio.default_value == 1.0
    assert ratio.scale_type == vz.ScaleType.LINEAR
    assert sorted(space.get("policy").feasible_values) == ["0", "1"]
    goals = {m.name: m.goal for m in problem.metric_information}
    assert goals == {"throughput": vz.ObjectiveMetricGoal.MAXIMIZE, "latency": vz.ObjectiveMetricGoal.MINIMIZE}


def test_empty_space_gets_the_constant_dummy_and_gp_accepts_it() -> None:
    study = Study([], algorithm="GAUSSIAN_PROCESS_BANDIT", seed=1, constants={"backend": "vllm"})
    names = [p.name for p in study.problem.search_space.parameters]
    assert names == [CONSTANT_PARAM]
    out = study.suggest(1, step=0)
    assert out == [{}]
    assert study.decode(out[0]) == {"backend": "vllm"}
    study.complete({CONSTANT_PARAM: "0"}, {"objective": 1.0})
    study.complete({}, None, "timeout")
    assert len(study.trials) == 2


def test_bad_declarations_are_rejected() -> None:
    with pytest.raises(ValueError, match="algorithm"):
        Study(PARAMS, algorithm="NSGA2")
    with pytest.raises(ValueError, match="distinct"):
        Study([PARAMS[0], PARAMS[0]])
    with pytest.raises(ValueError, match="reserved"):
        Study([Param(CONSTANT_PARAM, "categorical", ("0",))])
    with pytest.raises(ValueError, match="constants"):
        Study(PARAMS, constants={"backend": "vllm"})
    with pytest.raises(ValueError, match="goal"):
        Study(PARAMS, objectives=[("objective", "up")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="bounds"):
        Study([Param("x", "float", bounds=(1.0, 1.0))])


# ---------------------------------------------------------------- decode


def test_decode_composite_index_discrete_and_constants() -> None:
    study = Study(PARAMS, constants={"deployment_mode": "agg", "router_mode": "kv_router"})
    decoded = study.decode({"backend": "sglang", "size": 4.0000001, "ratio": 0.5, "policy": "1"})
    assert decoded == {"backend": "sglang", "size": 4, "ratio": 0.5, "policy": {"enable_load_scaling": True},
                       "deployment_mode": "agg", "router_mode": "kv_router"}
    assert study.decode({"backend": "vllm", "size": 1, "ratio": 1.0, "policy": "0"})["policy"] == "throughput_180_5"


def test_suggestions_are_feasible_and_decodable() -> None:
    study = Study(PARAMS, algorithm="RANDOM_SEARCH", seed=3)
    for raw in study.suggest(20, step=0):
        assert raw["backend"] in ("vllm", "sglang")
        assert raw["size"] in (1, 2, 4, 8) and isinstance(raw["size"], int)
        assert 0.25 <= raw["ratio"] <= 1.0
        assert study.decode(raw)["policy"] in ("throughput_180_5", {"enable_load_scaling": True})


# ---------------------------------------------------------------- trials


def test_complete_validates_parameters_and_metrics() -> None:
    study = Study(PARAMS)
    good = {"backend": "vllm", "size": 2, "ratio": 0.5, "policy": "0"}
    with pytest.raises(ValueError, match="missing \\['policy'\\]"):
        study.complete({k: v for k, v in good.items() if k != "policy"}, {"objective": 1.0})
    with pytest.raises(ValueError, match="unknown \\['extra'\\]"):
        study.complete({**good, "extra": 1}, {"objective": 1.0})
    with pytest.raises(ValueError, match="size"):
        study.complete({**good, "size": 3}, {"objective": 1.0})
    with pytest.raises(ValueError, match="ratio"):
        study.complete({**good, "ratio": 1.5}, {"objective": 1.0})
    with pytest.raises(ValueError, match="objective"):
        study.complete(good, {"other": 1.0})
    with pytest.raises(ValueError, match="not finite"):
        study.complete(good, {"objective": float("nan")})
    with pytest.raises(ValueError, match="needs metrics"):
        study.complete(good)
    with pytest.raises(ValueError, match="non-empty"):
        study.complete(good, None, " ")
    assert study.trials == ()


def test_infeasible_trials_are_recorded_and_accepted_by_the_designer() -> None:
    study = Study(PARAMS, algorithm="QUASI_RANDOM_SEARCH", seed=5)
    raws = study.suggest(3, step=0)
    study.complete(raws[0], None, "over budget", metadata={"spica_projection": "{}"})
    study.complete(raws[1], {"objective": 2.0, "extra_metric": 5.0})
    study.complete(raws[2], None, "exceed runtime: replay > 600s")
    assert [t.feasible for t in study.trials] == [False, True, False]
    assert study.trials[0] == TrialRecord(raws[0], None, "over budget", {"spica_projection": "{}"})
    trials = study._vizier_trials()
    assert [t.infeasible for t in trials] == [True, False, True]
    assert trials[1].final_measurement.metrics["objective"].value == 2.0
    assert len(study.suggest(2, step=1)) == 2


# ---------------------------------------------------------------- determinism


def test_derive_seed_is_stable_and_distinct() -> None:
    assert derive_seed(0, 0) == derive_seed(0, 0)
    assert len({derive_seed(s, t) for s in range(4) for t in range(4)}) == 16
    with pytest.raises(ValueError):
        derive_seed(-1, 0)


@pytest.mark.parametrize("algorithm", ["RANDOM_SEARCH", "QUASI_RANDOM_SEARCH"])
def test_random_designers_same_seed_trials_step_identical(algorithm: str) -> None:
    a = filled(PARAMS, algorithm, seed=11, n=5, infeasible_every=3)
    b = Study(PARAMS, algorithm=algorithm, seed=11, trials=a.trials)  # rebuilt from the records
    assert a.suggest(4, step=3) == b.suggest(4, step=3)
    assert a.suggest(4, step=3) == a.suggest(4, step=3)


def test_random_search_differs_by_seed_and_step() -> None:
    base = Study(PARAMS, algorithm="RANDOM_SEARCH", seed=1).suggest(4, step=0)
    assert Study(PARAMS, algorithm="RANDOM_SEARCH", seed=2).suggest(4, step=0) != base
    assert Study(PARAMS, algorithm="RANDOM_SEARCH", seed=1).suggest(4, step=1) != base


def test_quasi_random_differs_by_seed_and_continues_its_sequence() -> None:
    one = Study(PARAMS, algorithm="QUASI_RANDOM_SEARCH", seed=4)
    assert Study(PARAMS, algorithm="QUASI_RANDOM_SEARCH", seed=5).suggest(3, step=0) != one.suggest(3, step=0)
    sequence = one.suggest(3, step=0)
    first_two = one.suggest(2, step=0)
    for raw in first_two:
        one.complete(raw, {"objective": 0.0})
    # after two completed trials the study continues the same Halton sequence, not restarting it
    assert one.suggest(1, step=1) == [sequence[2]]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["GAUSSIAN_PROCESS_BANDIT", "DEFAULT"])
def test_gp_designers_same_seed_trials_step_identical(algorithm: str) -> None:
    a = filled(SMALL, algorithm, seed=21, n=6, infeasible_every=4)
    assert sum(not t.feasible for t in a.trials) == 1
    b = Study(SMALL, algorithm=algorithm, seed=21, trials=a.trials)  # rebuilt from the records
    first = a.suggest(2, step=4)
    assert len(first) == 2
    assert all(r["size"] in (1, 2, 4, 8) and 0.25 <= r["ratio"] <= 1.0 for r in first)
    assert b.suggest(2, step=4) == first


@pytest.mark.slow
def test_gp_ucb_pe_moves_towards_the_optimum() -> None:
    """From the same 8 random trials, GP-UCB-PE's next 3 suggestions sit at the optimum (size 4, vllm,
    ratio 0.6: score 0.3) and beat random search's next 3; a random point has size 4 and vllm 1 time in 8."""
    def next_three(algorithm: str) -> list[dict[str, Any]]:
        study = filled(SMALL, algorithm, seed=2, n=8)
        out = []
        for step in range(1, 4):
            (raw,) = study.suggest(1, step=step)
            out.append(study.decode(raw))
            study.complete(raw, {"objective": score(out[-1])})
        return out

    gp, rand = next_three("DEFAULT"), next_three("RANDOM_SEARCH")
    assert all(d["size"] == 4 and d["backend"] == "vllm" for d in gp), gp
    assert sum(map(score, gp)) > sum(map(score, rand)), (gp, rand)


@pytest.mark.slow
def test_multi_objective_default_suggests_valid_points() -> None:
    study = filled(SMALL, "DEFAULT", seed=8, n=6, infeasible_every=5,
                   objectives=(("throughput", "max"), ("latency", "min")))
    out = study.suggest(2, step=1)
    assert len(out) == 2
    for raw in out:
        assert raw["backend"] in ("vllm", "sglang") and raw["size"] in (1, 2, 4, 8) and 0.25 <= raw["ratio"] <= 1.0
        study.complete(raw, {"throughput": 1.0, "latency": 2.0})
    with pytest.raises(ValueError, match="latency"):
        study.complete(out[0], {"throughput": 1.0})


@pytest.mark.slow
def test_rss_stays_flat_over_successive_gp_suggests() -> None:
    """Without jax.clear_caches() this grows ~80 MB per call (bench/bench_study.py); with it, ~1 MB."""
    psutil = pytest.importorskip("psutil")
    study = filled(SMALL, "DEFAULT", seed=3, n=8)
    proc = psutil.Process()
    rss: list[float] = []
    for step in range(1, 9):
        raw = study.suggest(1, step=step)[0]
        study.complete(raw, {"objective": score(study.decode(raw))})
        rss.append(proc.memory_info().rss / 2**20)
    growth = rss[-1] - rss[1]
    assert growth < 300, f"RSS grew {growth:.0f} MB over 6 GP-UCB-PE suggests: {[round(r) for r in rss]}"
