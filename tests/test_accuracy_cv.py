"""The fitted serving constant and its out-of-fold judgement (bench/accuracy_cv.py): the fit's arithmetic,
the leave-one-model-out split (no row's model is in its own fit or its own band) and band coverage."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.accuracy_cv import coverage, fit, fit_overhead, out_of_fold, predict, trust_summary  # noqa: E402


def row(i: int, model: str, replay_ttft: float, measured_ttft: float, backend: str = "sglang",
        system: str = "b200_sxm") -> dict[str, Any]:
    return {"id": f"{model}-{i}", "model": model, "system": system, "backend": backend,
            "measured": {"ttft_ms": measured_ttft, "tpot_ms": 10.0},
            "replay": {"mean_ttft_ms": replay_ttft, "mean_itl_ms": 10.0 * (1 + 0.01 * (i % 7))}}


def test_the_constant_makes_the_median_ratio_one_and_is_never_negative() -> None:
    pairs = [(m, m - 100.0) for m in (300.0, 400.0, 500.0, 900.0, 1500.0)]   # replay short by 100 ms
    assert fit_overhead(pairs) == pytest.approx(100.0, abs=0.01)
    assert fit_overhead([(100.0, 150.0), (200.0, 260.0)]) == 0.0              # over-predicted: no overhead
    assert fit_overhead([]) == 0.0


def test_no_row_is_predicted_or_banded_with_its_own_model() -> None:
    rows = ([row(i, "A", 100.0, 150.0 + i) for i in range(12)] + [row(i, "B", 100.0, 200.0 + i) for i in range(12)]
            + [row(i, "C", 100.0, 900.0 + i) for i in range(12)])
    oof = out_of_fold(rows)
    fit_ab = fit([r for r in rows if r["model"] != "C"])["sglang"]["ms"]
    assert 50.0 <= fit_ab <= 112.0                                      # A and B only
    for r in rows:
        if r["model"] == "C":
            assert oof[r["id"]]["constants"]["sglang"] == fit_ab
            assert oof[r["id"]]["predicted_oof"]["ttft_ms"] == pytest.approx(100.0 + fit_ab)
            band = oof[r["id"]]["band_oof"]["ttft_ms"]
            assert not band["group"].startswith("model=")              # never its own model's quantiles
            assert band["p90"] < r["measured"]["ttft_ms"]              # C's miss is not in its own band
    in_sample = fit(rows)["sglang"]["ms"]
    assert in_sample > fit_ab                                           # C pulls the all-rows fit up
    assert predict(rows[0], fit(rows))["ttft_ms"] == pytest.approx(100.0 + in_sample)


def test_coverage_counts_rows_inside_their_band() -> None:
    def banded(measured: float) -> dict[str, Any]:
        q = {"p05": 80.0, "p10": 90.0, "p50": 100.0, "p90": 110.0, "p95": 120.0}
        return {"measured": {"ttft_ms": measured, "tpot_ms": 100.0}, "band_oof": {"ttft_ms": q, "tpot_ms": q}}

    cov = coverage([banded(95.0), banded(115.0), banded(130.0), banded(100.0)], "band_oof")
    assert cov["ttft_ms"] == {"p10_p90": 0.5, "p5_p95": 0.75}
    assert cov["tpot_ms"] == {"p10_p90": 1.0, "p5_p95": 1.0}


def test_the_summary_reports_in_sample_and_out_of_fold_per_backend() -> None:
    rows = [row(i, m, 100.0, 150.0 + 10 * i + 40 * k, backend=b)
            for k, m in enumerate("ABC") for b in ("sglang", "vllm") for i in range(11)]
    constants = fit(rows)
    oof = out_of_fold(rows)
    from bench.accuracy_cv import in_sample_bands
    for r in rows:
        r["predicted"] = predict(r, constants)
    shipped = in_sample_bands(rows)
    for r in rows:
        r["band"], r["predicted_oof"], r["band_oof"] = (shipped[r["id"]], oof[r["id"]]["predicted_oof"],
                                                       oof[r["id"]]["band_oof"])
    s = trust_summary(rows)
    assert s["in_sample"]["overall"]["ttft_ms"]["median_signed_error"] == pytest.approx(0.0, abs=0.02)
    assert s["out_of_fold"]["overall"]["ttft_ms"]["mape"] > s["in_sample"]["overall"]["ttft_ms"]["mape"]
    assert set(s["out_of_fold"]["groups"]["backend"]) == {"sglang", "vllm"}
    assert 0.0 <= s["out_of_fold"]["overall"]["coverage"]["ttft_ms"]["p10_p90"] <= 1.0


def test_the_least_mape_constant_is_the_weighted_median_gap() -> None:
    from bench.accuracy_cv import fit_least_mape

    pairs = [(100.0, 50.0), (200.0, 100.0), (1000.0, 900.0)]      # gaps 50, 100, 100 weighted 1/100, 1/200, 1/1000
    assert fit_least_mape(pairs) == 50.0
    assert fit_least_mape([(100.0, 150.0)]) == 0.0


def test_the_forms_are_judged_out_of_fold() -> None:
    from bench.accuracy_cv import compare_forms

    rows = ([row(i, "A", 100.0, 150.0 + i) for i in range(12)] + [row(i, "B", 100.0, 250.0 + i) for i in range(12)])
    forms = compare_forms(rows, {"A": 32, "B": 64})
    alone = forms["replay alone (no serving term)"]
    assert alone["in_sample"]["mape"] == alone["out_of_fold"]["mape"] and alone["in_sample"]["median_signed_error"] < 0
    shipped = forms["constant, median ratio 1 (shipped)"]
    assert shipped["in_sample"]["mape"] < shipped["out_of_fold"]["mape"]     # A's constant is B's, and back


def test_models_of_one_network_leave_the_fit_together() -> None:
    """C2 is C's network under another name (an NVFP4 export, a relabelled measurement): C's rows are predicted
    by a constant fitted on A and B alone, not on C2's rows, which would carry C's own miss into its fit."""
    from bench.accuracy_cv import assign_folds

    rows = ([row(i, "A", 100.0, 150.0 + i) for i in range(12)] + [row(i, "B", 100.0, 200.0 + i) for i in range(12)]
            + [row(i, "C", 100.0, 900.0 + i) for i in range(12)] + [row(i, "C2", 100.0, 900.0 + i) for i in range(12)])
    assign_folds(rows, {"A": "net-a", "B": "net-b", "C": "net-c", "C2": "net-c"})
    assert {r["model"]: r["fold"] for r in rows} == {"A": "A", "B": "B", "C": "C", "C2": "C"}
    oof = out_of_fold(rows)
    fit_ab = fit([r for r in rows if r["model"] in "AB"])["sglang"]["ms"]
    for r in rows:
        if r["model"] in ("C", "C2"):
            assert oof[r["id"]]["constants"]["sglang"] == fit_ab
            assert oof[r["id"]]["band_oof"]["ttft_ms"]["p90"] < r["measured"]["ttft_ms"]
    for r in rows:                                   # without the folds, C2's rows lift C's constant
        r.pop("fold")
    assert out_of_fold(rows)[rows[24]["id"]]["constants"]["sglang"] > fit_ab


def test_a_measurement_listed_under_two_ids_counts_once() -> None:
    from bench.accuracy_cv import distinct

    a = [row(i, "A", 100.0, 150.0 + i) for i in range(3)]
    again = [{**r, "id": f"z-{r['id']}"} for r in a[:2]]          # the same runs under other ids
    b = [row(i, "B", 100.0, 150.0 + i) for i in range(3)]          # the same numbers, another model: kept
    assert sorted(r["id"] for r in distinct(a + again + b)) == sorted(r["id"] for r in a + b)


def test_the_scale_ceiling_is_the_least_mape_one_factor_per_group_can_reach() -> None:
    from bench.accuracy_cv import scale_ceiling

    def scored(model: str, backend: str, measured: float, predicted: float) -> dict[str, Any]:
        return {"model": model, "system": "s", "backend": backend, "precision": "bf16",
                "measured": {"ttft_ms": measured, "tpot_ms": measured},
                "predicted_oof": {"ttft_ms": predicted, "tpot_ms": predicted}}

    rows = [scored("A", "vllm", 200.0, 100.0), scored("A", "vllm", 200.0, 100.0),   # off by ×2: a factor fixes it
            scored("B", "vllm", 100.0, 100.0), scored("B", "vllm", 100.0, 100.0),
            scored("C", "sglang", 100.0, 100.0), scored("C", "sglang", 300.0, 100.0)]   # spread no factor fixes
    c = scale_ceiling(rows)["ttft_ms"]
    assert c["model, SKU, backend, precision"] == pytest.approx((2 / 3) / 6, abs=1e-4)   # only C's spread is left
    assert c["backend"] > c["model, SKU, backend, precision"]                       # A and B share one factor


def test_each_models_own_constant_is_reported_by_who_measured_it() -> None:
    from bench.accuracy_cv import constants_per_model

    rows = [row(i, "A", 100.0, 150.0) for i in range(3)] + [row(i, "B", 100.0, 300.0) for i in range(3)]
    for r in rows[3:]:
        r["source"] = "source_file=/x/aic-auto-gap-analysis/data.csv"
    per = constants_per_model(rows)["sglang"]
    assert per["A (InferenceX)"] == {"ms": pytest.approx(50.0, abs=0.01), "rows": 3}
    assert per["B (AIC gap analysis)"]["ms"] == pytest.approx(200.0, abs=0.01)
