"""A benchmark plan next to each manifest: an AIPerf command that sends the sweep's traffic to the deployed
frontend, so that a user measures the candidate on their own GPUs with the requests Spica replayed.

Every plan feeds AIPerf a mooncake trace that Spica writes beside it, holding the requests the replay ran: the
run's trace (arrivals divided by ``arrival_speedup_ratio``), or the synthetic requests (lengths spread as
``length_spread`` spreads them, one arrival per ``1 / request_rate``). A closed loop (``concurrency``,
``replay_concurrency``, a KV-load concurrency) runs at that concurrency; an open loop keeps the trace's
timestamps (AIPerf's fixed schedule). Shared-prefix and multi-turn synthetic traffic have no plan yet: a note
says so instead.

AIPerf writes its own export into ``$OUT/<manifest name>/``, with ``spica-plan.json`` beside it naming the
candidate, so that measurements identify what they measured.
"""
from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spica_core.config.model import SmartSearchConfig
from spica_core.config.trace import TRACE_BLOCK_SIZE
from spica_core.emit.crd_reading import MAIN_CONTAINER, WORKER_TYPES
from spica_core.emit.records import CandidateRecord, Provenance
from spica_core.engines import flag_value
from spica_core.store import write_file

AIPERF = "aiperf==0.13.0"           # the AIPerf release the plans are written for (its flags)
PLANS_DIR = "benchmarks"
PLAN_FILE = "spica-plan.json"       # written next to AIPerf's export: what was measured
FRONTEND_PORT = 8000                # Dynamo's frontend HTTP port unless DYN_HTTP_PORT says otherwise


@dataclass(frozen=True)
class Target:
    """Where a deployed manifest serves, read from the manifest itself."""

    name: str              # metadata.name: the DynamoGraphDeployment, and the results folder
    url: str               # the frontend service inside the cluster
    model: str             # the served model name the workers register


def target_of(doc: Mapping[str, Any]) -> Target:
    """The frontend URL and served model name of a DynamoGraphDeployment (the operator names the frontend's
    Service ``<name>-frontend``)."""
    meta = doc["metadata"]
    name, namespace = meta["name"], meta.get("namespace") or "default"
    port, model = FRONTEND_PORT, None
    for comp in doc["spec"]["components"]:
        main = next(c for c in comp["podTemplate"]["spec"]["containers"] if c["name"] == MAIN_CONTAINER)
        env = {e["name"]: e.get("value") for e in main.get("env") or ()}
        if comp["type"] == "frontend" and env.get("DYN_HTTP_PORT"):
            port = int(env["DYN_HTTP_PORT"])
        if comp["type"] in WORKER_TYPES and model is None:
            model = flag_value([a for a in main.get("args") or () if isinstance(a, str)], "--served-model-name")
    if model is None:
        raise ValueError(f"manifest {name}: no worker names its --served-model-name")
    return Target(name, f"http://{name}-frontend.{namespace}.svc.cluster.local:{port}", model)


def _unplanned(config: SmartSearchConfig, trace_file: Path | None) -> str | None:
    """Why the run's traffic has no plan, or None."""
    w = config.workload
    if w.is_trace:
        return None if trace_file is not None and trace_file.is_file() else "the run's trace file is not here"
    if w.shared_prefix_ratio > 0 or w.num_prefix_groups > 0:
        return "AIPerf plans do not express shared-prefix synthetic traffic (shared_prefix_ratio) yet"
    if w.turns_per_session > 1:
        return "AIPerf plans do not express multi-turn sessions (turns_per_session > 1) yet"
    return None


def _closed_loop(config: SmartSearchConfig, record: CandidateRecord) -> int | None:
    from spica_core.evaluate import effective_in_flight_cap

    w = config.workload
    return effective_in_flight_cap(w, record.candidate.concurrency if w.kv_load_ratio is not None else None)


def _trace_copy(config: SmartSearchConfig, trace_file: Path, out: Path) -> tuple[Path, int]:
    """The run's trace with its arrivals divided by ``arrival_speedup_ratio``, as the replay divided them, and its
    request count (written once, for every plan)."""
    ratio = config.workload.arrival_speedup_ratio
    lines = [line for line in trace_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if ratio != 1.0:
        rows = [json.loads(line) for line in lines]
        for row in rows:
            row["timestamp"] = round(float(row.get("timestamp", 0)) / ratio, 3)
        lines = [json.dumps(r, separators=(",", ":")) for r in rows]
    return write_file(out / "trace.jsonl", "".join(line + "\n" for line in lines)), len(lines)


def _synthetic_file(config: SmartSearchConfig, record: CandidateRecord, out: Path) -> tuple[Path, int]:
    """The synthetic requests the candidate's replay ran, as a mooncake trace (``spread_trace`` writes each spec
    once, so plans that replayed the same share it), and their count."""
    from spica_core.evaluate import request_count, spread_trace, synthetic_arrival_interval_ms

    w = config.workload
    cap = _closed_loop(config, record)
    count = request_count(w, record.candidate.concurrency if w.kv_load_ratio is not None else None)
    interval = 0.0 if cap is not None else synthetic_arrival_interval_ms(w)
    return spread_trace(int(w.isl), int(w.osl), count, float(w.length_spread), interval, out), count


def plan_script(target: Target, record: CandidateRecord, config: SmartSearchConfig, workload: str, requests: int,
                provenance: Provenance | None = None, manifest: str = "") -> str:
    """The shell script of one plan (``workload``: the trace file's name, next to the script, holding
    ``requests`` requests: AIPerf sends each once, where it would otherwise wrap a short dataset)."""
    cap = _closed_loop(config, record)
    schedule = ([f"--concurrency {cap}", "--no-fixed-schedule"] if cap is not None
                else ["--fixed-schedule", "--fixed-schedule-auto-offset"])
    plan = {"rank": record.rank, "manifest": target.name, "candidate": record.candidate.to_sample(),
            "workload": workload, "requests": requests, "concurrency": cap, "aiperf": AIPERF,
            "config_fingerprint": provenance.config_fingerprint if provenance else None,
            "trace_fingerprint": provenance.trace_fingerprint if provenance else None}
    command = " \\\n    ".join([
        "aiperf profile", '--model "$MODEL"', '--tokenizer "$TOKENIZER"', '--url "$URL"', "--endpoint-type chat",
        "--streaming", f'--input-file "$HERE"/{shlex.quote(workload)}', "--custom-dataset-type mooncake_trace",
        f"--isl-block-size {TRACE_BLOCK_SIZE}", *schedule, f"--request-count {requests}",
        "--extra-inputs ignore_eos:true", "--use-server-token-count", f"--random-seed {config.sweep.seed}",
        '--artifact-dir "$OUT/$NAME"'])
    return f"""#!/usr/bin/env bash
# Spica benchmark plan: rank {record.rank}, deployed as {target.name}{f" ({manifest})" if manifest else ""}.
# Replays the sweep's traffic ({workload}) against the deployed frontend with AIPerf ({AIPERF}):
#   pip install '{AIPERF}'
# then hand the export to `spica calibrate`. Override any of URL, MODEL, TOKENIZER, OUT, e.g. through
#   kubectl port-forward svc/{target.name}-frontend 8000:8000 & URL=http://localhost:8000 bash rank-{record.rank}.sh
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
URL="${{URL:-{target.url}}}"
MODEL="${{MODEL:-{target.model}}}"
TOKENIZER="${{TOKENIZER:-$MODEL}}"
OUT="${{OUT:-$HERE/results}}"
NAME={shlex.quote(target.name)}
mkdir -p "$OUT/$NAME"
cat > "$OUT/$NAME/{PLAN_FILE}" <<'SPICA_PLAN'
{json.dumps(plan, indent=2, sort_keys=True)}
SPICA_PLAN
{command}
"""


def write_plans(out: Path, manifests: Mapping[int, Path], records: Sequence[CandidateRecord],
                config: SmartSearchConfig, trace_file: Path | None,
                provenance: Provenance | None = None) -> dict[int, Path]:
    """``rank-N.sh`` (and the workload trace it reads) for every written manifest; ``rank-N.txt`` says why a
    candidate has no plan."""
    by_rank = {r.rank: r for r in records}
    written: dict[int, Path] = {}
    why = _unplanned(config, trace_file)
    trace = (_trace_copy(config, trace_file, out)
             if why is None and trace_file is not None and config.workload.is_trace and manifests else None)
    for rank, path in sorted(manifests.items()):
        if why is not None:
            write_file(out / f"rank-{rank}.txt", f"no benchmark plan: {why}\n")
            continue
        record = by_rank[rank]
        if config.workload.kv_load_ratio is not None and record.candidate.concurrency is None:
            write_file(out / f"rank-{rank}.txt", "no benchmark plan: the candidate's KV-load concurrency is unknown\n")
            continue
        workload, requests = trace or _synthetic_file(config, record, out)
        target = target_of(yaml.safe_load(path.read_text(encoding="utf-8")))
        script = write_file(out / f"rank-{rank}.sh", plan_script(target, record, config, workload.name, requests,
                                                                 provenance, os.path.relpath(path, out)))
        script.chmod(0o755)
        written[rank] = script
    return written


__all__ = ["AIPERF", "PLANS_DIR", "PLAN_FILE", "Target", "plan_script", "target_of", "write_plans"]
