"""The held-out calibration benchmark's own rules: the split and the prior a never-seen model would have."""
from __future__ import annotations

import json
from typing import Any

import pytest

from bench.bench_calibration import ACCURACY, held_out, never_seen, split
from spica_core.evaluate import load_bands


def _row(i: int, c: int, model: str = "m/x") -> dict[str, Any]:
    band = {"p05": 40.0, "p10": 50.0, "p50": 100.0, "p90": 200.0, "p95": 250.0, "group": "backend=vllm"}
    return {"id": f"r{i}", "model": model, "system": "h100_sxm", "backend": "vllm", "concurrency": c, "isl": 100,
            "osl": 10, "measured": {"ttft_ms": 150.0 + c, "tpot_ms": 10.0},
            "predicted_oof": {"ttft_ms": 100.0, "tpot_ms": 10.0},
            "band_oof": {"ttft_ms": band, "tpot_ms": {k: (v / 10 if isinstance(v, float) else v)
                                                      for k, v in band.items()}}}


def test_the_lower_half_by_concurrency_calibrates_and_the_rest_is_held_out() -> None:
    low, high = split([_row(i, c) for i, c in enumerate((64, 8, 32, 16, 4))])
    assert [r["concurrency"] for r in low] == [4, 8] and [r["concurrency"] for r in high] == [16, 32, 64]


def test_a_never_seen_model_has_no_band_of_its_own_and_its_out_of_fold_band_as_prior() -> None:
    shipped = load_bands()
    model = next(k for k in shipped.ratios["ttft_ms"] if k.startswith("model=")).split(";")[0][len("model="):]
    table = never_seen([_row(0, 4, model)], shipped)
    assert not any(k.startswith(f"model={model};") for k in table.ratios["ttft_ms"])
    prior = table.ratio("ttft_ms", model, "h100_sxm", "vllm")
    assert (prior.p10, prior.p50, prior.p90) == (0.5, 1.0, 2.0)


def test_held_out_rows_are_corrected_by_the_lower_halfs_calibration() -> None:
    group = [_row(i, c) for i, c in enumerate((4, 8, 16, 32))]
    out = held_out(group, load_bands())["errors"]["lower half"]["ttft_ms"]
    assert out["method"] == "shrunk" and 1.0 < out["correction"] < 1.58   # rows at ×1.54 and ×1.58, shrunk to ×1
    assert [r["after"] for r in out["rows"]] == pytest.approx([100.0 * out["correction"]] * 2)


def test_the_committed_results_are_what_the_committed_accuracy_rows_give() -> None:
    from bench.bench_calibration import OUT, held_out_groups, summarize

    doc = json.loads(OUT.read_text())
    again = summarize(held_out_groups(json.loads(ACCURACY.read_text())["rows"]))
    assert json.loads(json.dumps(again)) == doc["summary"]   # (the file holds JSON floats, exactly)
    assert doc["summary"]["lower half"]["ttft_ms"]["rows"] > 1000
