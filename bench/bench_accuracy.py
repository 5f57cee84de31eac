"""Accuracy: Spica's replay (and AIC's static estimate, and AISimulate) against aiconfigurator-core's silicon rows.

Every row of ``systems/silicon_sample.csv`` that Spica can express (bundled model, SKU, backend,
precision, parallel shape; disagg with worker counts) is replayed through ``spica evaluate``'s own
path (SmartSearchConfig → pinned_request → EvalPool/evaluate_one) with a config that reproduces how
the row was measured (see spica_core/calibrate/silicon.py and docs/accuracy.md). Output:
``bench/results/accuracy.json`` (overwritten), and from it ``spica_core/evaluate/data/serving.json`` and
``bands.json``, ``docs/accuracy.md``, ``docs/img/accuracy_*.png`` and the ``accuracy`` block of
``docs/benchmarks.md``. Partial runs (``--limit``,
``--rows-matching``) and shards write under ``bench/traces/`` (scratch, not kept) and ship nothing.
AISimulate's predictions are cached in ``bench/results/aisim_cache.json`` (``bench/peer_aisim.py``).

    PYTHONPATH=. .venv/bin/python bench/bench_accuracy.py                 # everything, 2 workers
    PYTHONPATH=. .venv/bin/python bench/bench_accuracy.py --limit 40 --rows-matching 'qwen3_32b.*vllm'
    PYTHONPATH=. .venv/bin/python bench/bench_accuracy.py --shard 1/2     # then --shard 2/2, then --merge
    PYTHONPATH=. .venv/bin/python bench/bench_accuracy.py --merge         # bench/traces shards → accuracy.json + docs
    PYTHONPATH=. .venv/bin/python bench/bench_accuracy.py --docs-only     # accuracy.json → bands, docs
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("DYN_LOG", "error")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.accuracy_cv import START_WINDOWS_MS, window_key  # noqa: E402
from bench.accuracy_rows import REPO, bands, summarize  # noqa: E402
from spica_core.calibrate.silicon import (RowPlan, checkpoint_of, load_rows, make_config, pin_problem, plan_row,  # noqa: E402
                                          silicon_csv)

RESULTS = REPO / "bench" / "results"
OUT = RESULTS / "accuracy.json"
SCRATCH = REPO / "bench" / "traces"   # gitignored: shards and partial runs, never a results file
BANDS = REPO / "spica_core" / "evaluate" / "data" / "bands.json"
SERVING = REPO / "spica_core" / "evaluate" / "data" / "serving.json"
DOC = REPO / "docs" / "accuracy.md"
IMG = REPO / "docs" / "img"
MAX_EVAL_SECONDS = float(os.environ.get("SPICA_ACCURACY_MAX_EVAL_SECONDS", "300"))
CHUNK = 24


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- coverage


def quantization_available() -> bool:
    from spica_core.config.search_space import SearchSpace

    return "quantization" in SearchSpace.model_fields


def coverage() -> tuple[list[RowPlan], list[dict[str, str]], int]:
    from spica_core.space.facts import bundled_models

    rows = load_rows()
    bundled = bundled_models()
    qa = quantization_available()
    plans, skipped = [], []
    cache: dict[str, str | None] = {}

    def legal(plan: RowPlan) -> str | None:
        key = json.dumps([plan.model, plan.row.system, plan.row.backend, plan.mode, plan.parallel, plan.quantization])
        if key not in cache:
            cache[key] = pin_problem(plan)
        return cache[key]

    for row in rows:
        p = plan_row(row, bundled, legal=legal, quantization_available=qa)
        if isinstance(p, str):
            skipped.append({"id": row.id, "reason": p})
        else:
            plans.append(p)
    return plans, skipped, len(rows)


def reason_class(reason: str) -> str:
    """A skip reason without its numbers and names, for the counts table."""
    r = re.sub(r"\b[\w./-]*\d[\w./-]*\b", "N", reason)
    return r[:140]


# ---------------------------------------------------------------- running


def cost(plan: RowPlan) -> float:
    return plan.total_requests * (plan.row.osl + plan.row.isl / 512)


def windows_of(cfg: dict[str, Any]) -> tuple[float | None, ...]:
    """The start windows a row is replayed at: the grid for a closed loop of identical requests (the window
    is fitted, accuracy_cv.fit_window), else only the row's own load (None)."""
    from spica_core.config.workload import Workload

    return START_WINDOWS_MS if Workload(**cfg["workload"]).staggers else (None,)


def replay_block(rep: dict[str, Any]) -> dict[str, Any]:
    """The replay alone: assemble() adds the serving constants it fits (accuracy_cv.predict) and records each as
    serving_overhead_ms; a modelled term (SGLang's polling wait) stays in."""
    overhead = float(rep.get("serving_overhead_ms") or 0.0)
    return {"mean_ttft_ms": float(rep["mean_ttft_ms"]) - overhead, "mean_itl_ms": float(rep["mean_itl_ms"]),
            "polling_delay_ms": float(rep.get("polling_delay_ms") or 0.0),
            **{k: rep.get(k) for k in ("median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "completed_requests",
                                       "num_requests")}}


def run_plans(plans: list[RowPlan], workers: int) -> dict[str, dict[str, Any]]:
    """Evaluate each plan through spica evaluate's path (a closed loop of identical requests once per start
    window); AIC's estimate in this process. id → result."""
    from bench.accuracy_run import aic_point, build
    from spica_core.evaluate import EvalPool, evaluate_one

    results: dict[str, dict[str, Any]] = {}
    todo = sorted(plans, key=cost)  # cheap first: a partial run still has most rows
    t0 = time.time()
    pool = EvalPool(workers, MAX_EVAL_SECONDS) if workers > 1 else None
    try:
        if pool is not None:
            pool.__enter__()
        for start in range(0, len(todo), CHUNK):
            chunk = todo[start:start + CHUNK]
            requests, ok = [], []
            for plan in chunk:
                cfg = make_config(plan)
                try:
                    jobs = [(plan, cfg, w, build(cfg if w is None else {**cfg, "workload": {
                        **cfg["workload"], "start_window_ms": w}})[1]) for w in windows_of(cfg)]
                except Exception as exc:  # noqa: BLE001
                    results[plan.row.id] = {"status": "error", "reason": f"config: {type(exc).__name__}: {exc}",
                                            "config": cfg}
                    continue
                ok += [job[:3] for job in jobs]
                requests += [job[3] for job in jobs]
            outcomes = pool.evaluate_batch(requests) if pool is not None else [evaluate_one(r) for r in requests]
            for (plan, cfg, window), req, outcome in zip(ok, requests, outcomes):
                res = results.get(plan.row.id)
                if res is None:   # the plan's first window (or its only run)
                    aic, why = aic_point(req.candidate, {"isl": plan.row.isl, "osl": plan.row.osl,
                                                         "concurrency": plan.concurrency})
                    res = results[plan.row.id] = {"status": outcome.status.value, "reason": outcome.reason,
                                                  "config": cfg, "replay_s": outcome.timings.get("replay_s"),
                                                  "aic": aic, "aic_reason": why}
                    if outcome.feasible:
                        res["predicted"] = {"ttft_ms": float(outcome.report["mean_ttft_ms"]),
                                            "tpot_ms": float(outcome.report["mean_itl_ms"])}
                        res["report"] = replay_block(outcome.report)
                if not outcome.feasible:   # a row infeasible at any window is not compared
                    res.update(status=outcome.status.value, reason=outcome.reason, predicted=None)
                elif window is not None:
                    res.setdefault("windows", {})[window_key(window)] = replay_block(outcome.report)
            done = start + len(chunk)
            log(f"{done}/{len(todo)} rows, {time.time() - t0:.0f}s")
    finally:
        if pool is not None:
            pool.__exit__(None, None, None)
    return results


def aisim_predictions(ids: list[str], cached_only: bool = False) -> tuple[dict[str, Any], str]:
    """bench/peer_aisim.py's predict_rows (its own venv and cache); ``cached_only``: only rows already cached."""
    path = REPO / "bench" / "peer_aisim.py"
    if not path.is_file():
        return {}, "bench/peer_aisim.py not present"
    try:
        from bench import peer_aisim  # type: ignore[attr-defined]

        if cached_only:
            cache = peer_aisim._read_cache(peer_aisim.DEFAULT_CACHE).get(peer_aisim._cache_key(), {})
            return ({i: cache[i] for i in ids if i in cache},
                    f"bench/peer_aisim.py cache {peer_aisim._cache_key()} (rows cached at merge time)")
        return dict(peer_aisim.predict_rows(ids)), f"bench/peer_aisim.py predict_rows {peer_aisim._cache_key()}"
    except Exception as exc:  # noqa: BLE001
        return {}, f"peer_aisim failed: {type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- assembling


def row_record(plan: RowPlan, res: dict[str, Any], aisim: dict[str, Any]) -> dict[str, Any]:
    r = plan.row
    a = aisim.get(r.id)
    aisim_block = ({"ttft_ms": float(a["ttft_ms"]), "tpot_ms": float(a["tpot_ms"])}
                   if isinstance(a, dict) and "ttft_ms" in a and a.get("ttft_ms") is not None else None)
    rec = {"id": r.id, "model": plan.model, "system": r.system, "backend": r.backend,
           "precision": plan.quantization or checkpoint_of(plan.model).quantization, "mode": plan.mode, "isl": r.isl, "osl": r.osl,
           "concurrency": plan.concurrency,
           "measured": {"ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms},
           "predicted": res.get("predicted"), "aic": res.get("aic"), "aisim": aisim_block,
           "config": res["config"], "source_model": r.model_path, "row_precision": r.precision,
           "row_quant": {"gemm": r.gemm_quant_mode, "moe": r.moe_quant_mode}, "source": r.source.split(";")[0],
           "notes": plan.notes, "replay_s": res.get("replay_s")}
    if rec["aic"] is None:
        rec["aic_reason"] = res.get("aic_reason")
    if aisim_block is None:
        rec["aisim_reason"] = (a or {}).get("error") if isinstance(a, dict) else "not predicted"
    if res.get("report"):
        rec["replay"] = res["report"]
    if res.get("windows"):
        rec["replay_windows"] = res["windows"]
    return rec


def versions() -> dict[str, Any]:
    from importlib.metadata import version

    out: dict[str, Any] = {}
    for pkg in ("aiconfigurator-core", "ai-dynamo-runtime"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            out[pkg] = None
    try:
        out["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                           text=True).stdout.strip()
        out["git_dirty"] = bool(subprocess.run(["git", "status", "--porcelain", "spica_core"], cwd=REPO,
                                               capture_output=True, text=True).stdout.strip())
    except Exception:  # noqa: BLE001
        pass
    return out


def assemble(rows: list[dict[str, Any]], skipped: list[dict[str, str]], meta: dict[str, Any]) -> dict[str, Any]:
    """The accuracy document: the serving constants fitted on every row give ``predicted`` (what ``spica
    evaluate`` prints once they ship), and leave-one-model-out fits give ``predicted_oof`` and ``band_oof``."""
    from bench.accuracy_cv import (assign_folds, compare_forms, constants_per_model, fit_window, in_sample_bands,
                                   out_of_fold, predict, scale_ceiling, trust_summary, window_curve)
    from spica_core.space.facts import model_facts

    rows = sorted(rows, key=lambda r: r["id"])
    skipped = sorted(skipped, key=lambda r: r["id"])
    assign_folds(rows, {m: model_facts(m).network for m in {r["model"] for r in rows}})
    window, constants = fit_window(rows)
    for r in rows:
        if "replay_windows" in r:   # the replay spica evaluate runs once the window ships
            r["replay"].update(r["replay_windows"][window_key(window)])
        r["predicted"] = {k: round(v, 3) for k, v in predict(r, constants).items()}
        r["replay"]["serving_overhead_ms"] = constants[r["backend"]]["ms"]   # the constant ``predicted`` adds
    shipped = in_sample_bands(rows)
    oof = out_of_fold(rows)
    for r in rows:
        r["band"] = shipped[r["id"]]
        r["predicted_oof"], r["band_oof"] = oof[r["id"]]["predicted_oof"], oof[r["id"]]["band_oof"]
    meta = {**meta, "serving": {"request_overhead_ms": constants, "start_window_ms": window,
                                "start_windows_tried": list(START_WINDOWS_MS),
                                "out_of_fold": {r["fold"]: oof[r["id"]]["constants"] for r in rows},
                                "out_of_fold_start_window_ms": {r["fold"]: oof[r["id"]]["start_window_ms"]
                                                                for r in rows},
                                "folds": {m: f for m, f in sorted({(r["model"], r["fold"]) for r in rows})}}}
    summary = summarize(rows)
    summary.update(trust_summary(rows))
    summary["start_windows"] = window_curve(rows)
    summary["forms"] = compare_forms(rows, {m: model_facts(m).num_layers for m in {r["model"] for r in rows}})
    summary["scale_ceiling"] = scale_ceiling(rows)
    summary["constants_per_model"] = constants_per_model(rows)
    summary["counts"].update({"skipped": len(skipped), "csv_rows": meta.get("csv_rows"),
                              "skip_reasons": dict(Counter(reason_class(s["reason"]) for s in skipped).most_common())})
    return {"meta": meta, "summary": summary, "rows": rows, "skipped": skipped}


def perf_db_versions(rows: list[dict[str, Any]]) -> dict[str, str]:
    from spica_core.space.facts import backend_version

    out = {}
    for key in sorted({f"{r['system']}/{r['backend']}" for r in rows}):
        sku, backend = key.split("/")
        out[key] = backend_version(sku, backend)
    return out


def write_serving(doc: dict[str, Any]) -> dict[str, Any]:
    """spica_core/evaluate/data/serving.json: the serving constant per backend, fitted on every row."""
    serving = doc["meta"]["serving"]
    folds = serving["out_of_fold"].values()
    oof_windows = list(serving["out_of_fold_start_window_ms"].values())
    body = {"schema": 1, "source": "bench/results/accuracy.json",
            "rule": "per backend, the time (ms, at least 0) that makes the median of measured / predicted mean TTFT "
                    "1 over the backend's measured rows; judged leave-one-model-out in docs/accuracy.md",
            "request_overhead_ms": {b: {**c, "out_of_fold_range": [min(f[b] for f in folds if b in f),
                                                                   max(f[b] for f in folds if b in f)]}
                                    for b, c in serving["request_overhead_ms"].items()},
            "start_window_ms": {"ms": serving["start_window_ms"], "tried": serving["start_windows_tried"],
                                "rule": "the window of those tried whose replays, with the constants above refitted "
                                        "at it, give the least mean TTFT error over the measured rows",
                                "out_of_fold_range": [min(oof_windows), max(oof_windows)]}}
    SERVING.write_text(json.dumps(body, indent=1) + "\n")
    return body


def write_bands(doc: dict[str, Any]) -> dict[str, Any]:
    rows = doc["rows"]
    body = {"schema": 1, "aic_version": doc["meta"]["versions"].get("aiconfigurator-core") or "0.12.0",
            "perf_db": perf_db_versions(rows), "source": "bench/results/accuracy.json", "min_rows": 10,
            "bands": bands(rows, 10)}
    BANDS.parent.mkdir(parents=True, exist_ok=True)
    BANDS.write_text(json.dumps(body, indent=1) + "\n")
    return body


# ---------------------------------------------------------------- main


def write_shipped(doc: dict[str, Any]) -> None:
    """Everything one run ships: the serving constants, the bands, docs/accuracy.md and its plots."""
    from bench.accuracy_docs import write_docs

    write_serving(doc)
    write_bands(doc)
    write_docs(doc)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    k, n = (int(x) for x in text.split("/"))
    if not 1 <= k <= n:
        raise SystemExit("--shard K/N needs 1 <= K <= N")
    return k, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="at most N covered rows (after --rows-matching)")
    ap.add_argument("--rows-matching", default=None, help="only rows whose id matches this regex")
    ap.add_argument("--shard", default=None, help="K/N: run every N-th covered row starting at K")
    ap.add_argument("--merge", action="store_true", help="merge bench/traces/accuracy.shard-*.json")
    ap.add_argument("--docs-only", action="store_true", help="re-derive bands and docs from accuracy.json")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-aisim", dest="aisim", action="store_false", help="skip AISimulate (add later: --add-aisim)")
    ap.add_argument("--add-aisim", action="store_true", help="add AISimulate's predictions to accuracy.json")
    ap.add_argument("--aisim-cached-only", action="store_true", help="with --add-aisim: only rows peer_aisim cached")
    ap.add_argument("--out", default=None, help="output JSON (default bench/results/accuracy.json)")
    args = ap.parse_args()

    if args.add_aisim:
        doc = json.loads(OUT.read_text())
        aisim, source = aisim_predictions([r["id"] for r in doc["rows"]], cached_only=args.aisim_cached_only)
        for r in doc["rows"]:
            a = aisim.get(r["id"])
            ok = isinstance(a, dict) and a.get("ttft_ms") is not None and a.get("tpot_ms") is not None
            r["aisim"] = {"ttft_ms": float(a["ttft_ms"]), "tpot_ms": float(a["tpot_ms"])} if ok else None
            r.pop("aisim_reason", None)
            if not ok:
                r["aisim_reason"] = (a or {}).get("error", "not predicted") if isinstance(a, dict) else "not predicted"
        doc["meta"]["aisim_source"] = source
        doc = assemble(doc["rows"], doc["skipped"], doc["meta"])
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        write_shipped(doc)
        return
    if args.docs_only:
        doc = json.loads(OUT.read_text())
        doc = assemble(doc["rows"], doc["skipped"], doc["meta"])
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        write_shipped(doc)
        return
    if args.merge:
        doc = merge_shards()
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        write_shipped(doc)
        log(f"merged {doc['meta']['shards']} shards: {len(doc['rows'])} rows")
        return

    t0 = time.time()
    plans, skipped, n_csv = coverage()
    log(f"coverage: {len(plans)} covered, {len(skipped)} skipped of {n_csv}")
    if args.rows_matching:
        rx = re.compile(args.rows_matching)
        plans = [p for p in plans if rx.search(p.row.id)]
    shard = parse_shard(args.shard)
    if shard:
        plans = plans[shard[0] - 1::shard[1]]
    if args.limit:
        plans = plans[:args.limit]
    models = {p.model for p in plans}
    if len(models) < 2:
        sys.exit(f"the selection holds rows of {len(models)} model(s); the out-of-fold figures fit each model on "
                 "the others' rows, so select rows of at least two models")
    results = run_plans(plans, args.workers)
    aisim, aisim_source = (aisim_predictions([p.row.id for p in plans]) if args.aisim
                           else ({}, "not run (--no-aisim); add with --add-aisim"))
    rows = []
    for plan in plans:
        res = results[plan.row.id]
        if res.get("predicted") is None:
            skipped.append({"id": plan.row.id, "reason": f"evaluation {res.get('status')}: {res.get('reason')}"[:300]})
            continue
        rows.append(row_record(plan, res, aisim))
    partial = bool(args.rows_matching or args.limit or shard)
    meta = {"versions": versions(), "wall_s": round(time.time() - t0, 1), "workers": args.workers,
            "shards": 1 if not shard else f"{shard[0]}/{shard[1]}", "csv": str(silicon_csv().relative_to(
                silicon_csv().parents[3])) if len(silicon_csv().parents) > 3 else str(silicon_csv()),
            "csv_rows": n_csv, "aisim_source": aisim_source, "max_eval_seconds": MAX_EVAL_SECONDS,
            "partial": partial, "selection": {"rows_matching": args.rows_matching, "limit": args.limit},
            "host": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    doc = assemble(rows, skipped, meta)
    if shard:
        out = SCRATCH / f"accuracy.shard-{shard[0]}-of-{shard[1]}.json"
    else:
        out = Path(args.out) if args.out else (OUT if not partial else SCRATCH / "accuracy.partial.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out}: {len(rows)} rows, {len(doc['skipped'])} skipped, {meta['wall_s']}s")
    o = doc["summary"]["overall"]
    for s in ("predicted", "aic", "aisim"):
        t, p = o[f"{s}_ttft_ms"], o[f"{s}_tpot_ms"]
        if t["rows"]:
            log(f"{s:9s} rows {t['rows']:5d}  TTFT MAPE {t['mape']:.3f} med {t['median_signed_error']:+.3f} | "
                f"TPOT MAPE {p['mape']:.3f} med {p['median_signed_error']:+.3f}")
    f = doc["summary"]["out_of_fold"]["overall"]
    log(f"out of fold rows {f['rows']:5d}  TTFT MAPE {f['ttft_ms']['mape']:.3f} med "
        f"{f['ttft_ms']['median_signed_error']:+.3f} | TPOT MAPE {f['tpot_ms']['mape']:.3f} med "
        f"{f['tpot_ms']['median_signed_error']:+.3f} | p10-p90 coverage TTFT {f['coverage']['ttft_ms']['p10_p90']} "
        f"TPOT {f['coverage']['tpot_ms']['p10_p90']}")
    if not partial and not shard:
        write_shipped(doc)


def merge_shards() -> dict[str, Any]:
    files = sorted(SCRATCH.glob("accuracy.shard-*-of-*.json"))
    if not files:
        raise SystemExit("no bench/traces/accuracy.shard-*.json to merge")
    docs = [json.loads(f.read_text()) for f in files]
    rows: dict[str, Any] = {}
    skipped: dict[str, Any] = {}
    for d in docs:
        for r in d["rows"]:
            rows[r["id"]] = r
        for s in d["skipped"]:
            skipped.setdefault(s["id"], s)
    for rid in rows:
        skipped.pop(rid, None)
    meta = dict(docs[0]["meta"])
    meta.update({"shards": len(docs), "wall_s": round(max(d["meta"]["wall_s"] for d in docs), 1),
                 "wall_s_per_shard": [d["meta"]["wall_s"] for d in docs], "partial": False,
                 "shard_files": [f.name for f in files]})
    return assemble(list(rows.values()), list(skipped.values()), meta)


if __name__ == "__main__":
    main()
