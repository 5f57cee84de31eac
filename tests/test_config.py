"""Every validator of §1–§5: at least one accepted and one rejected case, with the YAML path."""
from __future__ import annotations

import os
import copy
from typing import Any, Callable

import pytest

from spica_core.config import (
    PREDICTOR_FAMILIES,
    DisaggParallel,
    ParallelShape,
    SLATarget,
    SmartSearchConfig,
    decode_composite,
    filter_for_goal,
    filter_scaling_policies,
    predictor_fields,
    throughput_intervals,
)
from spica_core.errors import ConfigError, SpicaError

BASE: dict[str, Any] = {
    "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8},
    "workload": {"isl": 4000, "osl": 500, "concurrency": 32, "num_request_ratio": 4},
}


def cfg(mutate: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    if mutate:
        mutate(d)
    return d


def ss(**kw: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["search_space"].update(kw)


def wl(**kw: Any) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        d["workload"].update(kw)
        for k in [k for k, v in d["workload"].items() if v is None]:
            del d["workload"][k]
    return apply


def top(**kw: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.update(kw)


def rejected(mutate: Callable[[dict[str, Any]], Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        SmartSearchConfig.from_dict(cfg(mutate))
    return info.value


def paths(err: ConfigError) -> list[str]:
    return [i.path for i in err.issues]


TRACE = {"trace_path": "t.jsonl", "isl": None, "osl": None, "concurrency": None, "num_request_ratio": None}
SYNTH_NO_LOAD = {"concurrency": None}
GOODPUT = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 1000, "itl_ms": 30}}

# (name, accepted mutation, rejected mutation, expected path of the rejection)
CASES: list[tuple[str, Callable[..., Any], Callable[..., Any], str]] = [
    # atomic list knobs (§2.1, §2.10)
    ("atomic membership", ss(router_mode=["round_robin"]), ss(router_mode=["kv_router", "rr"]),
     "search_space.router_mode[1]"),
    ("atomic int membership", ss(prefill_max_num_seqs=[1, 256]), ss(prefill_max_num_seqs=[1, 3]),
     "search_space.prefill_max_num_seqs[1]"),
    ("atomic float membership", ss(prefill_load_scale=[0, 32]), ss(prefill_load_scale=[64]),
     "search_space.prefill_load_scale[0]"),
    ("atomic bool is not a number", ss(overlap_score_credit=[1.0]), ss(overlap_score_credit=[True]),
     "search_space.overlap_score_credit[0]"),
    ("atomic non-empty", ss(backend=["sglang"]), ss(backend=[]), "search_space.backend"),
    ("deployment_mode values", ss(deployment_mode=["agg"]), ss(deployment_mode=["both"]),
     "search_space.deployment_mode[0]"),
    # composite knobs (§3.5)
    ("composite preset id", ss(planner_fpm_sampling=["fine"]), ss(planner_fpm_sampling=["huge"]),
     "search_space.planner_fpm_sampling[0]"),
    ("composite dict allowed keys",
     ss(planner_load_sensitivity=[{"load_scaling_down_sensitivity": 60, "load_min_observations": 2}]),
     ss(planner_load_sensitivity=[{"load_scaling_down_sensitivity": 60, "load_min_observations": 2, "x": 1}]),
     "search_space.planner_load_sensitivity[0]"),
    ("composite dict required keys",
     ss(planner_scaling_policy=["disabled", {"enable_throughput_scaling": False, "enable_load_scaling": True,
                                             "throughput_adjustment_interval_seconds": 240,
                                             "load_adjustment_interval_seconds": 5}]),
     ss(planner_scaling_policy=["disabled", {"enable_load_scaling": True}]),
     "search_space.planner_scaling_policy[1]"),
    ("composite empty dict", ss(planner_fpm_sampling=[{"max_num_fpm_samples": 8, "fpm_sample_bucket_size": 4}]),
     ss(planner_fpm_sampling=[{}]), "search_space.planner_fpm_sampling[0]"),
    ("predictor dict needs only the family", ss(load_predictor_candidates=[{"load_predictor": "kalman"}]),
     ss(load_predictor_candidates=[{"kalman_r": 3.0}]), "search_space.load_predictor_candidates[0]"),
    ("predictor dict family", ss(load_predictor_candidates=["arima_raw", {"load_predictor": "prophet"}]),
     ss(load_predictor_candidates=["arima_raw", {"load_predictor": "lstm"}]),
     "search_space.load_predictor_candidates[1].load_predictor"),
    ("predictor dict value types", ss(load_predictor_candidates=[{"load_predictor": "kalman", "kalman_r": 3,
                                                                  "load_predictor_log1p": True}]),
     ss(load_predictor_candidates=[{"load_predictor": "kalman", "load_predictor_log1p": "yes"}]),
     "search_space.load_predictor_candidates[0].load_predictor_log1p"),
    ("scaling dict flags are booleans",
     ss(planner_scaling_policy=[{"enable_throughput_scaling": False, "enable_load_scaling": False,
                                 "throughput_adjustment_interval_seconds": None,
                                 "load_adjustment_interval_seconds": None}]),
     ss(planner_scaling_policy=[{"enable_throughput_scaling": "false", "enable_load_scaling": True,
                                 "throughput_adjustment_interval_seconds": 180,
                                 "load_adjustment_interval_seconds": 5}]),
     "search_space.planner_scaling_policy[0].enable_throughput_scaling"),
    ("scaling dict intervals are integers",
     ss(planner_scaling_policy=[{"enable_throughput_scaling": False, "enable_load_scaling": True,
                                 "throughput_adjustment_interval_seconds": 180,
                                 "load_adjustment_interval_seconds": 5}]),
     ss(planner_scaling_policy=[{"enable_throughput_scaling": False, "enable_load_scaling": True,
                                 "throughput_adjustment_interval_seconds": 180,
                                 "load_adjustment_interval_seconds": "5s"}]),
     "search_space.planner_scaling_policy[0].load_adjustment_interval_seconds"),
    ("fpm dict values are integers", ss(planner_fpm_sampling=[{"max_num_fpm_samples": 8, "fpm_sample_bucket_size": 4}]),
     ss(planner_fpm_sampling=[{"max_num_fpm_samples": 8, "fpm_sample_bucket_size": True}]),
     "search_space.planner_fpm_sampling[0].fpm_sample_bucket_size"),
    ("composite entry type", ss(planner_load_sensitivity=["default"]), ss(planner_load_sensitivity=[3]),
     "search_space.planner_load_sensitivity[0]"),
    ("composite non-empty", ss(planner_scaling_policy=["disabled"]), ss(planner_scaling_policy=[]),
     "search_space.planner_scaling_policy"),
    # deployment pins (§2.2)
    ("min_gpu_budget <= gpu_budget", ss(min_gpu_budget=8), ss(min_gpu_budget=9), "search_space.min_gpu_budget"),
    ("min_gpu_budget > 0", ss(min_gpu_budget=1), ss(min_gpu_budget=0), "search_space.min_gpu_budget"),
    ("gpu_budget > 0", ss(gpu_budget=1), ss(gpu_budget=0), "search_space.gpu_budget"),
    ("model_name required", ss(model_name="Qwen/Qwen3-8B"), lambda d: d["search_space"].pop("model_name"),
     "search_space.model_name"),
    ("hardware_sku required", ss(hardware_sku="b200_sxm"), lambda d: d["search_space"].pop("hardware_sku"),
     "search_space.hardware_sku"),
    # KV manager (§2.6)
    ("kv_bytes_per_token with offload", ss(num_g2_blocks=1000, kv_bytes_per_token=262144),
     ss(num_g2_blocks=1000), "search_space.kv_bytes_per_token"),
    ("num_g2_blocks >= 0", ss(num_g2_blocks=0), ss(num_g2_blocks=-1), "search_space.num_g2_blocks"),
    # admission control (§2.8)
    ("admission with round robin only", ss(router_mode=["round_robin"], active_decode_blocks_threshold=100),
     ss(active_decode_blocks_threshold=100), "search_space.active_decode_blocks_threshold"),
    ("no_admission_control with kv_router", ss(router_mode=["round_robin"], no_admission_control=True),
     ss(no_admission_control=True), "search_space.no_admission_control"),
    ("prefill token threshold frac with kv_router", ss(router_mode=["round_robin"],
                                                       active_prefill_tokens_threshold_frac=0.5),
     ss(active_prefill_tokens_threshold_frac=0.5), "search_space.active_prefill_tokens_threshold_frac"),
    # parallel_configs (§2.13)
    ("pinned agg config", ss(deployment_mode=["agg"], parallel_configs=[{"tp": 2, "replicas": 4}]),
     ss(parallel_configs=[{"tp": 2, "replicas": 4}]), "search_space.deployment_mode"),
    ("agg entry needs tp", ss(deployment_mode=["agg"], parallel_configs=[{"tp": 1}]),
     ss(deployment_mode=["agg"], parallel_configs=[{"replicas": 2}]), "search_space.parallel_configs[0].tp"),
    ("agg entry keys", ss(deployment_mode=["agg"], parallel_configs=[{"tp": 1, "moe_ep": 1, "pp": 1}]),
     ss(deployment_mode=["agg"], parallel_configs=[{"tp": 1, "ep": 2}]), "search_space.parallel_configs[0].ep"),
    ("disagg entry shape",
     ss(deployment_mode=["disagg"], parallel_configs=[{"prefill": {"tp": 2}, "decode": {"tp": 4, "replicas": 1}}]),
     ss(deployment_mode=["disagg"], parallel_configs=[{"prefill": {"tp": 2}, "decode": {"tp": 0}}]),
     "search_space.parallel_configs[0].decode.tp"),
    ("disagg entry for a disagg branch",
     ss(deployment_mode=["disagg"], parallel_configs=[{"prefill": {"tp": 2}, "decode": {"tp": 2}}]),
     ss(deployment_mode=["disagg"], parallel_configs=[{"tp": 2}]), "search_space.parallel_configs[0]"),
    ("agg entry for an agg branch",
     ss(deployment_mode=["agg"], parallel_configs=[{"tp": 2}]),
     ss(deployment_mode=["agg"], parallel_configs=[{"tp": 2}, {"prefill": {"tp": 2}, "decode": {"tp": 2}}]),
     "search_space.parallel_configs[1]"),
    ("disagg entry needs both roles",
     ss(deployment_mode=["disagg"], parallel_configs=[{"prefill": {"tp": 2}, "decode": {"tp": 2}}]),
     ss(deployment_mode=["disagg"], parallel_configs=[{"prefill": {"tp": 2}}]),
     "search_space.parallel_configs[0].decode"),
    # workload (§1.3, §5.1)
    ("trace forbids synthetic fields", wl(**TRACE), wl(trace_path="t.jsonl", isl=None, concurrency=None,
                                                       num_request_ratio=None), "workload.osl"),
    ("synthetic needs exactly one load", wl(concurrency=None, request_rate=2.0),
     wl(request_rate=2.0), "workload"),
    ("synthetic needs some load", wl(concurrency=None, kv_load_ratio=0.5), wl(**SYNTH_NO_LOAD), "workload"),
    ("synthetic needs isl", wl(isl=10), wl(isl=None), "workload.isl"),
    ("synthetic needs num_request_ratio", wl(num_request_ratio=0.5), wl(num_request_ratio=None),
     "workload.num_request_ratio"),
    ("isl > 0", wl(isl=1), wl(isl=0), "workload.isl"),
    ("osl > 0", wl(osl=1), wl(osl=-5), "workload.osl"),
    ("concurrency is an int", wl(concurrency=7), wl(concurrency=2.5), "workload.concurrency"),
    ("concurrency is not a bool", wl(concurrency=1), wl(concurrency=True), "workload.concurrency"),
    ("request_rate > 0", wl(concurrency=None, request_rate=0.1), wl(concurrency=None, request_rate=0),
     "workload.request_rate"),
    ("num_request_ratio > 0", wl(num_request_ratio=0.1), wl(num_request_ratio=0), "workload.num_request_ratio"),
    ("kv_load_ratio >= 0", wl(concurrency=None, kv_load_ratio=0), wl(concurrency=None, kv_load_ratio=-0.1),
     "workload.kv_load_ratio"),
    ("kv_load_ratio finite", wl(concurrency=None, kv_load_ratio=2.0),
     wl(concurrency=None, kv_load_ratio=float("inf")), "workload.kv_load_ratio"),
    ("kv_load_ratio range has 2 values",
     lambda d: (wl(concurrency=None, kv_load_ratio=[0.1, 0.9])(d), d.update(goal={"target": "pareto"})),
     lambda d: (wl(concurrency=None, kv_load_ratio=[0.1, 0.5, 0.9])(d), d.update(goal={"target": "pareto"})),
     "workload.kv_load_ratio"),
    ("kv_load_ratio range min < max",
     lambda d: (wl(concurrency=None, kv_load_ratio=[0.0, 1.0])(d), d.update(goal={"target": "pareto"})),
     lambda d: (wl(concurrency=None, kv_load_ratio=[1.0, 1.0])(d), d.update(goal={"target": "pareto"})),
     "workload.kv_load_ratio"),
    ("kv_load_ratio range only under pareto",
     lambda d: (wl(concurrency=None, kv_load_ratio=[0.0, 1.0])(d), d.update(goal={"target": "pareto"})),
     wl(concurrency=None, kv_load_ratio=[0.0, 1.0]), "workload.kv_load_ratio"),
    ("replay_concurrency only for traces", wl(**TRACE, replay_concurrency=8), wl(replay_concurrency=8),
     "workload.replay_concurrency"),
    ("replay_concurrency > 0", wl(**TRACE, replay_concurrency=1), wl(**TRACE, replay_concurrency=0),
     "workload.replay_concurrency"),
    ("arrival_speedup_ratio > 0", wl(**TRACE, arrival_speedup_ratio=2.0), wl(**TRACE, arrival_speedup_ratio=0),
     "workload.arrival_speedup_ratio"),
    # goal (§1.4, §4.4)
    ("target enum", top(goal={"target": "e2e_latency"}), top(goal={"target": "fastest"}), "goal.target"),
    ("goodput needs an SLA", top(goal=GOODPUT), top(goal={"target": "goodput"}), "goal.sla"),
    ("TTFT alone is not enough", top(goal={"target": "goodput", "sla": {"e2e_ms": 5000}}),
     top(goal={"target": "goodput", "sla": {"ttft_ms": 500}}), "goal.sla"),
    ("goodput SLA is e2e alone or ttft/itl", top(goal={"target": "goodput", "sla": {"ttft_ms": 500, "itl_ms": 30}}),
     top(goal={"target": "goodput", "sla": {"ttft_ms": 500, "itl_ms": 30, "e2e_ms": 5000}}), "goal.sla"),
    ("any SLA is e2e alone or ttft/itl", top(goal={"target": "throughput", "sla": {"e2e_ms": 5000}}),
     top(goal={"target": "throughput", "sla": {"itl_ms": 30, "e2e_ms": 5000}}), "goal.sla"),
    ("SLA bounds > 0", top(goal={"target": "throughput", "sla": {"itl_ms": 1}}),
     top(goal={"target": "throughput", "sla": {"itl_ms": 0}}), "goal.sla.itl_ms"),
    ("pareto goodput objective needs SLA",
     top(goal={"target": "pareto", "pareto_objectives": ["goodput", "throughput_per_user"],
               "sla": {"e2e_ms": 9000}}),
     top(goal={"target": "pareto", "pareto_objectives": ["goodput", "throughput_per_user"]}), "goal.sla"),
    ("pareto_objectives only under pareto",
     top(goal={"target": "pareto", "pareto_objectives": ["throughput", "e2e_latency"]}),
     top(goal={"target": "throughput", "pareto_objectives": ["throughput", "e2e_latency"]}),
     "goal.pareto_objectives"),
    ("pareto_objectives >= 2", top(goal={"target": "pareto", "pareto_objectives": ["throughput", "goodput",
                                                                                   ],
                                         "sla": {"e2e_ms": 1000}}),
     top(goal={"target": "pareto", "pareto_objectives": ["throughput"]}), "goal.pareto_objectives"),
    ("pareto_objectives distinct", top(goal={"target": "pareto", "pareto_objectives": ["throughput", "e2e_latency"]}),
     top(goal={"target": "pareto", "pareto_objectives": ["throughput", "throughput"]}), "goal.pareto_objectives"),
    ("pareto_objectives without pareto",
     top(goal={"target": "pareto", "pareto_objectives": ["throughput_per_gpu", "throughput_per_user"]}),
     top(goal={"target": "pareto", "pareto_objectives": ["throughput", "pareto"]}), "goal.pareto_objectives[1]"),
    # sweep (§1.5, §6.7)
    ("max_rounds >= 1", top(sweep={"max_rounds": 1}), top(sweep={"max_rounds": 0}), "sweep.max_rounds"),
    ("parallel_evals >= 1", top(sweep={"parallel_evals": 1}), top(sweep={"parallel_evals": 0}),
     "sweep.parallel_evals"),
    ("candidates_per_round >= 1", top(sweep={"candidates_per_round": 1}), top(sweep={"candidates_per_round": 0}),
     "sweep.candidates_per_round"),
    ("max_eval_seconds > 0 or null", top(sweep={"max_eval_seconds": None}), top(sweep={"max_eval_seconds": 0}),
     "sweep.max_eval_seconds"),
    ("S1 has no random_seed", top(sweep={"seed": 3}), top(sweep={"random_seed": 3}), "sweep.random_seed"),
    ("policy values", top(sweep={"policy": "thorough"}), top(sweep={"policy": "exhaustive"}), "sweep.policy"),
    ("thorough rejects a continuous range",
     lambda d: (wl(concurrency=None, kv_load_ratio=0.5)(d), d.update(sweep={"policy": "thorough"})),
     lambda d: (wl(concurrency=None, kv_load_ratio=[0.0, 1.0])(d),
                d.update(goal={"target": "pareto"}, sweep={"policy": "thorough"})), "sweep.policy"),
    ("algorithm values", top(sweep={"algorithm": "RANDOM_SEARCH"}), top(sweep={"algorithm": "CMA_ES"}),
     "sweep.algorithm"),
    # unknown keys at every level (§1)
    ("unknown top-level key", top(sweep={}), top(adapters={}), "adapters"),
    ("unknown search_space key", ss(gpu_budget=4), ss(random_field=1), "search_space.random_field"),
    ("unknown workload key", wl(osl=10), wl(qps=3), "workload.qps"),
    ("unknown goal key", top(goal={"target": "throughput"}), top(goal={"target": "throughput", "metric": 1}),
     "goal.metric"),
    ("unknown sla key", top(goal={"target": "throughput", "sla": {"ttft_ms": 1}}),
     top(goal={"target": "throughput", "sla": {"tpot_ms": 1}}), "goal.sla.tpot_ms"),
]


@pytest.mark.parametrize("name,accept,reject,path", CASES, ids=[c[0] for c in CASES])
def test_validator_accepts_and_rejects(name: str, accept: Callable[..., Any], reject: Callable[..., Any],
                                       path: str) -> None:
    SmartSearchConfig.from_dict(cfg(accept))
    err = rejected(reject)
    assert path in paths(err), f"{name}: expected {path} in {paths(err)}"


def test_error_names_value_and_allowed() -> None:
    err = rejected(ss(router_mode=["kv_router", "rr"]))
    text = str(err)
    assert "search_space.router_mode[1]" in text and "'rr'" in text and "round_robin" in text


def test_unknown_key_lists_allowed_keys() -> None:
    err = rejected(wl(qps=3))
    assert "request_rate" in err.issues[0].message


def test_mixed_sla_says_what_is_allowed() -> None:
    err = rejected(top(goal={"target": "goodput_per_gpu", "sla": {"ttft_ms": 500, "e2e_ms": 5000}}))
    (issue,) = err.issues
    assert issue.path == "goal.sla" and issue.value == {"ttft_ms": 500, "e2e_ms": 5000}
    assert "e2e_ms cannot be combined with ttft_ms or itl_ms" in issue.message
    assert "e2e_ms alone, or ttft_ms and/or itl_ms" in issue.message


def test_unknown_predictor_family_lists_the_families() -> None:
    err = rejected(ss(load_predictor_candidates=[{"load_predictor": "lstm"}]))
    (issue,) = err.issues
    assert issue.path == "search_space.load_predictor_candidates[0].load_predictor" and issue.value == "lstm"
    assert all(family in issue.message for family in PREDICTOR_FAMILIES)


def test_pin_for_the_other_mode_shows_what_was_written() -> None:
    disagg_pin = {"prefill": {"tp": 2}, "decode": {"tp": 2}}
    (issue,) = rejected(ss(deployment_mode=["agg"], parallel_configs=[disagg_pin])).issues
    assert issue.path == "search_space.parallel_configs[0]" and issue.value == disagg_pin  # no defaults filled in
    assert "an agg entry must look like {tp: ..." in issue.message
    (issue,) = rejected(ss(deployment_mode=["disagg"], parallel_configs=[{"tp": 2}])).issues
    assert issue.value == {"tp": 2} and "a disagg entry must look like {prefill: " in issue.message


def test_every_problem_is_reported() -> None:
    err = rejected(lambda d: (d["search_space"].update(router_mode=["x"]), d.update(sweep={"max_rounds": 0})))
    assert {"search_space.router_mode[0]", "sweep.max_rounds"} <= set(paths(err))


def test_defaults_and_normalisation() -> None:
    c = SmartSearchConfig.from_dict(cfg(ss(deployment_mode=["agg", "agg", "disagg"], backend=["sglang", "vllm",
                                                                                             "sglang"])))
    s = c.search_space
    assert s.deployment_mode == ["agg", "disagg"]  # de-duplicated, order kept
    assert s.backend == ["sglang", "vllm"]
    d = SmartSearchConfig.from_dict(cfg()).search_space
    assert d.deployment_mode == ["disagg", "agg"] and d.backend == ["vllm"]
    assert d.prefill_max_num_seqs == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert d.prefill_load_scale == [0, 0.25, 0.5, 1, 2, 4, 8, 16, 32]
    assert len(d.planner_scaling_policy) == 7 and len(d.load_predictor_candidates) == 11
    assert (d.prefill_block_size, d.decode_enable_prefix_caching, d.agg_enable_prefix_caching) == (64, False, True)
    c2 = SmartSearchConfig.from_dict(cfg())
    assert (c2.sweep.max_rounds, c2.sweep.parallel_evals, c2.sweep.per_round, c2.sweep.max_eval_seconds) == \
        (20, None, 16, 600.0)
    assert c2.sweep.workers == min(16, len(os.sched_getaffinity(0)))  # one local process per core at most
    assert c2.goal.target.value == "throughput"


def test_pareto_injects_kv_load_ratio_for_synthetic_without_load() -> None:
    c = SmartSearchConfig.from_dict(cfg(lambda d: (d["workload"].pop("concurrency"),
                                                   d.update(goal={"target": "pareto"}))))
    assert c.workload.kv_load_ratio == [0.0, 1.0]
    assert [o.value for o in c.goal.objectives] == ["throughput_per_gpu", "throughput_per_user"]
    # not injected when a load is given, nor for traces
    c2 = SmartSearchConfig.from_dict(cfg(top(goal={"target": "pareto"})))
    assert c2.workload.kv_load_ratio is None and c2.workload.concurrency == 32


def test_typed_objects_not_raw_dicts() -> None:
    c = SmartSearchConfig.from_dict(cfg(ss(deployment_mode=["disagg"], parallel_configs=[
        {"prefill": {"tp": 2}, "decode": {"tp": 4, "replicas": 1, "attention_dp": 1}}])))
    entry = c.search_space.parallel_configs[0]
    assert isinstance(entry, DisaggParallel) and isinstance(entry.decode, ParallelShape)
    assert (entry.prefill.tp, entry.prefill.replicas, entry.decode.tp) == (2, 1, 4)


def test_composite_dict_replaces_preset_without_merge() -> None:
    custom = {"enable_throughput_scaling": True, "enable_load_scaling": False,
              "throughput_adjustment_interval_seconds": 240, "load_adjustment_interval_seconds": 5}
    assert decode_composite("planner_scaling_policy", custom)["throughput_adjustment_interval_seconds"] == 240
    assert decode_composite("planner_scaling_policy", "throughput_180_5")["throughput_adjustment_interval_seconds"] == 180
    assert decode_composite("planner_fpm_sampling", {"max_num_fpm_samples": 8, "fpm_sample_bucket_size": 4}) == \
        {"max_num_fpm_samples": 8, "fpm_sample_bucket_size": 4}
    # load predictor: family defaults fill what a dict omits, and only the family's own knobs appear
    assert predictor_fields({"load_predictor": "kalman"}) == {
        "load_predictor": "kalman", "load_predictor_log1p": False, "kalman_q_level": 1.0, "kalman_q_trend": 0.1,
        "kalman_r": 10.0, "kalman_min_points": 5}
    assert predictor_fields("prophet_w20_log1p") == {"load_predictor": "prophet", "load_predictor_log1p": True,
                                                      "prophet_window_size": 20}
    assert predictor_fields("arima_raw") == {"load_predictor": "arima", "load_predictor_log1p": False}


def test_policy_helpers() -> None:
    custom = {"enable_throughput_scaling": True, "enable_load_scaling": False,
              "throughput_adjustment_interval_seconds": 240, "load_adjustment_interval_seconds": 5}
    kept, dropped = filter_scaling_policies(["disabled", "throughput_180_5", "load_180_5", custom], False)
    assert kept == ["disabled", "load_180_5"] and dropped == ["throughput_180_5", custom]
    kept, dropped = filter_scaling_policies(["disabled", "throughput_180_5"], True)
    assert kept == ["disabled", "throughput_180_5"] and dropped == []
    assert throughput_intervals(["hybrid_600_5", "throughput_180_5", "load_180_10", custom, "hybrid_180_5"]) == \
        [180, 240, 600]
    assert throughput_intervals(["disabled", "load_180_5"]) == []


@pytest.mark.parametrize("goal,kept", [
    ({"target": "throughput"}, ["disabled", "load_180_5"]),
    ({"target": "e2e_latency"}, ["disabled", "load_180_5"]),
    ({"target": "goodput", "sla": {"ttft_ms": 500, "itl_ms": 20}}, ["disabled", "load_180_5", "hybrid_180_5"]),
    ({"target": "goodput", "sla": {"e2e_ms": 5000}}, ["disabled"]),
    ({"target": "pareto"}, ["disabled", "load_180_5"]),
])
def test_policy_filter_by_goal(goal: dict[str, Any], kept: list[str]) -> None:
    c = SmartSearchConfig.from_dict(cfg(lambda d: (d["search_space"].update(
        planner_scaling_policy=["disabled", "load_180_5", "hybrid_180_5"]), d.update(goal=goal))))
    assert filter_for_goal(c).kept == kept


def test_policy_filter_reason_names_what_the_sla_lacks() -> None:
    c = SmartSearchConfig.from_dict(cfg(lambda d: (d["search_space"].update(
        planner_scaling_policy=["disabled", "load_180_5"]), d.update(goal={"target": "goodput",
                                                                           "sla": {"e2e_ms": 5000}}))))
    assert "goal.sla has no ttft_ms or itl_ms" in filter_for_goal(c).reason
    # a TTFT-only SLA (which validation refuses for goodput) lacks ITL, not TTFT: never "e2e-only"
    ttft_only = c.model_copy(update={"goal": c.goal.model_copy(update={"sla": SLATarget(ttft_ms=500)})})
    reason = filter_for_goal(ttft_only).reason
    assert "goal.sla has no itl_ms;" in reason and "e2e" not in reason


def test_policy_filter_error_when_nothing_survives() -> None:
    c = SmartSearchConfig.from_dict(cfg(ss(planner_scaling_policy=["throughput_180_5"])))
    with pytest.raises(SpicaError, match="planner_scaling_policy"):
        filter_for_goal(c)
