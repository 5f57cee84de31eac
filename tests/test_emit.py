"""The emit stage: candidate files, manifests and report from a sweep; ``spica show`` / ``spica emit`` on a copy."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import EXAMPLES
from spica_cli.main import main
from spica_core.config import SmartSearchConfig
from spica_core.emit import CandidateRecord, Provenance, check_manifest, to_csv
from spica_core.deployment import Candidate
from spica_core.space.parallel import ParallelConfig

PROVENANCE = Provenance(spica_version="0.1.0", replay_runtime="1.6.1", aiconfigurator_core="0.12.0",
                        perf_db_versions={"vllm": "0.24.0"}, config_fingerprint="c" * 16, trace_fingerprint=None,
                        stage_fingerprints={"ranking": "r" * 16}, timing_source="aiconfigurator-core perf database")


def _record(rank: int = 1, mode: str = "agg") -> CandidateRecord:
    config = SmartSearchConfig.from_yaml(EXAMPLES / "quickstart.yaml")
    selection: dict[str, Any] = {"agg_max_num_seqs": 512, "agg_max_num_batched_tokens": 16384,
                                 "router_mode": "kv_router"} if mode == "agg" else {
        "prefill_max_num_seqs": 16, "decode_max_num_seqs": 256, "router_mode": "round_robin"}
    parallel = {"tp": 2, "replicas": 4} if mode == "agg" else {"prefill": {"tp": 2}, "decode": {"tp": 4}}
    candidate = Candidate.unroll(config.search_space, {"deployment_mode": mode, "backend": "vllm", **selection},
                                 ParallelConfig.from_dict(mode, parallel)).resolved(backend_version="0.24.0",
                                                                                    concurrency=32)
    return CandidateRecord(rank=rank, score=123.5 / rank, used_gpus=candidate.parallel.used_gpus, candidate=candidate,
                           metrics={"mean_ttft_ms": 250.0, "output_throughput_tok_s": 4000.0}, objectives=None,
                           round=0, trial=rank, tally={"attempts": 5, "reasons": {"over budget": 1}},
                           provenance=PROVENANCE)


def test_a_record_round_trips_through_parquet_row_and_json() -> None:
    record = _record()
    assert CandidateRecord.from_row(record.to_row()) == record
    assert CandidateRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert record.config["agg_max_num_seqs"] == 512 and record.config["used_gpus"] == 8


def test_the_csv_has_flat_columns_and_one_row_per_candidate() -> None:
    rows = list(csv.DictReader(io.StringIO(to_csv([_record(1), _record(2, "disagg")]))))
    assert [r["rank"] for r in rows] == ["1", "2"]
    assert rows[0]["config.agg_max_num_seqs"] == "512" and rows[0]["config.decode_max_num_seqs"] == ""
    assert rows[1]["config.decode_max_num_seqs"] == "256" and rows[1]["used_gpus"] == "6"
    assert float(rows[0]["metrics.mean_ttft_ms"]) == 250.0


def test_show_and_emit_refuse_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(tmp_path)]) == 2
    assert "not a Spica run folder" in capsys.readouterr().err
    assert main(["emit", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err
    assert "not a folder" in err and "Traceback" not in err


@pytest.mark.slow
def test_a_sweep_emits_candidates_manifests_and_report_and_a_copy_can_be_shown_and_emitted(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["sweep", str(EXAMPLES / "quickstart.yaml"), "--run-dir", str(run)]) == 0
    out = capfd.readouterr().out  # (the flow's process prints the summary: capfd, not capsys)
    assert f"report: {run / 'report.md'}" in out and "manifests: " in out

    ranking = pq.read_table(run / "ranking.parquet").to_pylist()
    records = [CandidateRecord.from_row(r) for r in pq.read_table(run / "candidates.parquet").to_pylist()]
    assert [(r.rank, r.score) for r in records] == [(r["rank"], r["score"]) for r in ranking]
    document = json.loads((run / "candidates.json").read_text())
    assert document["result_type"] == "ranked_candidates"
    assert [c["rank"] for c in document["candidates"]] == [r.rank for r in records]
    assert document["candidates"][0]["provenance"]["replay_runtime"] == "1.6.1"
    assert document["candidates"][0]["tally"]["attempts"] >= len(records)

    for record in records[:3]:
        path = run / "manifests" / f"rank-{record.rank}.yaml"
        doc = yaml.safe_load(path.read_text())
        assert check_manifest(doc, used_gpus=record.used_gpus) == []
        gpus = sum(int(c["replicas"]) * int(c["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
                                              ["nvidia.com/gpu"])
                   for c in doc["spec"]["components"] if c["type"] in ("worker", "prefill", "decode"))
        assert gpus == record.used_gpus
    assert not (run / "manifests" / f"rank-{len(records) + 1}.yaml").exists()
    plans = sorted(p.name for p in (run / "benchmarks").glob("rank-*.sh"))   # a benchmark plan per manifest
    assert plans == [f"rank-{r.rank}.sh" for r in records[:3]] and "benchmark plans: " in out
    assert "aiperf profile" in (run / "benchmarks" / "rank-1.sh").read_text()

    report = (run / "report.md").read_text()
    assert "SLA: TTFT ≤ 2,000 ms, ITL ≤ 40 ms" in report and "## The winner and why" in report
    assert f"Rank 1: **{records[0].candidate.mode} vllm {records[0].candidate.parallel.label()} on h200_sxm**" in report
    pngs = sorted((run / "report").glob("*.png"))
    assert len(pngs) >= 3 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert all(f'src="report/{p.name}"' in (run / "report.html").read_text() for p in pngs)

    copy = tmp_path / "elsewhere" / "copied-run"
    shutil.copytree(run, copy)
    assert main(["show", str(copy)]) == 0
    shown = capfd.readouterr().out
    assert f"{records[0].score:,.4g}" in shown and "manifests/rank-1.yaml" in shown and "report.md" in shown
    out_dir = tmp_path / "k8s"
    assert main(["emit", str(copy), "--top", "1", "--out", str(out_dir), "--namespace", "inference"]) == 0
    emitted = yaml.safe_load((out_dir / "rank-1.yaml").read_text())
    assert emitted["metadata"]["namespace"] == "inference" and not (out_dir / "rank-2.yaml").exists()
    plan = (out_dir / "benchmarks" / "rank-1.sh").read_text()   # the plan follows the manifest's namespace
    assert f"{emitted['metadata']['name']}-frontend.inference.svc.cluster.local:8000" in plan
    assert check_manifest(emitted, used_gpus=records[0].used_gpus) == []


@pytest.mark.slow
def test_a_run_with_nothing_feasible_says_why_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    config["sweep"].update({"max_eval_seconds": 0.001, "max_rounds": 1})
    path = tmp_path / "impossible.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    assert main(["sweep", str(path), "--run-dir", str(run)]) == 1
    capsys.readouterr()
    for command in (["show", str(run)], ["emit", str(run)]):
        assert main(command) == 1
        out = capsys.readouterr().out
        assert "no feasible candidate" in out and "exceed runtime" in out
