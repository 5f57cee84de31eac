"""Error bands: the group fallback, the quantile arithmetic, the band on every evaluation, sla_confidence,
and the clear errors for a bad band file or confidence."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.config.model import SmartSearchConfig
from spica_core.errors import BandFileError
from spica_core.evaluate import EvalRequest, evaluate_one
from spica_core.evaluate.bands import BAND_FILE, load_bands
from spica_core.deployment import Candidate
from spica_core.evaluate.scoring import sla_kwargs
from spica_core.space.parallel import ParallelConfig

MODEL, SKU = "Qwen/Qwen3-32B", "h200_sxm"


def ratio(p10: float, p50: float, p90: float, rows: int, **more: float) -> dict[str, Any]:
    return {"p10": p10, "p50": p50, "p90": p90, "rows": rows, **more}


def band_file(tmp_path: Path, itl_p90: float = 1.3) -> Path:
    doc = {"schema": 1, "aic_version": "0.12.0", "min_rows": 10, "bands": {
        "ttft_ms": {"all": ratio(0.4, 0.6, 0.9, 100), "backend=vllm": ratio(0.5, 0.8, 1.1, 12)},   # older files carry it
        "itl_ms": {"all": ratio(0.9, 1.1, itl_p90, 100, p95=itl_p90 + 0.1, p99=itl_p90 + 0.3),
                   f"model={MODEL};system={SKU};backend=vllm": ratio(1.0, 1.2, 1.5, 3)},   # too few rows
    }}
    path = tmp_path / "bands.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_group_falls_back_to_the_first_with_enough_rows(tmp_path: Path) -> None:
    table = load_bands(band_file(tmp_path))
    assert table.ratio("ttft_ms", MODEL, SKU, "vllm").group == "all"   # a backend's group is never consulted
    assert table.ratio("itl_ms", MODEL, SKU, "vllm").group == "all"    # the model's own group has 3 rows
    assert table.ratio("ttft_ms", MODEL, SKU, "sglang").group == "all"
    bands = table.bands(MODEL, SKU, "vllm", {"mean_ttft_ms": 100.0, "mean_itl_ms": 20.0})
    assert bands["ttft_ms"].p10 == pytest.approx(40.0) and bands["ttft_ms"].p90 == pytest.approx(90.0)
    assert bands["itl_ms"].p50 == pytest.approx(22.0) and bands["itl_ms"].rows == 100


def test_the_sla_factor_is_one_at_the_point_prediction_and_a_quantile_above(tmp_path: Path) -> None:
    r = load_bands(band_file(tmp_path)).ratio("itl_ms", MODEL, SKU, "vllm")
    assert r.factor(0.5) == 1.0
    assert r.factor(0.9) == pytest.approx(1.3)
    assert r.factor(0.925) == pytest.approx(1.35)       # halfway from p90 to p95
    assert r.factor(0.99) == pytest.approx(1.6)
    ttft = load_bands(band_file(tmp_path)).ratio("ttft_ms", MODEL, SKU, "vllm")
    assert ttft.factor(0.9) == 1.0                       # an over-prediction never loosens the SLA


def test_the_replay_gets_the_sla_divided_by_the_factor() -> None:
    goal = SmartSearchConfig.from_dict({
        "search_space": {"model_name": MODEL, "hardware_sku": SKU},
        "workload": {"isl": 100, "osl": 10, "concurrency": 4, "num_request_ratio": 2},
        "goal": {"target": "goodput", "sla": {"ttft_ms": 500, "itl_ms": 26}, "sla_confidence": 0.9}}).goal
    assert sla_kwargs(goal, {"ttft_ms": 1.0, "itl_ms": 1.3}) == {"sla_ttft_ms": 500.0, "sla_itl_ms": 20.0}
    assert sla_kwargs(goal) == {"sla_ttft_ms": 500.0, "sla_itl_ms": 26.0}


def _edge_request(confidence: float) -> tuple[EvalRequest, float]:
    """4 × TP2 under an ITL SLA a few percent above its own mean ITL: near the SLA's edge."""
    data = {"search_space": {"model_name": MODEL, "hardware_sku": SKU, "gpu_budget": 8, "deployment_mode": ["agg"],
                             "backend": ["vllm"], "router_mode": ["round_robin"],
                             "planner_scaling_policy": ["disabled"], "agg_max_num_seqs": [256],
                             "agg_max_num_batched_tokens": [8192]},
            "workload": {"isl": 2000, "osl": 200, "concurrency": 48, "num_request_ratio": 4},
            "goal": {"target": "goodput", "sla": {"ttft_ms": 5000, "itl_ms": 1000}}}
    config = SmartSearchConfig.from_dict(data)
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2,
                                                                                                           "replicas": 4}))
    itl = evaluate_one(EvalRequest.from_config(config, cand)).metrics["mean_itl_ms"]
    data["goal"] = {"target": "goodput", "sla": {"ttft_ms": 5000, "itl_ms": round(itl * 1.1, 3)},
                    "sla_confidence": confidence}
    config = SmartSearchConfig.from_dict(data)
    return EvalRequest.from_config(config, cand), itl


@pytest.mark.slow
def test_a_higher_confidence_lowers_the_score_of_a_candidate_near_the_sla_edge(tmp_path: Path,
                                                                              monkeypatch: Any) -> None:
    monkeypatch.setenv("SPICA_BANDS_FILE", str(band_file(tmp_path)))
    point, _ = _edge_request(0.5)
    sure, _ = _edge_request(0.9)
    at_point, at_sure = evaluate_one(point), evaluate_one(sure)
    assert at_point.feasible and at_sure.feasible
    assert at_sure.score < 0.8 * at_point.score       # ITL × 1.3 no longer meets an SLA 10 % above the mean
    for outcome in (at_point, at_sure):               # the band rides on every evaluation
        assert set(outcome.bands) == {"ttft_ms", "itl_ms"}
        assert outcome.bands["itl_ms"].p90 == pytest.approx(outcome.metrics["mean_itl_ms"] * 1.3)


def test_the_shipped_band_file_loads_and_covers_every_metric() -> None:
    table = load_bands(BAND_FILE)
    assert table.aic_version == "0.12.0"
    for metric in ("ttft_ms", "itl_ms"):
        assert table.ratios[metric]["all"].rows >= 1000


BAD_FILES = [
    ("SPICA_BANDS_FILE", None, "is missing"),
    ("SPICA_BANDS_FILE", "{not json", "is unreadable"),
    ("SPICA_BANDS_FILE", '{"schema": 1, "bands": {"ttft_ms": {"all": {"p10": 1, "p50": 1, "p90": 1, "rows": 5}}}}',
     "bands.itl_ms must be a mapping"),
    ("SPICA_BANDS_FILE", '{"schema": 1, "bands": {"ttft_ms": {"all": {"p10": -1, "p50": 1, "p90": 1, "rows": 5}}, '
     '"itl_ms": {"all": {"p10": 1, "p50": 1, "p90": 1, "rows": 5}}}}', "positive finite"),
    ("SPICA_SERVING_FILE", None, "is missing"),
    ("SPICA_SERVING_FILE", "[1, 2", "is unreadable"),
    ("SPICA_SERVING_FILE", '{"schema": 2, "request_overhead_ms": {}}', "schema-1 serving file"),
    ("SPICA_SERVING_FILE", '{"schema": 1, "request_overhead_ms": {"vllm": {"ms": -5}}}',
     "request_overhead_ms['vllm']"),
    ("SPICA_SERVING_FILE", '{"schema": 1, "request_overhead_ms": {"vllm": {"ms": 5}}}', "start_window_ms needs"),
    ("SPICA_SERVING_FILE", '{"schema": 1, "request_overhead_ms": {}, "start_window_ms": {"ms": -1}}',
     "start_window_ms needs"),
]


@pytest.mark.parametrize("env,text,needle", BAD_FILES)
def test_a_bad_accuracy_file_exits_2_naming_it(tmp_path: Path, capsys: Any, monkeypatch: Any, env: str,
                                               text: str | None, needle: str) -> None:
    """The band file and the serving file ship with the package; a broken one stops every command."""
    from spica_core.evaluate.serving import load_serving

    path = tmp_path / "accuracy-data.json"
    if text is not None:
        path.write_text(text)
    monkeypatch.setenv(env, str(path))
    with pytest.raises(BandFileError) as caught:
        (load_bands if env == "SPICA_BANDS_FILE" else load_serving)()
    assert needle in str(caught.value)
    config = tmp_path / "c.yaml"
    config.write_text(f"search_space: {{model_name: {MODEL}, hardware_sku: {SKU}}}\n"
                      "workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}\n")
    assert spica(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and needle in err and "Traceback" not in err


@pytest.mark.parametrize("value", [0.4, 1.0, "high", True])
def test_an_out_of_range_confidence_exits_2_naming_the_field(tmp_path: Path, capsys: Any, value: Any) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"search_space: {{model_name: {MODEL}, hardware_sku: {SKU}}}\n"
                      "workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}\n"
                      f"goal: {{target: goodput, sla: {{ttft_ms: 500, itl_ms: 30}}, sla_confidence: {json.dumps(value)}}}\n")
    assert spica(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "goal.sla_confidence" in err and "Traceback" not in err
