"""Load-predictor sub-sweep (reference §8): windows, loss, predictor families, triggers, winners."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spica_core.config.knobs import PREDICTOR_FAMILIES
from spica_core.config.model import SmartSearchConfig
from spica_core.predictors import (
    FALLBACK_ENTRY,
    FAMILIES,
    REASON_NO_THROUGHPUT,
    REASON_STATIC,
    ArimaPredictor,
    ConstantPredictor,
    KalmanPredictor,
    LoadPredictorResult,
    ProphetPredictor,
    Window,
    build_windows,
    common_warmup,
    entry_fields,
    evaluate_entry,
    log_error,
    make_predictor,
    pick_winner,
    sweep_load_predictor,
    sweep_windows,
    window_loss,
)
from spica_core.run.catalog import LOAD_PREDICTOR_SCHEMA
from examples.make_traces import write_sine_trace


def _write_rows(path: Path, rows: list[tuple[float, int, int]]) -> Path:
    with path.open("w") as fh:
        for ts, isl, osl in rows:
            fh.write(json.dumps({"timestamp": ts, "input_length": isl, "output_length": osl}) + "\n")
    return path


def _trace_config(trace: Path, candidates: list[Any] | None = None) -> SmartSearchConfig:
    space: dict[str, Any] = {"model_name": "m", "hardware_sku": "h200_sxm"}
    if candidates is not None:
        space["load_predictor_candidates"] = candidates
    return SmartSearchConfig.from_dict({"search_space": space, "workload": {"trace_path": str(trace)}})


def _synthetic_config() -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({
        "search_space": {"model_name": "m", "hardware_sku": "h200_sxm"},
        "workload": {"isl": 4000, "osl": 200, "request_rate": 5.0, "num_request_ratio": 10.0},
    })


# ---------------------------------------------------------------- loss (§8.4)


def test_log_error_clips_negative_and_is_symmetric() -> None:
    assert log_error(-5.0, 0.0) == 0.0
    assert log_error(9.0, 0.0) == pytest.approx(math.log(10.0))
    assert log_error(0.0, 9.0) == pytest.approx(math.log(10.0))


def test_window_loss_hand_computed() -> None:
    # predicted (N, I, O) = (2, 100, 10); actual (4, 200, 20)
    expected = (0.4 * math.log(801 / 201) + 0.4 * math.log(81 / 21)
                + 0.1 * math.log(201 / 101) + 0.1 * math.log(21 / 11))
    assert window_loss(2, 100, 10, 4, 200, 20) == pytest.approx(expected)
    assert window_loss(2, 100, 10, 4, 200, 20) == pytest.approx(1.226479, abs=1e-5)


def test_window_loss_exact_and_empty_windows() -> None:
    assert window_loss(3, 100, 10, 3, 100, 10) == 0.0
    assert window_loss(0, 0, 0, 0, 0, 0) == 0.0
    # predicting traffic during an empty middle window is penalised
    lull = 0.4 * math.log(501) + 0.4 * math.log(51) + 0.1 * math.log(101) + 0.1 * math.log(11)
    assert window_loss(5, 100, 10, 0, 0, 0) == pytest.approx(lull)


def test_window_loss_num_req_only_through_products() -> None:
    # n off by 2x with I, O exact: only the two product terms move
    expected = 0.4 * math.log(201 / 101) + 0.4 * math.log(21 / 11)
    assert window_loss(2, 100, 10, 1, 100, 10) == pytest.approx(expected)


# ---------------------------------------------------------------- windows (§8.2)


def test_windows_include_empty_middle_and_drop_leading(tmp_path: Path) -> None:
    trace = _write_rows(tmp_path / "t.jsonl", [
        (61_000, 100, 10), (119_999, 300, 30),      # bucket 1 (60-120 s)
        (250_000, 10, 1), (185_000, 50, 5),         # buckets 4 and 3, out of order
        (239_999.9, 30, 3),                         # bucket 3
    ])
    windows = build_windows(trace, 60)
    assert windows == [
        Window(2, 200.0, 20.0, 60.0),
        Window(0, 0.0, 0.0, 120.0),                 # empty middle bucket kept
        Window(2, 40.0, 4.0, 180.0),
        Window(1, 10.0, 1.0, 240.0),
    ]


def test_windows_accept_mooncake_aliases(tmp_path: Path) -> None:
    path = tmp_path / "alias.jsonl"
    path.write_text(json.dumps({"created_time": 500.0, "input_tokens": 7, "output_tokens": 3}) + "\n\n")
    assert build_windows(path, 180) == [Window(1, 7.0, 3.0, 0.0)]


def test_windows_of_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    assert build_windows(path, 180) == []


# ---------------------------------------------------------------- predictors (§8.5)


def test_predictors_skip_leading_zeros_and_treat_nan_as_zero() -> None:
    p = ConstantPredictor()
    for v in (0.0, float("nan"), 0.0):
        p.add_data_point(v)
    assert p.values == [] and p.predict_next() == 0.0
    p.add_data_point(5.0)
    p.add_data_point(float("nan"))   # after traffic started, NaN is a real 0 reading
    assert p.values == [5.0, 0.0]
    assert p.predict_next() == 0.0


def test_kalman_hand_computed_two_points() -> None:
    # P0 = 1000 I, Q = diag(1, 0.1), R = 10. After z1=10, z2=20:
    # prior P00 = 2001, P10 = 1000, S = 2011 -> level = 10 + 10*2001/2011, trend = 10*1000/2011
    k = KalmanPredictor(q_level=1.0, q_trend=0.1, r=10.0, min_points=2)
    k.add_data_point(10.0)
    assert k.predict_next() == 10.0            # not warm: last value, state untouched
    k.add_data_point(20.0)
    expected = 10 + 10 * 2001 / 2011 + 10 * 1000 / 2011
    assert k.predict_next() == pytest.approx(expected)
    assert k.predict_next() == pytest.approx(expected)   # cached: no second advance


def test_kalman_forecast_advances_state_once_per_interval() -> None:
    # A warm forecast runs the predict step; the next observation must then only update, so the
    # result equals the two-point hand computation above (a second predict would inflate P).
    k = KalmanPredictor(q_level=1.0, q_trend=0.1, r=10.0, min_points=1)
    k.add_data_point(10.0)
    assert k.predict_next() == pytest.approx(10.0)
    k.add_data_point(20.0)
    assert k.predict_next() == pytest.approx(10 + 10 * 2001 / 2011 + 10 * 1000 / 2011)


def test_kalman_tracks_constant_and_ramp() -> None:
    flat = KalmanPredictor(min_points=3)
    for _ in range(6):
        flat.add_data_point(42.0)
    assert flat.predict_next() == pytest.approx(42.0)
    ramp = KalmanPredictor(min_points=5)
    for v in range(10, 110, 10):
        ramp.predict_next()        # interleaved forecasts, as in the sweep
        ramp.add_data_point(float(v))
    assert ramp.predict_next() == pytest.approx(110.0, rel=0.05)


def test_kalman_log1p_mode_stays_non_negative() -> None:
    k = KalmanPredictor(log1p=True, min_points=2)
    for v in (100.0, 10.0, 1.0, 0.0, 0.0):
        k.add_data_point(v)
    assert k.predict_next() >= 0.0


def test_arima_constant_series_returns_constant_without_fit() -> None:
    a = ArimaPredictor()
    for _ in range(6):
        a.add_data_point(7.0)
    assert a.predict_next() == 7.0
    assert a._model is None


def test_arima_warm_up_then_fits_and_updates() -> None:
    a = ArimaPredictor()
    series = [10.0, 12.0, 9.0, 14.0, 11.0, 13.0, 10.0, 12.0]
    for v in series[:4]:
        a.add_data_point(v)
    assert a.predict_next() == 14.0            # 4 < 5 points: last value
    for v in series[4:]:
        a.add_data_point(v)
    first = a.predict_next()
    assert a._model is not None and math.isfinite(first) and first >= 0.0
    a.add_data_point(11.0)
    second = a.predict_next()
    assert a._fitted == len(series) + 1         # incremental update consumed the new point
    assert 5.0 < second < 20.0


def test_prophet_follows_a_ramp() -> None:
    p = ProphetPredictor(window_size=20, interval_s=180)
    for v in range(100, 1100, 100):
        p.add_data_point(float(v))
    assert p.predict_next() == pytest.approx(1100.0, rel=0.1)


def test_prophet_window_is_bounded() -> None:
    p = ProphetPredictor(window_size=5, interval_s=60)
    for v in range(1, 9):
        p.add_data_point(float(v))
    assert [v for _, v in p._window] == [4.0, 5.0, 6.0, 7.0, 8.0]


def test_registry_holds_exactly_the_configured_families() -> None:
    assert tuple(FAMILIES) == PREDICTOR_FAMILIES


def test_make_predictor_builds_each_family_from_its_entry_fields() -> None:
    constant = make_predictor(entry_fields("constant_last"), 180)
    assert type(constant) is ConstantPredictor and not constant.log1p
    arima = make_predictor(entry_fields("arima_log1p"), 180)
    assert type(arima) is ArimaPredictor and arima.log1p and arima.minimum_data_points == 5
    prophet = make_predictor(entry_fields("prophet_w20_raw"), 600)
    assert type(prophet) is ProphetPredictor and (prophet.window_size, prophet.interval_s) == (20, 600.0)
    kalman = make_predictor(entry_fields({"load_predictor": "kalman", "kalman_min_points": 8}), 180)
    assert type(kalman) is KalmanPredictor and kalman.minimum_data_points == 8
    with pytest.raises(ValueError, match="bogus"):
        make_predictor({"load_predictor": "bogus"}, 180)


# ---------------------------------------------------------------- evaluation (§8.3)


def test_common_warmup_is_max_over_all_entries() -> None:
    assert common_warmup(["constant_last"]) == 1
    assert common_warmup(["constant_last", "kalman_reactive_raw"]) == 3
    assert common_warmup(["constant_last", "kalman_reactive_raw", "arima_raw"]) == 5
    assert common_warmup(["constant_last", {"load_predictor": "kalman", "kalman_min_points": 8}]) == 8


def test_evaluate_constant_last_hand_computed() -> None:
    windows = [Window(2, 100, 10), Window(2, 100, 10), Window(4, 200, 20)]
    fields = entry_fields("constant_last")
    # warm-up 1: window 1 predicted exactly (0), window 2 predicted from window 1
    assert evaluate_entry(windows, fields, 180, warmup=1) == pytest.approx(
        window_loss(2, 100, 10, 4, 200, 20) / 2)
    # warm-up 0 also scores window 0, predicted as (0, 0, 0) from an empty history
    assert evaluate_entry(windows, fields, 180, warmup=0) == pytest.approx(
        (window_loss(0, 0, 0, 2, 100, 10) + window_loss(2, 100, 10, 4, 200, 20)) / 3)


def test_evaluate_scores_empty_middle_windows() -> None:
    windows = [Window(2, 100, 10), Window(0, 0, 0), Window(2, 100, 10)]
    got = evaluate_entry(windows, entry_fields("constant_last"), 60, warmup=1)
    assert got == pytest.approx((window_loss(2, 100, 10, 0, 0, 0) + window_loss(0, 0, 0, 2, 100, 10)) / 2)


def test_evaluate_without_scored_windows_is_inf() -> None:
    assert evaluate_entry([Window(1, 1, 1)], entry_fields("constant_last"), 60, warmup=5) == math.inf
    assert evaluate_entry([], entry_fields("constant_last"), 60, warmup=0) == math.inf


def test_pick_winner_strict_ties_and_all_inf() -> None:
    assert pick_winner(["a", "b", "c"], [0.5, 0.3, 0.3]) == "b"
    assert pick_winner(["a", "b"], [math.inf, math.inf]) is None


def test_unknown_family_is_value_error_naming_it() -> None:
    # the config already rejects the family; the sweep core must not score past one either
    with pytest.raises(ValueError, match="bogus"):
        sweep_windows({180: [Window(1, 10.0, 1.0)]}, ["constant_last", {"load_predictor": "bogus"}])


# ---------------------------------------------------------------- trigger rules (§8.1)


def test_no_throughput_policy_skips() -> None:
    r = sweep_load_predictor(_synthetic_config(), None, ["disabled", "load_180_5", "load_180_10"])
    assert r.reason == REASON_NO_THROUGHPUT
    assert r.best_by_interval == {} and r.losses == {} and r.rows() == []


def test_synthetic_workload_uses_constant_last_per_interval() -> None:
    policies: list[str | dict[str, Any]] = ["throughput_180_5", "hybrid_600_5", "load_180_5",
                                            {"enable_throughput_scaling": True, "enable_load_scaling": False,
                                             "throughput_adjustment_interval_seconds": 240,
                                             "load_adjustment_interval_seconds": 5}]
    r = sweep_load_predictor(_synthetic_config(), None, policies)
    assert r.reason == REASON_STATIC
    assert r.best_by_interval == {180: "constant_last", 240: "constant_last", 600: "constant_last"}
    rows = r.rows()
    assert [(row["interval_seconds"], row["entry_label"], row["winner"], row["mean_loss"]) for row in rows] == [
        (180, "constant_last", True, None), (240, "constant_last", True, None), (600, "constant_last", True, None)]


def test_short_trace_falls_back_to_constant_last(tmp_path: Path) -> None:
    trace = _write_rows(tmp_path / "short.jsonl", [(1000, 100, 10), (200_000, 120, 12)])
    config = _trace_config(trace, ["kalman_default_raw", {"load_predictor": "kalman", "kalman_min_points": 2}])
    r = sweep_load_predictor(config, trace, ["throughput_180_5"])
    assert r.best_by_interval == {180: FALLBACK_ENTRY}
    assert r.reason == "swept; no_winner_fallback_constant_last@[180]"
    assert r.losses == {180: {"kalman_default_raw": math.inf, "custom_1": math.inf}}
    rows = r.rows()
    assert [(row["entry_label"], row["winner"]) for row in rows] == [
        ("kalman_default_raw", False), ("custom_1", False), ("constant_last", True)]
    assert rows[1]["entry_json"] == json.dumps({"kalman_min_points": 2, "load_predictor": "kalman"})


def test_rows_write_to_parquet_schema_and_rebuild(tmp_path: Path) -> None:
    result = LoadPredictorResult(
        best_by_interval={180: {"load_predictor": "kalman"}, 600: "constant_last"},
        losses={180: {"constant_last": 0.5, "custom_1": 0.25}, 600: {"constant_last": math.inf, "custom_1": math.inf}},
        reason="swept; no_winner_fallback_constant_last@[600]",
        entries={"constant_last": "constant_last", "custom_1": {"load_predictor": "kalman"}},
    )
    rows = result.rows()
    table = pa.Table.from_pylist(rows, schema=LOAD_PREDICTOR_SCHEMA)
    assert table.num_rows == 4
    assert [r["winner"] for r in rows] == [False, True, True, False]
    assert rows[2]["mean_loss"] == math.inf
    rebuilt = LoadPredictorResult.from_rows(table.to_pylist())
    assert rebuilt.best_by_interval == result.best_by_interval
    assert rebuilt.losses == result.losses
    assert rebuilt.reason == result.reason
    assert rebuilt.winner_for(180.0) == {"load_predictor": "kalman"} and rebuilt.winner_for(None) is None
    assert LoadPredictorResult.from_rows([]).reason == REASON_NO_THROUGHPUT


# ---------------------------------------------------------------- on a sine-wave trace


@pytest.fixture(scope="module")
def sine_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sine") / "sine.jsonl"
    return write_sine_trace(path, duration_s=5400, base_rps=6, amplitude_rps=4, period_s=900,
                            isl=4000, osl=200, seed=3)


def test_sine_trace_picks_non_constant_family_at_180s(sine_trace: Path) -> None:
    candidates = ["constant_last", "arima_raw", "kalman_default_log1p", "kalman_reactive_raw"]
    r = sweep_load_predictor(_trace_config(sine_trace, candidates), sine_trace, ["throughput_180_5", "disabled"])
    assert r.reason == "swept"
    assert set(r.losses) == {180}
    assert list(r.losses[180]) == candidates
    assert all(math.isfinite(v) and v > 0 for v in r.losses[180].values())
    winner = r.best_by_interval[180]
    assert isinstance(winner, str) and winner != "constant_last"
    assert r.losses[180][winner] < r.losses[180]["constant_last"]
    assert sum(row["winner"] for row in r.rows()) == 1


def test_sine_trace_synthetic_counterpart_is_constant(sine_trace: Path) -> None:
    r = sweep_load_predictor(_synthetic_config(), None, ["throughput_180_5"])
    assert r.best_by_interval == {180: "constant_last"} and r.reason == REASON_STATIC


@pytest.mark.slow
def test_sine_trace_full_default_grid(sine_trace: Path) -> None:
    """Every default preset, prophet included, on two intervals (about a minute on 2 cores)."""
    r = sweep_load_predictor(_trace_config(sine_trace), sine_trace, ["throughput_180_5", "hybrid_600_5"])
    assert r.reason == "swept"
    assert set(r.losses) == {180, 600}
    assert len(r.losses[180]) == 11
    assert all(math.isfinite(v) for per in r.losses.values() for v in per.values())
    assert r.best_by_interval[180] != "constant_last"
    assert r.losses[180]["prophet_w20_log1p"] != r.losses[180]["prophet_w20_raw"]
