"""The accuracy benchmark's own parts: where the repository is and the summary maths (errors, bands).

Silicon rows → coverage → Spica configs lives in the product (``spica_core.calibrate.silicon``), which
``spica calibrate`` shares; nothing here runs a replay, ``bench/bench_accuracy.py`` drives the evaluations.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from spica_core.calibrate import quantile   # the one quantile of measured ÷ predicted, bands and calibrations

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- summary maths


def error_stats(pairs: Iterable[tuple[float, float]]) -> dict[str, Any]:
    """(measured, predicted) pairs → MAPE (fraction), median signed error (pred/meas − 1), p10/p50/p90 of
    measured ÷ predicted, row count. Pairs with a missing or non-positive value are left out."""
    ok = [(m, p) for m, p in pairs if m is not None and p is not None and m > 0 and p > 0
          and math.isfinite(m) and math.isfinite(p)]
    if not ok:
        return {"rows": 0, "mape": None, "median_signed_error": None, "ratio_p10": None, "ratio_p50": None,
                "ratio_p90": None}
    ape = [abs(p - m) / m for m, p in ok]
    signed = [(p - m) / m for m, p in ok]
    ratio = [m / p for m, p in ok]
    return {"rows": len(ok), "mape": sum(ape) / len(ape), "median_signed_error": quantile(signed, 0.5),
            "ratio_p10": quantile(ratio, 0.1), "ratio_p50": quantile(ratio, 0.5), "ratio_p90": quantile(ratio, 0.9)}


SYSTEMS = ("predicted", "aic", "aisim")
GROUPINGS = ("model", "system", "backend", "mode")


def _value(row: Mapping[str, Any], system: str, metric: str) -> float | None:
    block = row.get(system)
    if not isinstance(block, Mapping):
        return None
    v = block.get(metric)
    return float(v) if isinstance(v, (int, float)) else None


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Overall and per-group (model, system, backend, mode) error stats for Spica, AIC and AISimulate.

    Each system is scored on the rows it predicted; ``*_common`` scores all three on the rows every one
    of them predicted (the like-for-like comparison)."""
    def block(sub: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": len(sub)}
        common = [r for r in sub if all(_value(r, s, "ttft_ms") is not None for s in SYSTEMS)]
        for s in SYSTEMS:
            for metric in ("ttft_ms", "tpot_ms"):
                out[f"{s}_{metric}"] = error_stats((r["measured"][metric], _value(r, s, metric)) for r in sub)
                out[f"{s}_{metric}_common"] = error_stats((r["measured"][metric], _value(r, s, metric))
                                                          for r in common)
        out["common_rows"] = len(common)
        return out

    summary: dict[str, Any] = {"overall": block(rows), "groups": {}}
    for g in GROUPINGS:
        keys = sorted({str(r[g]) for r in rows})
        summary["groups"][g] = {k: block([r for r in rows if str(r[g]) == k]) for k in keys}
    summary["counts"] = {"rows": len(rows), "models": len({r["model"] for r in rows}),
                         "systems": len({r["system"] for r in rows})}
    return summary


BAND_QUANTILES = (("p05", 0.05), ("p10", 0.10), ("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))


def band_keys(row: Mapping[str, Any]) -> list[str]:
    """The product's group fallback chain (spica_core.evaluate.bands.group_keys) for a row."""
    from spica_core.evaluate.bands import group_keys

    return list(group_keys(row["model"], row["system"], row["backend"]))


def bands(rows: Sequence[Mapping[str, Any]], min_rows: int = 10) -> dict[str, dict[str, dict[str, float | int]]]:
    """Quantiles of measured ÷ predicted per key; ttft_ms from TTFT, itl_ms = measured TPOT ÷ predicted ITL."""
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for metric, (meas, pred) in {"ttft_ms": ("ttft_ms", "ttft_ms"), "itl_ms": ("tpot_ms", "tpot_ms")}.items():
        ratios: dict[str, list[float]] = {}
        for r in rows:
            m, p = r["measured"][meas], _value(r, "predicted", pred)
            if m is None or p is None or not (m > 0 and p > 0):
                continue
            for k in band_keys(r):
                ratios.setdefault(k, []).append(m / p)
        table: dict[str, dict[str, float | int]] = {}
        for k in sorted(ratios, key=lambda k: (k.count(";") * -1 if k != "all" else 1, k)):
            xs = ratios[k]
            if k != "all" and len(xs) < min_rows:
                continue
            table[k] = {name: round(quantile(xs, q), 6) for name, q in BAND_QUANTILES} | {"rows": len(xs)}
        out[metric] = table
    return out


__all__ = ["REPO", "error_stats", "summarize", "bands", "band_keys"]
