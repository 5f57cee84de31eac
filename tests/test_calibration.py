"""Calibration: the fit (own quantiles, shrunk ratios), the file, calibrated scoring from the replay's requests,
the run's identity, and `spica show --calibration` / `spica evaluate --calibration`."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from spica_cli.main import main as spica
from spica_core.calibrate import GroupedRow, fit_calibration, shrinkage
from spica_core.config.model import SmartSearchConfig
from spica_core.errors import CalibrationFileError, ConfigError
from spica_core.evaluate import (
    BandTable, Calibration, MeasuredRow, Ratio, RequestLatencies, calibrated, calibrated_report, evaluate_one,
    load_bands, load_calibration, pinned_request, write_calibration,
)
from spica_core.run.identity import identify
from spica_core.run.inputs import load_inputs
from spica_core.search import recalibrated
from spica_core.search.trials import Trial

MODEL, SKU, BACKEND = "Qwen/Qwen3-32B", "h200_sxm", "vllm"
SLA = {"ttft_ms": 2000, "itl_ms": 40}


def _row(i: int, ttft: float, itl: float, predicted: tuple[float, float] = (100.0, 10.0)) -> GroupedRow:
    return GroupedRow(MODEL, SKU, BACKEND, MeasuredRow(f"r{i}", f"m.csv:{i + 2}", {"ttft_ms": ttft, "itl_ms": itl},
                                                       {"ttft_ms": predicted[0], "itl_ms": predicted[1]}))


def _table() -> BandTable:
    """A band table whose per-model groups give sigma2 and tau2 that are easy to check."""
    def ratio(key: str, p10: float, p50: float, p90: float, rows: int = 20) -> Ratio:
        return Ratio(key, rows, p10, p50, p90)

    groups = {"model=a;system=s;backend=vllm": ratio("a", 0.5, 1.0, 2.0), "model=b;system=s;backend=vllm": ratio(
        "b", 1.0, 2.0, 4.0), "backend=vllm": ratio("backend=vllm", 0.5, 1.0, 2.0), "all": ratio("all", 0.6, 1.2, 2.4)}
    return BandTable("test", "", 10, {"ttft_ms": groups, "itl_ms": groups})


# ---------------------------------------------------------------- the fit


def test_shrinkage_comes_from_the_band_files_per_model_groups() -> None:
    s = shrinkage(_table(), "ttft_ms")
    z = 1.2815515655446004
    assert s.sigma2 == pytest.approx((math.log(4.0) / (2 * z)) ** 2)      # both groups span ×4 from p10 to p90
    assert s.tau2 == pytest.approx(np.var([0.0, math.log(2.0)], ddof=1))   # their medians: ×1 and ×2
    assert s.weight(1) == pytest.approx(1 / (1 + s.sigma2 / s.tau2))
    assert s.weight(1) < s.weight(2) < 1


def test_one_or_two_rows_give_a_shrunk_correction_between_the_prior_and_what_they_measured() -> None:
    table = _table()
    s = shrinkage(table, "ttft_ms")
    one = fit_calibration([_row(0, 300.0, 10.0)], table).groups[f"model={MODEL};system={SKU};backend={BACKEND}"]
    m = 1.2                                                          # the group falls back to every row's band
    ttft = one.metrics["ttft_ms"]
    assert ttft.method == "shrunk" and ttft.rows == 1
    assert ttft.correction == pytest.approx(math.exp(math.log(m) + s.weight(1) * (math.log(3.0) - math.log(m))))
    assert m < ttft.correction < 3.0
    assert ttft.ratio.p50 == pytest.approx(ttft.correction)           # the shipped spread, centred on it
    assert ttft.ratio.p90 / ttft.ratio.p10 == pytest.approx(2.4 / 0.6)
    two = fit_calibration([_row(0, 300.0, 10.0), _row(1, 300.0, 10.0)], table).groups[one.key]
    assert ttft.correction < two.metrics["ttft_ms"].correction < 3.0   # more rows, less shrinking


def test_ten_rows_get_their_own_median_and_quantiles_never_narrower_than_the_shipped_spread() -> None:
    ttfts = (150.0, 160.0, 170.0, 180.0, 190.0, 200.0, 210.0, 220.0, 230.0, 400.0)
    rows = [_row(i, t, 12.0) for i, t in enumerate(ttfts)]
    group = fit_calibration(rows, _table()).groups[f"model={MODEL};system={SKU};backend={BACKEND}"]
    ttft = group.metrics["ttft_ms"]
    assert (ttft.method, ttft.weight, ttft.rows) == ("own", 1.0, 10)
    assert ttft.correction == pytest.approx(np.median(ttfts) / 100)
    own_p90 = np.percentile([t / 100 for t in ttfts], 90)
    assert ttft.ratio.p90 == pytest.approx(max(own_p90, ttft.correction * 2.4 / 1.2))   # the shipped ×2 above p50
    assert ttft.ratio.p10 == pytest.approx(ttft.correction * 0.6 / 1.2)                 # own p10 is narrower
    assert group.metrics["itl_ms"].correction == pytest.approx(1.2)
    assert [r.id for r in group.rows] == [f"r{i}" for i in range(10)]
    nine = fit_calibration(rows[:9], _table()).groups[group.key].metrics["ttft_ms"]
    assert nine.method == "shrunk" and nine.weight == pytest.approx(shrinkage(_table(), "ttft_ms").weight(9))


def test_a_calibration_file_round_trips_and_its_fingerprint_is_its_content(tmp_path: Path) -> None:
    cal = fit_calibration([_row(0, 300.0, 11.0)], load_bands())
    a = load_calibration(write_calibration(cal, tmp_path / "a.json"))
    b = load_calibration(write_calibration(cal, tmp_path / "b.json"))
    assert a.fingerprint == b.fingerprint == cal.fingerprint and a.path != b.path
    assert a.corrections(MODEL, SKU, BACKEND) == pytest.approx(cal.corrections(MODEL, SKU, BACKEND))
    assert a.corrections(MODEL, "h100_sxm", BACKEND) == {}             # a group it did not measure
    other = fit_calibration([_row(0, 310.0, 11.0)], load_bands())
    assert other.fingerprint != cal.fingerprint


def test_a_broken_calibration_file_is_refused_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "something-else"}')
    with pytest.raises(CalibrationFileError, match="bad.json.*not a Spica calibration"):
        load_calibration(bad)
    with pytest.raises(CalibrationFileError, match="missing.json"):
        load_calibration(tmp_path / "missing.json")


# ---------------------------------------------------------------- scoring from the requests


def _requests(ttft: list[float], itl: list[float], osl: int = 100) -> RequestLatencies:
    rows = [{"ttft_ms": t, "itl_ms": i, "e2e_latency_ms": t + i * (osl - 1), "output_length": osl}
            for t, i in zip(ttft, itl)]
    return RequestLatencies.of(rows)


def test_calibrated_report_scales_latencies_and_counts_the_sla_again() -> None:
    req = _requests([100, 1500, 1900, 2500], [10, 20, 30, 39])
    report = {"mean_ttft_ms": 1500.0, "p99_ttft_ms": 2480.0, "mean_itl_ms": 25.0, "mean_tpot_ms": 25.0,
              "mean_e2e_latency_ms": float(req.e2e_ms.mean()), "duration_ms": 10_000.0,
              "output_throughput_tok_s": 40.0, "goodput_completed_requests": 3,
              "goodput_output_throughput_tok_s": 30.0, "mean_output_token_throughput_per_user": 40.0}
    out = calibrated_report(report, req, {"ttft_ms": 1.1, "itl_ms": 1.05}, SLA, {"ttft_ms": 1.1, "itl_ms": 1.05},
                            closed_loop=False)
    assert out["mean_ttft_ms"] == pytest.approx(1650.0) and out["p99_ttft_ms"] == pytest.approx(2728.0)
    assert out["mean_itl_ms"] == pytest.approx(26.25) and out["mean_output_token_throughput_per_user"] == \
        pytest.approx(40.0 / 1.05)
    # 100 and 1500 ms × 1.1 stay within 2 s; 1900 × 1.1 does not; 39 ms × 1.05 > 40 ms
    assert out["goodput_completed_requests"] == 2
    assert out["goodput_output_throughput_tok_s"] == pytest.approx(200 / 10.0)
    assert out["duration_ms"] == 10_000.0 and out["output_throughput_tok_s"] == 40.0   # an open loop keeps time
    new_e2e = 1.1 * req.ttft_ms + 1.05 * (req.e2e_ms - req.ttft_ms)
    assert out["mean_e2e_latency_ms"] == pytest.approx(new_e2e.mean())
    closed = calibrated_report({**report, "gpu_hours": 2.0, "decode_worker_seconds": 3600.0}, req,
                               {"ttft_ms": 1.1, "itl_ms": 1.05}, SLA, {}, closed_loop=True)
    stretch = new_e2e.mean() / req.e2e_ms.mean()
    assert closed["duration_ms"] == pytest.approx(10_000.0 * stretch)
    assert closed["gpu_hours"] == pytest.approx(2.0 * stretch)          # cost and energy read the GPU time
    assert closed["decode_worker_seconds"] == pytest.approx(3600.0 * stretch)
    assert closed["output_throughput_tok_s"] == pytest.approx(40.0 / stretch)


def _pinned(tmp_path: Path, calibration: str | None = None, **goal: Any) -> Path:
    body = {"search_space": {"model_name": MODEL, "hardware_sku": SKU, "gpu_budget": 8, "deployment_mode": ["agg"],
                             "backend": [BACKEND], "parallel_configs": [{"tp": 2, "replicas": 1}],
                             "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192],
                             "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"]},
            "workload": {"isl": 2000, "osl": 200, "length_spread": 0.2, "concurrency": 16, "num_request_ratio": 4},
            "goal": {"target": "goodput", "sla": {"ttft_ms": 1000, "itl_ms": 30}, **goal},
            "sweep": {"parallel_evals": 1}}
    if calibration is not None:
        body["goal"]["calibration"] = calibration
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = _pinned(tmp_path_factory.mktemp("pinned"))
    config = load_inputs(path).config
    return config, evaluate_one(pinned_request(config, path.parent))


def test_the_kept_requests_recount_the_replays_own_goodput_exactly(replayed: Any) -> None:
    config, outcome = replayed
    assert outcome.feasible and len(outcome.requests) == outcome.metrics["num_requests"] == 64
    cal = Calibration({})       # measures nothing: every number stays the replay's
    same = calibrated(outcome, config.goal, cal, closed_loop=True)
    assert same.metrics == pytest.approx(outcome.metrics) and same.score == pytest.approx(outcome.score)
    assert same.calibration is not None and same.calibration.group is None


def test_a_measured_group_moves_the_score_the_way_its_correction_says(replayed: Any, tmp_path: Path) -> None:
    config, outcome = replayed
    slow = fit_calibration([_row(i, 3 * outcome.metrics["mean_ttft_ms"], 1.5 * outcome.metrics["mean_itl_ms"],
                                 (outcome.metrics["mean_ttft_ms"], outcome.metrics["mean_itl_ms"]))
                            for i in range(10)], load_bands(), str(tmp_path / "slow.json"))
    out = calibrated(outcome, config.goal, slow, closed_loop=True)
    assert out.metrics["mean_ttft_ms"] == pytest.approx(3 * outcome.metrics["mean_ttft_ms"])
    assert out.uncalibrated == outcome.metrics
    good = int(np.sum((3 * outcome.requests.ttft_ms <= 1000) & (1.5 * outcome.requests.itl_ms <= 30)))
    assert out.metrics["goodput_completed_requests"] == good < outcome.metrics["goodput_completed_requests"]
    assert out.score < outcome.score
    assert out.calibration.to_dict() == {"file": str(tmp_path / "slow.json"),
                                         "group": f"model={MODEL};system={SKU};backend={BACKEND}", "rows": 10}
    assert out.bands["ttft_ms"].p50 == pytest.approx(out.metrics["mean_ttft_ms"])


def test_a_stored_trial_scored_again_equals_the_evaluation_under_the_calibration(replayed: Any,
                                                                                tmp_path: Path) -> None:
    config, outcome = replayed
    cal = fit_calibration([_row(0, 2 * outcome.metrics["mean_ttft_ms"], outcome.metrics["mean_itl_ms"],
                                (outcome.metrics["mean_ttft_ms"], outcome.metrics["mean_itl_ms"]))],
                          load_bands(), "c.json")
    from spica_core.space.parallel import ParallelConfig

    trial = Trial("agg", 0, 0, outcome.status, ParallelConfig.from_dict("agg", {"tp": 2, "replicas": 1}), {}, {},
                  candidate=outcome.candidate, score=outcome.score, metrics=dict(outcome.metrics),
                  bands=dict(outcome.bands), requests=outcome.requests)
    stored = Trial.from_row(trial.to_row())
    assert stored.requests == outcome.requests
    [again] = recalibrated([stored], config, cal)
    direct = calibrated(outcome, config.goal, cal, closed_loop=True)
    assert again.score == pytest.approx(direct.score) and again.metrics == pytest.approx(direct.metrics)
    assert Trial.from_row(again.to_row()).calibration == direct.calibration
    with pytest.raises(CalibrationFileError, match="per-request"):
        recalibrated([replace(stored, requests=None)], config, cal)


# ---------------------------------------------------------------- the run's identity and the config


def test_a_calibration_joins_the_run_identity_by_its_content(tmp_path: Path) -> None:
    cal = fit_calibration([_row(0, 300.0, 11.0)], load_bands())
    a, b = write_calibration(cal, tmp_path / "a.json"), write_calibration(cal, tmp_path / "b.json")
    plain = load_inputs(_pinned(tmp_path)).config
    first = identify(load_inputs(_pinned(tmp_path, str(a))).config, None, load_calibration(a))
    assert first.run_id == identify(load_inputs(_pinned(tmp_path, str(b))).config, None, load_calibration(b)).run_id
    assert first.run_id != identify(plain, None).run_id
    assert first.uncalibrated_run_id == identify(plain, None).run_id


def test_goal_calibration_resolves_against_the_config_file_and_a_missing_file_names_the_field(tmp_path: Path,
                                                                                         capsys: Any) -> None:
    write_calibration(fit_calibration([_row(0, 300.0, 11.0)], load_bands()), tmp_path / "mine.json")
    assert load_inputs(_pinned(tmp_path, "mine.json")).calibration is not None
    with pytest.raises(ConfigError, match="goal.calibration"):
        load_inputs(_pinned(tmp_path, "nowhere.json"))
    assert spica(["evaluate", str(_pinned(tmp_path)), "--calibration", str(tmp_path / "nowhere.json")]) == 2
    assert "goal.calibration" in capsys.readouterr().err


def test_spica_evaluate_prints_the_calibrated_and_the_replayed_numbers(replayed: Any, tmp_path: Path,
                                                                        capsys: Any) -> None:
    _, outcome = replayed
    path = write_calibration(fit_calibration([_row(i, 2 * outcome.metrics["mean_ttft_ms"], outcome.metrics[
        "mean_itl_ms"], (outcome.metrics["mean_ttft_ms"], outcome.metrics["mean_itl_ms"])) for i in range(10)],
        load_bands()), tmp_path / "cal.json")
    assert spica(["evaluate", str(_pinned(tmp_path)), "--json", "--calibration", str(path)]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["calibration"] == {"file": str(path.resolve()), "rows": 10,
                                   "group": f"model={MODEL};system={SKU};backend={BACKEND}"}
    assert body["metrics"]["mean_ttft_ms"] == pytest.approx(2 * body["uncalibrated_metrics"]["mean_ttft_ms"])
