"""One real call of each engine Spica stands on, with the pinned versions."""
from __future__ import annotations

from importlib import metadata

from spica_core.space.params import Param
from spica_core.search.study import Study


def test_pinned_versions() -> None:
    assert metadata.version("ai-dynamo-runtime") == "1.6.1"
    assert metadata.version("aiconfigurator-core") == "0.12.0"
    assert metadata.version("google-vizier") == "0.1.24"
    assert metadata.version("prefect") == "3.9.1"
    assert metadata.version("jax").startswith("0.5.")  # Vizier's equinox pin breaks on jax >= 0.6


def test_one_replay_of_a_tiny_synthetic_workload() -> None:
    import dynamo._core as dc

    summary = dict(dc.run_mocker_synthetic_trace_replay(
        512, 16, 8, replay_concurrency=2, num_workers=1,
        extra_engine_args={"engine": {"num_gpu_blocks": 1024, "block_size": 64,
                                      "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 2.0}}},
    ).summary)
    assert summary["completed_requests"] == 8 and summary["total_output_tokens"] == 8 * 16


def test_one_aiconfigurator_kv_estimate() -> None:
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    r = estimate_kv_cache("Qwen/Qwen3-32B", "h200_sxm", "vllm", "current", max_num_tokens=8192, max_batch_size=256,
                          memory_fraction_kind="of_total", memory_fraction_value=0.9, tp_size=2)
    assert r["kv_size_per_token_bytes"] == 131072  # 2 × 8 KV heads / 2 × 128 × 64 layers × 2 bytes
    assert 700_000 < r["total_kv_size_tokens"] < 800_000


# A pool strictly between the trials' x values, so every pick is a candidate the study has not seen.
_POOL = [{"x": round(0.025 + 0.05 * i, 3)} for i in range(20)]


def _gp_study(peak: float) -> Study:
    """A GP bandit that has seen x = 0, 0.1, ..., 1 under a parabola peaking at ``peak``."""
    study = Study([Param("x", "float", bounds=(0.0, 1.0))], algorithm="GAUSSIAN_PROCESS_BANDIT", seed=0)
    for i in range(11):
        study.complete({"x": i / 10}, {"objective": 1.0 - 4 * (i / 10 - peak) ** 2})
    return study


def _picks(study: Study) -> list[float]:
    return [_POOL[p]["x"] for p in study.suggest(3, step=0, pool=_POOL)]


def test_one_vizier_suggest_picks_where_the_trials_were_best() -> None:
    """Random picks would all land within 0.1 of the peak once in about 300 asks (4 of the 20 pool points)."""
    near_08 = _picks(_gp_study(0.8))
    assert all(abs(x - 0.8) < 0.1 for x in near_08), near_08
    assert _picks(_gp_study(0.8)) == near_08       # same seed, trials and step: the same picks from a new study
    near_02 = _picks(_gp_study(0.2))               # other trials: other picks
    assert all(abs(x - 0.2) < 0.1 for x in near_02), near_02
