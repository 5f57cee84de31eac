"""The seeded Vizier study over a finite pool: declaration, picks, determinism, infeasible trials, memory."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
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
RATIOS = (0.25, 0.4, 0.6, 0.8, 1.0)


def grid(params: list[Param]) -> list[dict[str, Any]]:
    """The finite pool of a parameter list: every value combination (floats on RATIOS)."""
    axes = [RATIOS if p.kind == "float" else p.values for p in params]
    return [dict(zip([p.name for p in params], combo)) for combo in itertools.product(*axes)]


POOL, SMALL_POOL = grid(PARAMS), grid(SMALL)


def score(d: dict[str, Any]) -> float:
    return -(math.log2(d["size"]) - 2) ** 2 - (d["ratio"] - 0.6) ** 2 + (0.3 if d["backend"] == "vllm" else 0.0)


def filled(params: list[Param], algorithm: str, seed: int, n: int, *, infeasible_every: int = 0,
           objectives: tuple[tuple[str, str], ...] = (("objective", "max"),)) -> Study:
    """A study with the first n candidates of a fixed shuffle of its pool, some infeasible if asked."""
    pool = grid(params)
    order = sorted(range(len(pool)), key=lambda i: derive_seed(99, i))
    study = Study(params, objectives=objectives, algorithm=algorithm, seed=seed)  # type: ignore[arg-type]
    for k, i in enumerate(order[:n]):
        raw = pool[i]
        if infeasible_every and k % infeasible_every == infeasible_every - 1:
            study.complete(raw, None, "KV capacity: 0 blocks")
            continue
        metrics = {"objective": score(raw)} if len(objectives) == 1 else {
            "throughput": score(raw), "latency": 1.0 + raw["ratio"] * raw["size"]}
        study.complete(raw, metrics)
    return study


def free_of(study: Study, pool: list[dict[str, Any]]) -> list[bool]:
    """Allowed = not yet a trial of the study (what the suggesters pass)."""
    tried = [t.params for t in study.trials]
    return [p not in tried for p in pool]


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


def test_empty_space_gets_the_constant_dummy_and_its_one_candidate() -> None:
    study = Study([], algorithm="GAUSSIAN_PROCESS_BANDIT", seed=1)
    names = [p.name for p in study.problem.search_space.parameters]
    assert names == [CONSTANT_PARAM]
    assert study.suggest(1, step=0, pool=[{}]) == [0]
    study.complete({CONSTANT_PARAM: "0"}, {"objective": 1.0})
    study.complete({}, None, "timeout")
    assert len(study.trials) == 2 and study._vizier_trials()[0].parameters.as_dict() == {CONSTANT_PARAM: "0"}
    assert study.suggest(1, step=1, pool=[{}], allowed=[False]) == []


def test_bad_declarations_are_rejected() -> None:
    with pytest.raises(ValueError, match="algorithm"):
        Study(PARAMS, algorithm="NSGA2")
    with pytest.raises(ValueError, match="distinct"):
        Study([PARAMS[0], PARAMS[0]])
    with pytest.raises(ValueError, match="reserved"):
        Study([Param(CONSTANT_PARAM, "categorical", ("0",))])
    with pytest.raises(ValueError, match="goal"):
        Study(PARAMS, objectives=[("objective", "up")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="bounds"):
        Study([Param("x", "float", bounds=(1.0, 1.0))])


# ---------------------------------------------------------------- decode


def test_composite_discrete_and_float_parameters_decode_to_knob_values() -> None:
    by_name = {p.name: p for p in PARAMS}
    assert by_name["policy"].decode("1") == {"enable_load_scaling": True}
    assert by_name["policy"].decode("0") == "throughput_180_5"
    assert by_name["size"].decode(4.0000001) == 4 and by_name["ratio"].decode(0.5) == 0.5


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
    raws = [POOL[i] for i in study.suggest(3, step=0, pool=POOL)]
    study.complete(raws[0], None, "over budget", metadata={"note": "x"})
    study.complete(raws[1], {"objective": 2.0, "extra_metric": 5.0})
    study.complete(raws[2], None, "exceed runtime: replay > 600s")
    assert [t.feasible for t in study.trials] == [False, True, False]
    assert study.trials[0] == TrialRecord(raws[0], None, "over budget", {"note": "x"})
    trials = study._vizier_trials()
    assert [t.infeasible for t in trials] == [True, False, True]
    assert trials[1].final_measurement.metrics["objective"].value == 2.0
    assert len(study.suggest(2, step=1, pool=POOL, allowed=free_of(study, POOL))) == 2


# ---------------------------------------------------------------- picks: distinct, allowed, exhaustive


@pytest.mark.parametrize("algorithm", ["RANDOM_SEARCH", "QUASI_RANDOM_SEARCH"])
def test_picks_are_distinct_allowed_candidates_until_the_pool_is_used_up(algorithm: str) -> None:
    study = Study(PARAMS, algorithm=algorithm, seed=3)
    taken: list[int] = []
    for step in range(12):
        allowed = free_of(study, POOL)
        picks = study.suggest(7, step=step, pool=POOL, allowed=allowed)
        assert len(picks) == min(7, sum(allowed)) and len(set(picks)) == len(picks)
        assert all(allowed[i] for i in picks)  # never a candidate already tried
        for i in picks:
            study.complete(POOL[i], {"objective": score(POOL[i])})
        taken += picks
    assert sorted(taken) == list(range(len(POOL)))  # 80 candidates, 12 asks of 7: the pool is exhausted
    assert study.suggest(3, step=99, pool=POOL, allowed=free_of(study, POOL)) == []


def test_bad_pool_masks_are_rejected() -> None:
    with pytest.raises(ValueError, match="allowed has 2 entries for a pool of 80"):
        Study(PARAMS).suggest(1, step=0, pool=POOL, allowed=[True, False])
    with pytest.raises(ValueError, match="count"):
        Study(PARAMS).suggest(0, step=0, pool=POOL)


def test_derive_seed_is_stable_and_distinct() -> None:
    assert derive_seed(0, 0) == derive_seed(0, 0)
    assert len({derive_seed(s, t) for s in range(4) for t in range(4)}) == 16
    with pytest.raises(ValueError):
        derive_seed(-1, 0)


@pytest.mark.parametrize("algorithm", ["RANDOM_SEARCH", "QUASI_RANDOM_SEARCH"])
def test_random_designers_same_seed_trials_step_identical(algorithm: str) -> None:
    a = filled(PARAMS, algorithm, seed=11, n=5, infeasible_every=3)
    b = Study(PARAMS, algorithm=algorithm, seed=11, trials=a.trials)  # rebuilt from the records
    allowed = free_of(a, POOL)
    assert a.suggest(4, step=3, pool=POOL, allowed=allowed) == b.suggest(4, step=3, pool=POOL, allowed=allowed)
    assert a.suggest(4, step=3, pool=POOL, allowed=allowed) == a.suggest(4, step=3, pool=POOL, allowed=allowed)


def test_random_search_differs_by_seed_and_step() -> None:
    base = Study(PARAMS, algorithm="RANDOM_SEARCH", seed=1).suggest(4, step=0, pool=POOL)
    assert Study(PARAMS, algorithm="RANDOM_SEARCH", seed=2).suggest(4, step=0, pool=POOL) != base
    assert Study(PARAMS, algorithm="RANDOM_SEARCH", seed=1).suggest(4, step=1, pool=POOL) != base


def test_quasi_random_differs_by_seed_and_continues_its_sequence() -> None:
    one = Study(PARAMS, algorithm="QUASI_RANDOM_SEARCH", seed=4)
    assert Study(PARAMS, algorithm="QUASI_RANDOM_SEARCH", seed=5).suggest(3, step=0, pool=POOL) != \
        one.suggest(3, step=0, pool=POOL)
    sequence = one.suggest(3, step=0, pool=POOL)
    for i in sequence[:2]:
        one.complete(POOL[i], {"objective": 0.0})
    # after two completed trials the study continues the same Halton sequence, not restarting it
    assert one.suggest(1, step=1, pool=POOL, allowed=free_of(one, POOL)) == [sequence[2]]


# ---------------------------------------------------------------- GP designers: warm, deterministic, good


def test_sync_keeps_the_designer_warm_for_appended_trials_and_rebuilds_otherwise() -> None:
    a = filled(SMALL, "GAUSSIAN_PROCESS_BANDIT", seed=1, n=4)
    a._designer, a._fed = object(), 4  # stand-in: sync must not touch a designer whose trials still hold
    records = [*a.trials, TrialRecord(SMALL_POOL[0], {"objective": 1.0})]
    a.sync(records)
    assert a._designer is not None and a.trials == tuple(records)
    a.sync(records[1:])  # not a continuation: the study starts over from these records
    assert a._designer is None and a._fed == 0 and a.trials == tuple(records[1:])


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["GAUSSIAN_PROCESS_BANDIT", "DEFAULT"])
def test_gp_warm_study_and_rebuilt_study_pick_the_same(algorithm: str) -> None:
    """A study fed trials ask by ask (its designer stays warm) and one rebuilt from the same records pick
    the same candidates at the same step; the picks are free and distinct."""
    live = filled(SMALL, algorithm, seed=21, n=5, infeasible_every=4)
    live.suggest(2, step=1, pool=SMALL_POOL, allowed=free_of(live, SMALL_POOL))  # warm the designer
    more = filled(SMALL, algorithm, seed=21, n=8, infeasible_every=4).trials[5:]
    live.sync([*live.trials, *more])
    allowed = free_of(live, SMALL_POOL)
    first = live.suggest(3, step=4, pool=SMALL_POOL, allowed=allowed)
    assert len(set(first)) == 3 and all(allowed[i] for i in first)
    rebuilt = Study(SMALL, algorithm=algorithm, seed=21, trials=live.trials)
    assert rebuilt.suggest(3, step=4, pool=SMALL_POOL, allowed=allowed) == first


REBUILD_SCRIPT = """
import json, sys
from spica_core.search.study import Study, TrialRecord
from spica_core.space.params import Param
spec = json.loads(sys.stdin.read())
params = [Param(p["name"], p["kind"], tuple(p["values"]), tuple(p["bounds"]) if p["bounds"] else None,
                p["log_scale"], is_int=p["is_int"]) for p in spec["params"]]
study = Study(params, algorithm=spec["algorithm"], seed=spec["seed"],
              trials=[TrialRecord(t["params"], t["metrics"], t["reason"]) for t in spec["trials"]])
print(json.dumps(study.suggest(3, step=spec["step"], pool=spec["pool"], allowed=spec["allowed"])))
"""


@pytest.mark.slow
def test_a_study_rebuilt_in_a_new_process_suggests_what_the_live_one_does() -> None:
    live = filled(SMALL, "DEFAULT", seed=7, n=6, infeasible_every=5)
    live.suggest(2, step=2, pool=SMALL_POOL, allowed=free_of(live, SMALL_POOL))  # warm, with compiled code
    live.sync([*live.trials, TrialRecord(SMALL_POOL[3], {"objective": -0.5})])
    allowed = free_of(live, SMALL_POOL)
    picks = live.suggest(3, step=3, pool=SMALL_POOL, allowed=allowed)
    spec = {"params": [{"name": p.name, "kind": p.kind, "values": list(p.values), "bounds": p.bounds,
                        "log_scale": p.log_scale, "is_int": p.is_int} for p in SMALL],
            "algorithm": "DEFAULT", "seed": 7, "step": 3, "pool": SMALL_POOL, "allowed": allowed,
            "trials": [{"params": t.params, "metrics": t.metrics, "reason": t.infeasible_reason} for t in live.trials]}
    out = subprocess.run([sys.executable, "-c", REBUILD_SCRIPT], input=json.dumps(spec), capture_output=True,
                         text=True, check=True, timeout=600)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == picks


@pytest.mark.slow
def test_gp_ucb_pe_moves_towards_the_optimum() -> None:
    """From the same 8 trials, on 6 seeds: GP-UCB-PE's next 3 picks score better than random search's next 3
    on at least 5, and sit mostly on the best size on every one (a random pick has size 4 one time in 4, so
    two of three in all 6 seeds happens by chance about once in 50,000)."""
    def next_three(algorithm: str, seed: int) -> list[dict[str, Any]]:
        study = filled(SMALL, algorithm, seed=seed, n=8)
        out = []
        for step in range(1, 4):
            (i,) = study.suggest(1, step=step, pool=SMALL_POOL, allowed=free_of(study, SMALL_POOL))
            out.append(SMALL_POOL[i])
            study.complete(SMALL_POOL[i], {"objective": score(SMALL_POOL[i])})
        return out

    runs = {seed: (next_three("DEFAULT", seed), next_three("RANDOM_SEARCH", seed)) for seed in range(6)}
    assert all(sum(d["size"] == 4 for d in gp) >= 2 for gp, _ in runs.values()), runs
    assert sum(sum(map(score, gp)) > sum(map(score, rand)) for gp, rand in runs.values()) >= 5, runs


@pytest.mark.slow
def test_multi_objective_default_picks_free_candidates() -> None:
    study = filled(SMALL, "DEFAULT", seed=8, n=6, infeasible_every=5,
                   objectives=(("throughput", "max"), ("latency", "min")))
    allowed = free_of(study, SMALL_POOL)
    out = study.suggest(2, step=1, pool=SMALL_POOL, allowed=allowed)
    assert len(set(out)) == 2 and all(allowed[i] for i in out)
    with pytest.raises(ValueError, match="latency"):
        study.complete(SMALL_POOL[out[0]], {"throughput": 1.0})


def test_a_model_ask_runs_with_one_blas_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside busy replay workers, OpenBLAS's waiting threads spun and an ask cost several times its CPU
    (beside busy replay workers): the designer's suggest runs with BLAS limited to one thread, and only it."""
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    seen: list[list[int]] = []

    class Designer:  # records the limits the ask runs under; proposes nothing, so the study space-fills
        def update(self, *_: object) -> None: ...

        def suggest(self, count: int) -> list[object]:
            seen.append(blas_threads())
            return []

    study = filled(SMALL, "DEFAULT", seed=1, n=4)
    monkeypatch.setattr(study, "_new_designer", Designer)
    monkeypatch.setattr("spica_core.search.study.reseed", lambda *_: None)
    before = blas_threads()
    picks = study.suggest(2, step=1, pool=SMALL_POOL, allowed=free_of(study, SMALL_POOL))
    assert len(picks) == 2 and seen and seen[0] and set(seen[0]) == {1}
    assert set(blas_threads()) == set(before)  # restored after the ask (a library it loaded has the default)


@pytest.mark.slow
def test_rss_growth_is_bounded_with_the_designer_and_compile_caches_kept() -> None:
    """Padding bounds the compiled shapes: past the first suggests, RSS hardly grows (bench/bench_search.py
    measures 200 suggestions)."""
    psutil = pytest.importorskip("psutil")
    study = filled(SMALL, "DEFAULT", seed=3, n=8)
    proc = psutil.Process()
    rss: list[float] = []
    for step in range(1, 11):
        (i,) = study.suggest(1, step=step, pool=SMALL_POOL, allowed=free_of(study, SMALL_POOL))
        study.complete(SMALL_POOL[i], {"objective": score(SMALL_POOL[i])})
        rss.append(proc.memory_info().rss / 2**20)
    growth = rss[-1] / rss[1] - 1
    assert growth < 0.2, f"RSS grew {growth:.0%} over 9 GP-UCB-PE suggests: {[round(r) for r in rss]}"


LINE = [Param("x", "discrete", tuple(range(40)), is_int=True, default=0)]
LINE_POOL = [{"x": x} for x in range(40)]


def peak(d: dict[str, Any], at: int) -> float:
    return -((d["x"] - at) / 10) ** 2


@pytest.mark.slow
def test_a_gp_bandit_prior_from_an_earlier_study_steers_the_picks_but_is_never_a_trial() -> None:
    """An earlier study on a related objective (another trace: the same peak, shifted scores) as the prior:
    from the same two own trials far from the peak, the GP bandit's next picks land at the peak only with it."""
    prior = [TrialRecord({"x": x}, {"objective": peak({"x": x}, 31) + 5.0}) for x in range(0, 40, 3)]

    def next_picks(with_prior: bool) -> list[int]:
        study = Study(LINE, algorithm="GAUSSIAN_PROCESS_BANDIT", seed=4, prior=prior if with_prior else (),
                      trials=[TrialRecord({"x": x}, {"objective": peak({"x": x}, 31)}) for x in (2, 5)])
        picks = []
        for step in range(1, 3):
            (i,) = study.suggest(1, step=step, pool=LINE_POOL, allowed=free_of(study, LINE_POOL))
            picks.append(LINE_POOL[i]["x"])
            study.complete(LINE_POOL[i], {"objective": peak(LINE_POOL[i], 31)})
        assert len(study.trials) == 4 and len(study.prior) == (len(prior) if with_prior else 0)
        return picks

    informed, blind = next_picks(True), next_picks(False)
    assert all(abs(x - 31) <= 3 for x in informed), informed
    assert informed != blind and not all(abs(x - 31) <= 3 for x in blind), blind


def test_ard_iterations_grow_with_the_trials_up_to_vizier_cap() -> None:
    from spica_core.search.study import ARD_MAX_ITERATIONS, ARD_ITERATIONS_PER_TRIAL, ard_iterations

    assert ard_iterations(0) == 1 and ard_iterations(4) == 4 * ARD_ITERATIONS_PER_TRIAL
    assert ard_iterations(19) == min(ARD_MAX_ITERATIONS, 19 * ARD_ITERATIONS_PER_TRIAL)
    assert ard_iterations(20) == ard_iterations(500) == ARD_MAX_ITERATIONS == 500


@pytest.mark.slow
def test_gp_ucb_pe_ard_fit_is_capped_by_the_trial_count_in_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first model ask on a few trials fitted the GP for up to 500 L-BFGS-B iterations (772 loss
    evaluations at 4 trials): scipy's L-BFGS-B now gets 25 per completed trial, and runs no more."""
    import scipy.optimize

    from spica_core.search.study import ard_iterations

    real, runs = scipy.optimize.minimize, []

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if kwargs.get("method") == "L-BFGS-B":
            runs.append((kwargs["options"]["maxiter"], result.nit))
        return result

    monkeypatch.setattr(scipy.optimize, "minimize", spy)
    study = filled(SMALL, "DEFAULT", seed=3, n=4)
    study.suggest(2, step=1, pool=SMALL_POOL, allowed=free_of(study, SMALL_POOL))
    assert runs and {cap for cap, _ in runs} == {ard_iterations(4)} == {100}
    assert all(nit <= cap for cap, nit in runs)
    runs.clear()
    study.sync(filled(SMALL, "DEFAULT", seed=3, n=24).trials)
    study.suggest(2, step=2, pool=SMALL_POOL, allowed=free_of(study, SMALL_POOL))
    assert runs and {cap for cap, _ in runs} == {500}


@pytest.mark.slow
def test_traced_gp_leaves_a_branch_s_first_model_ask_nothing_to_trace(caplog: pytest.LogCaptureFixture) -> None:
    """``trace_gp`` traces GP-UCB-PE on a made-up study of its own: a branch's first model ask (another space,
    another pool) then traces none of the GP again; after a clear of jax's caches the same ask traces it all."""
    import logging

    from spica_core.search.gp_warm_up import trace_gp
    from spica_core.search.jax_setup import _runtime

    rt = _runtime()

    def traced_by_first_ask() -> list[str]:
        study = filled(PARAMS, "DEFAULT", seed=2, n=4)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax._src.dispatch"), rt.jax.log_compiles(True):
            picks = study.suggest(3, step=1, pool=POOL, allowed=free_of(study, POOL), pending=[POOL[-1]])
        assert len(picks) == 3
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Finished tracing")]

    rt.jax.clear_caches()
    cold = traced_by_first_ask()
    rt.jax.clear_caches()
    trace_gp()
    assert len(cold) > 20 and traced_by_first_ask() == []


@pytest.mark.slow
def test_tracing_on_a_thread_waits_for_a_model_ask_and_the_interpreter_waits_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's tracing holds the process's one model-ask lock (never beside an ask), runs once per process,
    and its thread is not a daemon: the interpreter would otherwise stop it inside jax at exit, which aborts the
    process."""
    from spica_core.search import gp_warm_up

    monkeypatch.setattr(gp_warm_up, "_TRACING", [])
    with gp_warm_up.MODEL_ASK:
        thread = gp_warm_up.warm_up(trace=True)
        assert thread is not None and not thread.daemon
        thread.join(0.3)
        assert thread.is_alive()  # waiting for the lock, not tracing
        assert gp_warm_up.warm_up(trace=True) is thread  # once per process
    thread.join(120)
    assert not thread.is_alive()
    assert gp_warm_up.warm_up() is None


def test_a_space_filling_ask_never_waits_for_the_model_ask_lock() -> None:
    """A GP study's asks that fit no model (no outcome yet, or space-filling by choice) run while the process's
    model-ask lock is held (by the tracing, or another study's model ask); a model ask waits for it, and says how
    long (``waited``: not part of what the ask cost)."""
    import threading

    from spica_core.search.jax_setup import MODEL_ASK

    blind, informed = Study(SMALL, seed=1), filled(SMALL, "DEFAULT", seed=1, n=4)
    answers: dict[str, list[int]] = {}
    asking = {name: threading.Event() for name in ("first", "chosen", "modelled")}

    def ask(name: str, study: Study, model: bool) -> threading.Thread:
        def run() -> None:
            asking[name].set()
            answers[name] = study.suggest(2, step=1, pool=SMALL_POOL, allowed=free_of(study, SMALL_POOL), model=model)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    with MODEL_ASK:
        first = ask("first", blind, model=True)  # knows no outcome: space-fills
        chosen = ask("chosen", informed, model=False)
        first.join(30), chosen.join(30)
        assert len(answers.get("first", [])) == 2 and len(answers.get("chosen", [])) == 2
        assert blind.waited == 0.0 and informed.waited == 0.0
        modelled = ask("modelled", informed, model=True)
        assert asking["modelled"].wait(30)  # in its ask (the pool's features are kept from "chosen": at the lock)
        modelled.join(1.0)
        assert modelled.is_alive() and "modelled" not in answers
    modelled.join(120)
    assert len(answers["modelled"]) == 2 and informed.waited >= 0.4


def test_a_failed_trace_ahead_is_quiet(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Tracing ahead is best effort: a failure there prints nothing (the first model ask meets it again, with
    its stage's message) and leaves the model-ask lock free."""
    from spica_core.search import gp_warm_up

    def broken() -> None:
        raise RuntimeError("no GP today")

    monkeypatch.setattr(gp_warm_up, "_TRACING", [])
    monkeypatch.setattr(gp_warm_up, "trace_gp", broken)
    thread = gp_warm_up.warm_up(trace=True)
    assert thread is not None
    thread.join(30)
    assert not thread.is_alive() and gp_warm_up.MODEL_ASK.acquire(blocking=False)
    gp_warm_up.MODEL_ASK.release()
    assert "no GP today" not in capsys.readouterr().err




@pytest.mark.slow
def test_plain_vizier_picks_what_the_patched_one_does() -> None:
    """SPICA_PLAIN_VIZIER=1 turns every performance patch of vizier_private.py off (Vizier's own padding, joins
    and pick predictions): for the default designer (GP-UCB-PE) the same trials, seed and step give the same
    picks, so the patches buy time only. (The GP bandit's random ARD restarts draw one length scale per padded
    feature, so its picks can differ: docs/search.md.)"""
    import os

    algorithm = "DEFAULT"

    live = filled(SMALL, algorithm, seed=5, n=9, infeasible_every=4)
    allowed = free_of(live, SMALL_POOL)
    spec = {"params": [{"name": p.name, "kind": p.kind, "values": list(p.values), "bounds": p.bounds,
                        "log_scale": p.log_scale, "is_int": p.is_int} for p in SMALL],
            "algorithm": algorithm, "seed": 5, "step": 2, "pool": SMALL_POOL, "allowed": allowed,
            "trials": [{"params": t.params, "metrics": t.metrics, "reason": t.infeasible_reason} for t in live.trials]}
    script = REBUILD_SCRIPT.replace(
        "print(json.dumps(study.suggest(3, step=spec[\"step\"], pool=spec[\"pool\"], allowed=spec[\"allowed\"])))",
        "picks = study.suggest(3, step=spec[\"step\"], pool=spec[\"pool\"], allowed=spec[\"allowed\"])\n"
        "print(json.dumps([picks, type(study._designer).__name__, type(study._designer._padding_schedule).__name__]))")
    assert script != REBUILD_SCRIPT
    runs = {}
    for flag in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", script], input=json.dumps(spec), capture_output=True,
                             text=True, check=True, timeout=600, env={**os.environ, "SPICA_PLAIN_VIZIER": flag})
        runs[flag] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["0"][1:] == ["PatchedUCBPE", "NumpyTrialPadding"]     # the patches were on ...
    assert runs["1"][1:] == ["FiniteUCBPE", "PaddingSchedule"]        # ... and off: Vizier's own padding and joins
    assert len(set(runs["0"][0])) == 3 and runs["1"][0] == runs["0"][0]
