"""Peer baseline: run AI Configurator's own search and replay its picks through Spica's evaluator.

    PYTHONPATH=. .venv/bin/python bench/peer_aic.py --config examples/quickstart.yaml --out /tmp/peer.json

1. ``ensure_aic_cli`` installs ``aiconfigurator==0.12.0`` into its own venv (``bench/.aic-venv``), so
   the peer's pins (pandas 3, matplotlib, ...) never touch the project venv.
2. ``run_aic_default`` times ``aiconfigurator cli default --model M --system S --backend B --total-gpus N
   --isl I --osl O --ttft T --tpot P --top-n 5 --no-color --save-dir DIR`` and reads its best agg and
   disagg pick: rank 1 of ``<mode>/best_config_topn.csv`` (shape, modeled batch per attention-DP rank,
   predicted TTFT / TPOT / tokens/s/gpu) and ``<mode>/top1/k8s_deploy.yaml`` (workers per role and
   the engine flags the peer would deploy).
3. ``to_candidate`` builds Spica's ``Candidate`` via ``Candidate.unroll``: the peer's shapes, worker
   counts, backend and perf-DB version; round robin (the peer deploys no KV router); planner
   ``disabled`` (the peer has none). Batching ``deployed`` (default) takes the generator's flags (vLLM
   --max-num-seqs / --max-num-batched-tokens, SGLang --max-running-requests / --chunked-prefill-size
   or --max-prefill-tokens, TRT-LLM max_batch_size / max_num_tokens); ``modeled`` uses AIC's batch
   size as max_num_seqs. A flag the peer does not write falls back to the modeled batch (seqs) or the
   config's first value (tokens); every other knob (block size, memory utilisation, prefix caching) is
   the config's.
4. ``replay_peer`` replays both with ``evaluate_one`` on the config's own workload and goal.

Peer limits (0.12.0): the ``aiconfigurator`` distribution is deprecated (removal planned for 0.13.0)
and warns on every run. Systems without perf data (h100_pcie, a100_pcie, a30, l4) fail with "Backend
<b> is not supported for system <s>"; only ``database_mode="SOL"`` runs there, and Spica has no data
for them either. ``perf_db_version`` picks another slot (current/previous/next) when the default one
is missing. The peer sizes its picks for its own fixed concurrency (CSV ``concurrency``) and ISL/OSL
(trace workloads: the trace's mean lengths), while Spica replays the config's workload, so the scores
are not the same experiment; the peer's memory fraction (vLLM 0.92) is not carried over.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from spica_core.config.model import SmartSearchConfig
    from spica_core.deployment import Candidate

REPO = Path(__file__).resolve().parents[1]
AIC_VENV = REPO / "bench" / ".aic-venv"
AIC_VERSION = "0.12.0"
SEQS_FLAGS = ("--max-num-seqs", "--max-running-requests", "--max-batch-size", "max_batch_size:")
TOKENS_FLAGS = ("--max-num-batched-tokens", "--chunked-prefill-size", "--max-prefill-tokens", "--max-num-tokens",
                "max_num_tokens:")


class PeerError(RuntimeError):
    """The peer CLI could not be installed, failed, or wrote nothing we can read."""


@dataclass(frozen=True)
class PeerRole:
    """One role of a peer pick: shape, total workers, modeled batch size and deployed engine flags."""

    tp: int
    pp: int = 1
    dp: int = 1                                 # attention DP
    moe_tp: int = 1
    moe_ep: int = 1
    workers: int = 1                            # all replicas together
    bs: int | None = None                       # AIC's modeled batch size per attention-DP rank
    max_num_seqs: int | None = None             # as deployed by the peer's generator
    max_num_batched_tokens: int | None = None


@dataclass(frozen=True)
class PeerConfig:
    """The peer's best config of one mode, with its own predictions."""

    mode: str
    backend: str
    version: str | None
    roles: dict[str, PeerRole]
    tokens_per_s_per_gpu: float | None = None   # the peer's own predictions from here on
    tokens_per_s_per_user: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    concurrency: int | None = None              # per replica, as the peer modeled it
    used_gpus: int | None = None


@dataclass(frozen=True)
class PeerResult:
    """One ``cli default`` run: wall time, best agg and disagg picks, where it wrote, what ran."""

    wall_s: float
    agg: PeerConfig | None
    disagg: PeerConfig | None
    out_dir: Path
    command: list[str]
    chosen: str | None = None                   # the mode the peer itself picks
    sweep_s: float | None = None                # the peer's own "experiments completed in" time


def ensure_aic_cli(venv: Path = AIC_VENV) -> Path:
    """The ``aiconfigurator`` executable of a separate venv, created and installed on first use."""
    exe, py = venv / "bin" / "aiconfigurator", venv / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m; print(m.version('aiconfigurator'))"]
    if exe.exists() and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == AIC_VERSION:
        return exe
    steps = [] if py.exists() else [[sys.executable, "-m", "venv", str(venv)]]
    steps.append([str(py), "-m", "pip", "install", "-q", f"aiconfigurator=={AIC_VERSION}"])
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            msg = f"installing the peer CLI failed ({' '.join(cmd)}):\n{(proc.stderr or proc.stdout)[-2000:]}"
            print(f"error: {msg}", file=sys.stderr)
            raise PeerError(msg)
    if not exe.exists():
        raise PeerError(f"pip finished but {exe} is missing")
    return exe


def _num(row: dict[str, str], key: str, kind: type = float) -> Any:
    value = row.get(key)
    if value in (None, ""):
        return None
    return kind(float(value)) if kind is int else kind(value)


def _deployed(top1: Path) -> dict[str, tuple[int | None, str]]:
    """{role: (replicas, engine args as one string)} from the peer's ``k8s_deploy.yaml`` ({} when absent)."""
    path = top1 / "k8s_deploy.yaml"
    services = (yaml.safe_load(path.read_text()) or {}).get("spec", {}).get("services", {}) if path.is_file() else {}
    def args(svc: dict[str, Any]) -> str:
        return " ".join(map(str, svc.get("extraPodSpec", {}).get("mainContainer", {}).get("args", [])))
    return {svc.get("subComponentType") or "agg": (svc.get("replicas"), args(svc))
            for svc in services.values() if svc.get("componentType") == "worker"}


def _first_int(args: str, names: tuple[str, ...]) -> int | None:
    """The value of the first of ``names`` (a CLI flag or an engine-YAML key) present in ``args``."""
    found = (re.search(rf"{re.escape(n)}[\s=]*[\"']?(\d+)", args) for n in names)
    return next((int(m.group(1)) for m in found if m), None)


def parse_mode(mode_dir: Path, total_gpus: int) -> PeerConfig | None:
    """Rank 1 of one mode's output folder as a :class:`PeerConfig` (None if the mode found nothing)."""
    csv_path = mode_dir / "best_config_topn.csv"
    rows = list(csv.DictReader(csv_path.open())) if csv_path.is_file() else []
    if not rows:
        return None
    row, mode = rows[0], mode_dir.name
    deployed = _deployed(mode_dir / "top1")
    replicas = max(1, total_gpus // (_num(row, "num_total_gpus", int) or 1))   # num_total_gpus: per replica
    roles = {}
    for role, pre in ((("agg", ""),) if mode == "agg" else (("prefill", "(p)"), ("decode", "(d)"))):
        count, flags = deployed.get(role, (None, ""))
        dim = {k: _num(row, f"{pre}{k}", int) or 1 for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")}
        per = 1 if mode == "agg" else (_num(row, f"{pre}workers", int) or 1)
        roles[role] = PeerRole(**dim, workers=int(count) if count else replicas * per, bs=_num(row, f"{pre}bs", int),
                               max_num_seqs=_first_int(flags, SEQS_FLAGS),
                               max_num_batched_tokens=_first_int(flags, TOKENS_FLAGS))
    used = sum(r.tp * r.pp * r.dp * r.workers for r in roles.values())
    return PeerConfig(mode, row.get("backend") or row.get("(p)backend") or "", row.get("version") or
                      row.get("(p)version"), roles, _num(row, "tokens/s/gpu"), _num(row, "tokens/s/user"),
                      _num(row, "ttft"), _num(row, "tpot"), _num(row, "concurrency", int), used)


def run_aic_default(model: str, system: str, total_gpus: int, isl: int, osl: int, ttft_ms: float, tpot_ms: float,
                    backend: str = "vllm", out_dir: Path | None = None, *, perf_db_version: str | None = None,
                    database_mode: str | None = None, top_n: int = 5) -> PeerResult:
    """Run ``aiconfigurator cli default`` once (timed) and parse its best agg and disagg picks."""
    exe = ensure_aic_cli()
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="spica-peer-aic-"))
    save = out_dir / time.strftime("run-%Y%m%d-%H%M%S")
    cmd = [str(exe), "cli", "default", "--model", model, "--system", system, "--backend", backend,
           "--total-gpus", str(total_gpus), "--isl", str(isl), "--osl", str(osl), "--ttft", f"{ttft_ms:g}",
           "--tpot", f"{tpot_ms:g}", "--top-n", str(top_n), "--no-color", "--save-dir", str(save)]
    cmd += ["--perf-db-version", perf_db_version] if perf_db_version else []
    cmd += ["--database-mode", database_mode] if database_mode else []
    save.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (save / "stdout.log").write_text(proc.stdout)
    (save / "stderr.log").write_text(proc.stderr)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        errors = [ln for ln in log.splitlines() if "[E]" in ln or "Error" in ln] or log.splitlines()[-5:]
        raise PeerError(f"peer CLI exited {proc.returncode}: " + " | ".join(errors[-5:]))
    found = sorted(save.rglob("best_config_topn.csv"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise PeerError(f"peer CLI wrote no best_config_topn.csv under {save}")
    run_dir = found[-1].parent.parent
    chosen = re.search(r"Best Experiment Chosen: (\w+)", log)
    sweep = re.search(r"All experiments completed in ([\d.]+) seconds", log)
    return PeerResult(wall, parse_mode(run_dir / "agg", total_gpus), parse_mode(run_dir / "disagg", total_gpus),
                      run_dir, cmd, chosen.group(1) if chosen else None, float(sweep.group(1)) if sweep else None)


def to_candidate(peer: PeerConfig, config: SmartSearchConfig, *, batching: str = "deployed") -> Candidate:
    """Spica's ``Candidate`` for a peer pick; knobs the peer does not choose take the config's first value."""
    from spica_core.deployment import Candidate
    from spica_core.space.parallel import ParallelConfig

    space = config.search_space
    shapes = {role: {"tp": r.tp, "pp": r.pp, "attention_dp": r.dp, "moe_tp": r.moe_tp, "moe_ep": r.moe_ep,
                     "replicas": r.workers} for role, r in peer.roles.items()}
    mode: Any = peer.mode
    parallel = ParallelConfig.from_dict(mode, shapes["agg"] if mode == "agg" else shapes)
    selection: dict[str, Any] = {"deployment_mode": peer.mode, "backend": peer.backend,
                                 "router_mode": "round_robin", "planner_scaling_policy": "disabled"}
    for role, r in peer.roles.items():
        seqs = r.bs if batching == "modeled" else (r.max_num_seqs or r.bs)
        selection[f"{role}_max_num_seqs"] = seqs or getattr(space, f"{role}_max_num_seqs")[0]
        selection[f"{role}_max_num_batched_tokens"] = (r.max_num_batched_tokens
                                                       or getattr(space, f"{role}_max_num_batched_tokens")[0])
    candidate = Candidate.unroll(space, selection, parallel)
    return replace(candidate, backend_version=peer.version) if peer.version else candidate


def replay_peer(config_path: Path, result: PeerResult, *, batching: str = "deployed") -> list[dict[str, Any]]:
    """Replay the peer's agg and disagg picks on the config's workload; a rejected pick is a row with its reason."""
    from spica_core.config.model import SmartSearchConfig
    from spica_core.evaluate import EvalRequest, evaluate_one

    config = SmartSearchConfig.from_yaml(config_path)
    trace = config.trace_file(Path(config_path).parent)
    ratio = config.workload.kv_load_range
    rows = []
    for mode, peer in (("agg", result.agg), ("disagg", result.disagg)):
        row: dict[str, Any] = {"mode": mode, "parallel": None, "status": "missing", "score": None,
                               "objectives": None, "metrics": {}, "reason": f"the peer recommended no {mode} config",
                               "peer_tokens_per_s_per_gpu": peer.tokens_per_s_per_gpu if peer else None}
        if peer is not None:
            try:
                candidate = to_candidate(peer, config, batching=batching)
                row["parallel"] = candidate.parallel.label()
                out = evaluate_one(EvalRequest.from_config(
                    config, candidate, trace_file=str(trace) if trace else None,
                    kv_load_ratio=ratio[1] if ratio else None, eval_id=f"peer-{mode}"))
                status, reason = out.status.value, out.reason
                if out.feasible and not (out.score is not None and math.isfinite(out.score)):
                    status, reason = "infeasible", f"non-finite score {out.score} (did any request complete?)"
                row.update(status=status, reason=reason, score=out.score, objectives=out.objectives,
                           metrics=out.metrics, sample=out.candidate.to_sample(), replay_s=out.timings.get("replay_s"))
            except Exception as exc:  # noqa: BLE001 - a pick Spica cannot build is a row, not a crash
                row.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
        rows.append(row)
    return rows


def _workload_lengths(config: SmartSearchConfig, config_path: Path) -> tuple[int, int]:
    """ISL/OSL for the peer: the synthetic workload's, or a trace's mean lengths."""
    w = config.workload
    if w.isl and w.osl:
        return int(w.isl), int(w.osl)
    from spica_core.config.trace import read_trace

    rows = list(read_trace(config.trace_file(Path(config_path).parent)))
    return round(sum(r.input_length for r in rows) / len(rows)), round(sum(r.output_length for r in rows) / len(rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True, help="a Spica YAML (e.g. examples/quickstart.yaml)")
    ap.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    ap.add_argument("--backend", help="peer backend (default: the config's first backend)")
    ap.add_argument("--raw-dir", type=Path, help="where the peer writes (default: a new /tmp folder)")
    ap.add_argument("--batching", choices=("deployed", "modeled"), default="deployed")
    ap.add_argument("--perf-db-version", help="peer perf-DB slot (current/previous/next or a version)")
    args = ap.parse_args(argv)

    from spica_core.config.model import SmartSearchConfig

    config = SmartSearchConfig.from_yaml(args.config)
    space, sla = config.search_space, config.goal.sla
    isl, osl = _workload_lengths(config, args.config)
    t0 = time.perf_counter()
    ttft = sla.ttft_ms if sla and sla.ttft_ms else 2000.0   # no SLA in the goal: the peer's defaults
    itl = sla.itl_ms if sla and sla.itl_ms else 30.0
    try:
        result = run_aic_default(space.model_name, space.skus[0], space.gpu_budget, isl, osl, ttft, itl,
                                 backend=args.backend or space.backend[0], out_dir=args.raw_dir,
                                 perf_db_version=args.perf_db_version)
    except PeerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = replay_peer(args.config, result, batching=args.batching)
    total = time.perf_counter() - t0
    print(f"peer: {' '.join(result.command[1:])}\npeer wall {result.wall_s:.1f}s, chose {result.chosen}; "
          f"raw output {result.out_dir}")
    print(f"{'mode':<7} {'parallel':<16} {'peer tok/s/gpu':>14} {'status':<10} {'spica score':>12}  reason")
    for r in rows:
        peer_tp, score = r["peer_tokens_per_s_per_gpu"], r["score"]
        print(f"{r['mode']:<7} {r['parallel'] or '-':<16} {peer_tp if peer_tp is not None else '-':>14} "
              f"{r['status']:<10} {f'{score:.2f}' if score is not None else '-':>12}  {r['reason']}")
    print(f"total {total:.1f}s (peer {result.wall_s:.1f}s + replays)")
    doc = {"config": str(args.config), "goal": config.goal.model_dump(mode="json"), "total_s": total,
           "peer": {**asdict(result), "out_dir": str(result.out_dir)}, "batching": args.batching, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
