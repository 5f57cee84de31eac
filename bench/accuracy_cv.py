"""The fitted serving constant, judged out of fold: leave-one-model-out predictions, bands and coverage.

Spica's prediction of a measured row is its replay plus the serving path before the first token
(``spica_core/evaluate/serving.py``): a constant ``request_overhead_ms`` per backend. The constant
is the only number fitted to measured rows. It is fitted so that the median of measured ÷ predicted
TTFT over the backend's rows is 1 (an unbiased prediction), and never below 0 ms.

Out of fold, a row of model M is predicted with constants fitted on every row of the other models
(``predicted_oof``). A model is its network (``fold``, see ``assign_folds``): checkpoints of one network,
such as an NVFP4 export or the DeepSeek-V3 rows that InferenceX measured serving DeepSeek-R1, leave the fit
together, so no measurement helps predict itself under another name. Its band (``band_oof``) is the
quantiles of measured ÷ predicted over the other models' rows, predicted with the same constants, in the
row's group (every row of the other models: its own model's group is never there, as for a model the
shipped band file has never seen). What ships is fitted on all rows. Nothing here runs a replay: each row
carries its raw replay (``replay.mean_ttft_ms`` / ``replay.mean_itl_ms``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.accuracy_rows import band_keys, bands, error_stats

PEERS = ("aic", "aisim")
START_WINDOWS_MS = (0.0, 500.0, 1000.0, 2000.0, 4000.0)   # workload.start_window_ms values a closed loop of identical
                                                  # requests is replayed at; the fit picks one (fit_window)
MIN_BAND_ROWS = 10
COVERAGE = {"p10_p90": ("p10", "p90"), "p5_p95": ("p05", "p95")}
_BAND_METRIC = {"ttft_ms": "ttft_ms", "tpot_ms": "itl_ms"}   # accuracy row metric -> band file metric


def window_key(window: float) -> str:
    return f"{float(window):g}"


def raw(row: Mapping[str, Any], window: float | None = None) -> dict[str, float]:
    """The row's replay before the serving path: mean TTFT and mean ITL (the TPOT prediction); at start
    ``window`` for a row replayed at each (``replay_windows``), else its one replay."""
    rep = row["replay_windows"][window_key(window)] if window is not None and "replay_windows" in row else row["replay"]
    return {"ttft_ms": float(rep["mean_ttft_ms"]), "tpot_ms": float(rep["mean_itl_ms"])}


def _valid(pairs: Iterable[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    return [(m, p, u) for m, p, u in pairs if m > 0 and p > 0 and u > 0 and all(map(math.isfinite, (m, p, u)))]


def fit_overhead(pairs: Iterable[tuple[float, float]], units: Iterable[float] | None = None) -> float:
    """The constant β ≥ 0 that makes the median of (replayed + β·unit) ÷ measured equal 1; 0 without rows.

    ``units`` (default 1 per row) scales the term per row, e.g. the model's layer count. The median is
    non-decreasing in β, so bisection finds it; when the replay alone already meets or over-predicts the
    median row, β is 0 (the serving path takes time; it never gives it back).
    """
    pairs = list(pairs)
    ok = _valid((m, p, u) for (m, p), u in zip(pairs, units if units is not None else [1.0] * len(pairs)))
    if not ok:
        return 0.0

    def median_ratio(beta: float) -> float:
        ratios = sorted((p + beta * u) / m for m, p, u in ok)
        n = len(ratios)
        return ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2

    if median_ratio(0.0) >= 1.0:
        return 0.0
    lo, hi = 0.0, max(m / u for m, _, u in ok)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if median_ratio(mid) < 1.0 else (lo, mid)
    return round((lo + hi) / 2, 3)


def fit_least_mape(pairs: Iterable[tuple[float, float]]) -> float:
    """The constant β ≥ 0 of least mean |replayed + β − measured| ÷ measured: the median of measured − replayed
    weighted by 1 ÷ measured (the loss is convex and piecewise linear in β)."""
    ok = [(m - p, 1.0 / m) for m, p, _ in _valid((m, p, 1.0) for m, p in pairs)]
    return round(max(0.0, weighted_median(ok)), 3) if ok else 0.0


def weighted_median(values: Iterable[tuple[float, float]]) -> float:
    """The lower weighted median of (value, weight > 0) pairs: the value of least weighted absolute deviation."""
    ordered = sorted(values)
    half, seen = sum(w for _, w in ordered) / 2, 0.0
    for value, w in ordered:
        seen += w
        if seen >= half:
            return value
    return ordered[-1][0]


def fit(rows: Sequence[Mapping[str, Any]], window: float | None = None) -> dict[str, dict[str, Any]]:
    """backend -> {ms, rows}: the serving constant fitted on these rows (replayed at start ``window``)."""
    out: dict[str, dict[str, Any]] = {}
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend]
        out[backend] = {"ms": fit_overhead((r["measured"]["ttft_ms"], raw(r, window)["ttft_ms"]) for r in mine),
                        "rows": len(mine)}
    return out


def fit_window(rows: Sequence[Mapping[str, Any]]) -> tuple[float, dict[str, dict[str, Any]]]:
    """(start window, serving constants): the window of ``START_WINDOWS_MS`` whose replays, each backend with
    its constant fitted at that window, give the least TTFT MAPE over these rows (0 wins a tie)."""
    best: tuple[float, float, dict[str, dict[str, Any]]] | None = None
    for window in START_WINDOWS_MS:
        constants = fit(rows, window)
        score = _mape(rows, constants, window, "ttft_ms") or 0.0
        if best is None or score < best[0] - 1e-12:
            best = (score, window, constants)
    assert best is not None
    return best[1], best[2]


def window_curve(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per start window tried: in-sample TTFT and TPOT MAPE over all rows and over the staggered ones (a
    closed loop of identical requests), each backend's constant refitted at that window."""
    staggered = [r for r in rows if "replay_windows" in r]
    out: dict[str, dict[str, Any]] = {}
    for window in START_WINDOWS_MS:
        constants = fit(rows, window)

        def mape(subset: Sequence[Mapping[str, Any]], metric: str) -> float | None:
            value = _mape(subset, constants, window, metric)
            return None if value is None else round(value, 4)

        out[window_key(window)] = {"ttft_mape": mape(rows, "ttft_ms"), "tpot_mape": mape(rows, "tpot_ms"),
                                   "staggered_ttft_mape": mape(staggered, "ttft_ms"),
                                   "staggered_tpot_mape": mape(staggered, "tpot_ms"), "staggered_rows": len(staggered),
                                   "constants": {b: c["ms"] for b, c in constants.items()}}
    return out


def _mape(rows: Sequence[Mapping[str, Any]], constants: Mapping[str, Mapping[str, Any]], window: float | None,
          metric: str) -> float | None:
    """MAPE of ``metric`` over rows predicted with these constants at start ``window`` (None without rows)."""
    return error_stats((r["measured"][metric], predict(r, constants, window)[metric]) for r in rows)["mape"]


def predict(row: Mapping[str, Any], constants: Mapping[str, Mapping[str, Any]],
            window: float | None = None) -> dict[str, float]:
    """What ``spica evaluate`` prints for the row with these constants (and start ``window``): the replay plus
    the serving path."""
    r = raw(row, window)
    beta = float(constants.get(row["backend"], {}).get("ms", 0.0))
    return {"ttft_ms": r["ttft_ms"] + beta, "tpot_ms": r["tpot_ms"]}


def _band(row: Mapping[str, Any], prediction: Mapping[str, float], table: Mapping[str, Any]) -> dict[str, Any]:
    """The row's band in ms from a band table: the first group in its fallback chain that the table has."""
    out: dict[str, Any] = {}
    for metric, band_metric in _BAND_METRIC.items():
        groups = table[band_metric]
        key = next((k for k in band_keys(row) if k in groups), None)
        if key is None:
            raise SystemExit(f"row {row['id']}: no band group of {MIN_BAND_ROWS} or more rows to take its band "
                             "from (out of fold: other models' rows only); a partial run needs more rows "
                             "(widen --rows-matching or --limit)")
        q = groups[key]
        out[metric] = {name: round(prediction[metric] * q[name], 3) for name in ("p05", "p10", "p50", "p90", "p95")}
        out[metric]["group"] = key
    return out


def assign_folds(rows: Sequence[dict[str, Any]], network: Mapping[str, str]) -> None:
    """Set each row's ``fold``: the first model id (in sorted order) of the rows whose model has the same
    network (``network``: model -> its architecture and dimensions, ``ModelFacts.network``; a model without one
    is its own fold)."""
    key = {m: network.get(m) or m for m in {r["model"] for r in rows}}
    first: dict[str, str] = {}
    for model in sorted(key):
        first.setdefault(key[model], model)
    for r in rows:
        r["fold"] = first[key[r["model"]]]


def fold_of(row: Mapping[str, Any]) -> str:
    return str(row.get("fold") or row["model"])


def out_of_fold(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """id -> {constants, start_window_ms, predicted_oof, band_oof}: each row from a fit (window and serving
    constants) and bands without any row of its fold (its model's network)."""
    out: dict[str, dict[str, Any]] = {}
    for fold in sorted({fold_of(r) for r in rows}):
        train = [r for r in rows if fold_of(r) != fold]
        window, constants = fit_window(train)
        scored = [{**r, "predicted": predict(r, constants, window)} for r in train]
        table = bands(scored, MIN_BAND_ROWS)
        for r in rows:
            if fold_of(r) != fold:
                continue
            pred = predict(r, constants, window)
            out[r["id"]] = {"constants": {b: c["ms"] for b, c in constants.items()}, "start_window_ms": window,
                            "predicted_oof": {k: round(v, 3) for k, v in pred.items()},
                            "band_oof": _band(r, pred, table)}
    return out


def in_sample_bands(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """id -> the shipped band (quantiles from every row, the row's own model included) on ``predicted``."""
    table = bands(rows, MIN_BAND_ROWS)
    return {r["id"]: _band(r, r["predicted"], table) for r in rows}


def coverage(rows: Sequence[Mapping[str, Any]], band_field: str) -> dict[str, dict[str, float | None]]:
    """metric -> {p10_p90, p5_p95}: the share of rows whose measured value lies inside that band."""
    out: dict[str, dict[str, float | None]] = {}
    for metric in _BAND_METRIC:
        out[metric] = {}
        for name, (lo, hi) in COVERAGE.items():
            inside = [b[metric][lo] <= r["measured"][metric] <= b[metric][hi]
                      for r in rows if (b := r.get(band_field)) is not None]
            out[metric][name] = round(sum(inside) / len(inside), 4) if inside else None
    return out


def accuracy_block(rows: Sequence[Mapping[str, Any]], prediction: str, band_field: str) -> dict[str, Any]:
    """MAPE, median signed error and band coverage of one prediction field over rows."""
    return {"rows": len(rows),
            **{m: error_stats((r["measured"][m], (r.get(prediction) or {}).get(m)) for r in rows)
               for m in _BAND_METRIC},
            "coverage": coverage(rows, band_field)}


def trust_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """In-sample (``predicted``, shipped bands) and out-of-fold (``predicted_oof``, ``band_oof``) accuracy,
    overall and per backend, SKU and model."""
    out: dict[str, Any] = {}
    for name, prediction, band_field in (("in_sample", "predicted", "band"), ("out_of_fold", "predicted_oof",
                                                                                "band_oof")):
        block: dict[str, Any] = {"overall": accuracy_block(rows, prediction, band_field), "groups": {}}
        for g in ("backend", "system", "model"):
            block["groups"][g] = {k: accuracy_block([r for r in rows if r[g] == k], prediction, band_field)
                                  for k in sorted({str(r[g]) for r in rows})}
        common = [r for r in rows if all(isinstance(r.get(p), Mapping) and r[p].get("ttft_ms") for p in PEERS)]
        block["common"] = accuracy_block(common, prediction, band_field)   # the rows every peer predicted too
        block["distinct"] = accuracy_block(distinct(rows), prediction, band_field)
        out[name] = block
    return out


def distinct(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per measurement: aiconfigurator-core's sample lists some InferenceX runs under two or three ids
    (the same run in two dated CSVs and in the database dump, DeepSeek-R1's also as DeepSeek-V3); the first id
    of each (fold, SKU, backend, lengths, concurrency, measured TTFT and TPOT) stands for it."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for r in sorted(rows, key=lambda r: r["id"]):
        key = (fold_of(r), r["system"], r["backend"], r.get("isl"), r.get("osl"), r.get("concurrency"),
               round(float(r["measured"]["ttft_ms"]), 6), round(float(r["measured"]["tpot_ms"]), 6))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def source_of(row: Mapping[str, Any]) -> str:
    """Who measured the row: AI Configurator's gap analysis (Dynamo, aiperf) or InferenceX (each engine's server),
    told apart as ``spica_core.calibrate.silicon.source_kind`` tells a CSV row's."""
    return "AIC gap analysis" if "gap-analysis" in str(row.get("source", "")) else "InferenceX"


def constants_per_model(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float | int]]]:
    """backend -> "model (source)" -> {ms, rows}: the serving constant each model's rows alone would fit (in
    sample). A diagnostic of what one constant per backend averages over, never shipped."""
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for backend in sorted({r["backend"] for r in rows}):
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for r in rows:
            if r["backend"] == backend:
                groups.setdefault(f"{r['model']} ({source_of(r)})", []).append(r)
        out[backend] = {k: {"ms": fit_overhead((r["measured"]["ttft_ms"], raw(r)["ttft_ms"]) for r in v),
                            "rows": len(v)} for k, v in sorted(groups.items())}
    return out


CEILING_GROUPS = {"backend": ("backend",), "backend, SKU": ("backend", "system"),
                  "model, SKU, backend, precision": ("model", "system", "backend", "precision")}


def scale_ceiling(rows: Sequence[Mapping[str, Any]], prediction: str = "predicted_oof") -> dict[str, dict[str, float]]:
    """The least MAPE any one multiplicative correction per group could reach, fitted on the rows it is judged
    on (so a bound, never a result): per metric and grouping, each group's prediction scaled by the factor of
    least MAPE (the median of measured ÷ predicted weighted by predicted ÷ measured)."""
    out: dict[str, dict[str, float]] = {}
    for metric in _BAND_METRIC:
        out[metric] = {}
        for label, keys in CEILING_GROUPS.items():
            groups: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
            for r in rows:
                m, p = float(r["measured"][metric]), float((r.get(prediction) or {}).get(metric) or 0.0)
                if m > 0 and p > 0:
                    groups.setdefault(tuple(r.get(k) for k in keys), []).append((m, p))
            total, n = 0.0, 0
            for pairs in groups.values():
                factor = weighted_median((m / p, p / m) for m, p in pairs)
                total += sum(abs(factor * p / m - 1) for m, p in pairs)
                n += len(pairs)
            out[metric][label] = round(total / n, 4) if n else float("nan")
    return out


def compare_forms(rows: Sequence[Mapping[str, Any]], layers: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Other forms of the serving term, each fitted per backend and judged the same way (in sample and
    leave-one-fold-out), on TTFT: the replay alone, the shipped constant, a time per decoder layer
    (``layers``: model -> layer count), and the constant of least MAPE (which trades the median for it).

    A form is (fit on training rows -> coefficient, a row's unit): the term is coefficient × unit, fitted
    once per backend and fold."""
    def pairs(train: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
        return [(t["measured"]["ttft_ms"], raw(t)["ttft_ms"]) for t in train]

    def per_layer(train: Sequence[Mapping[str, Any]]) -> float:
        return fit_overhead(pairs(train), [layers[t["model"]] for t in train])

    one = lambda r: 1.0  # noqa: E731
    forms = {
        "replay alone (no serving term)": (lambda train: 0.0, one),
        "constant, median ratio 1 (shipped)": (lambda train: fit_overhead(pairs(train)), one),
        "ms per decoder layer, median ratio 1": (per_layer, lambda r: float(layers[r["model"]])),
        "constant of least MAPE": (lambda train: fit_least_mape(pairs(train)), one),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, (fit_form, unit) in forms.items():
        ins: list[tuple[float, float]] = []
        per_backend: dict[str, list[tuple[float, float]]] = {}
        for backend in sorted({r["backend"] for r in rows}):
            mine = [r for r in rows if r["backend"] == backend]
            everyone = fit_form(mine)
            folds = {f: fit_form([t for t in mine if fold_of(t) != f]) for f in {fold_of(r) for r in mine}}
            for r in mine:
                m, replay = r["measured"]["ttft_ms"], raw(r)["ttft_ms"]
                ins.append((m, replay + everyone * unit(r)))
                per_backend.setdefault(backend, []).append((m, replay + folds[fold_of(r)] * unit(r)))
        oof = [pair for v in per_backend.values() for pair in v]
        out[name] = {"in_sample": error_stats(ins), "out_of_fold": error_stats(oof),
                     "out_of_fold_by_backend": {b: error_stats(v) for b, v in per_backend.items()}}
    return out


__all__ = ["START_WINDOWS_MS", "window_key", "fit_window", "window_curve", "fit_overhead", "fit_least_mape",
           "weighted_median", "compare_forms", "fit", "predict", "assign_folds", "fold_of", "out_of_fold",
           "in_sample_bands", "coverage", "trust_summary", "distinct", "scale_ceiling", "constants_per_model",
           "source_of", "raw"]
