"""The accuracy file is a contract: every row carries its out-of-fold prediction and band, and ``predicted`` is
what ``spica evaluate``'s own path prints for the row's config with the shipped constants."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ACCURACY = Path(__file__).resolve().parents[1] / "bench" / "results" / "accuracy.json"


def _doc() -> dict:
    return json.loads(ACCURACY.read_text())


def test_every_row_carries_the_contract_fields() -> None:
    doc = _doc()
    for r in doc["rows"]:
        assert {"id", "model", "system", "backend", "measured", "predicted", "predicted_oof", "band_oof"} <= set(r)
        for metric in ("ttft_ms", "tpot_ms"):
            band = r["band_oof"][metric]
            assert band["p10"] <= band["p90"] and r["predicted_oof"][metric] > 0
        rep = r["replay"]         # the replay alone plus the shipped constant is the prediction
        assert rep["mean_ttft_ms"] + rep["serving_overhead_ms"] == pytest.approx(r["predicted"]["ttft_ms"], abs=2e-3)
        assert rep["serving_overhead_ms"] == doc["meta"]["serving"]["request_overhead_ms"][r["backend"]]["ms"]
        if "replay_windows" in r:   # a closed loop of identical requests: the replay at the shipped window
            shipped = r["replay_windows"][f"{doc['meta']['serving']['start_window_ms']:g}"]
            assert (rep["mean_ttft_ms"], rep["mean_itl_ms"]) == (shipped["mean_ttft_ms"], shipped["mean_itl_ms"])
    assert sum("replay_windows" in r for r in doc["rows"]) > 500
    for block in ("in_sample", "out_of_fold"):
        overall = doc["summary"][block]["overall"]
        assert overall["rows"] == len(doc["rows"]) and set(overall["coverage"]) == {"ttft_ms", "tpot_ms"}


@pytest.mark.slow
def test_predicted_is_what_spica_evaluate_prints() -> None:
    from bench.accuracy_run import build
    from spica_core.evaluate import evaluate_one

    rows = _doc()["rows"]
    picks = [min((r for r in rows if r["backend"] == backend and r["concurrency"] <= 16), key=lambda r: r["id"])
             for backend in ("sglang", "trtllm", "vllm")]
    picks.append(min((r for r in rows if r["config"]["search_space"].get("scheduler_recv_interval", 1) > 1
                      and r["concurrency"] <= 16), key=lambda r: r["id"]))   # SGLang's polling wait included
    picks.append(min((r for r in rows if r["config"]["search_space"].get("aic_nextn")
                      and r["concurrency"] <= 16), key=lambda r: r["id"]))   # a row replayed with its recipe's MTP
    picks.append(min((r for r in rows if "replay_windows" in r and r["concurrency"] <= 16),
                     key=lambda r: r["id"]))   # a closed loop of identical requests, started over the shipped window
    for row in picks:
        _, request = build(row["config"])
        outcome = evaluate_one(request)
        assert outcome.feasible, outcome.reason
        assert outcome.metrics["mean_ttft_ms"] == pytest.approx(row["predicted"]["ttft_ms"], abs=2e-3), row["id"]
        assert outcome.metrics["mean_itl_ms"] == pytest.approx(row["predicted"]["tpot_ms"], abs=2e-3), row["id"]
