"""The artifact catalog: every stage round-trips, a re-run reads every stage back, changed inputs recompute."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spica_core.space.branches as branches_mod
import tasks.load_predictor as load_predictor_mod
import tasks.space as space_mod
from spica_core.config.goal import OptimizationGoal
from spica_core.config.model import SmartSearchConfig
from spica_core.emit.records import CandidateRecord, Provenance
from spica_core.errors import NoViableParallelConfigError, RunDirError
from spica_core.evaluate.bands import Band
from spica_core.deployment import Candidate
from spica_core.evaluate.evaluation import Status
from spica_core.evaluate.headroom import Headroom
from examples.make_traces import write_sine_trace
from spica_core.predictors import LoadPredictorResult
from spica_core.run import lock
from spica_core.run.catalog import CATALOG, FINGERPRINT_KEY, RunDir
from spica_core.run.identity import RunIdentity, config_from_row, config_rows, identify
from spica_core.search import CandidateSpace, RankedCandidate, Trial
from spica_core.space.branches import (
    BackendSpace, LegalSpace, enumerate_branches, estimate_shapes, kv_filter, legal_space, ordered_records,
    records_from_rows,
)
from spica_core.space.kv import ShapeKV
from tasks.load_predictor import load_predictor_task
from tasks.space import enumerate_branches_task, kv_filter_task
from tasks.validate import validate_config

STAGES = ["config", "branches", "shapes", "load_predictor", "trials", "ranking", "candidates"]
# The type each stage's rows stand for (the catalog names it in ``rows_are``; it cannot import the types).
ROW_TYPES: dict[str, type] = {"config": RunIdentity, "branches": BackendSpace, "shapes": ShapeKV,
                              "load_predictor": LoadPredictorResult, "trials": Trial, "ranking": RankedCandidate,
                              "candidates": CandidateRecord}
WORKLOAD = {"isl": 1000, "osl": 200, "num_request_ratio": 4, "concurrency": 16}


def make(budget: int = 8, backends: list[str] | None = None, model: str = "Qwen/Qwen3-32B",
         **space: Any) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({
        "search_space": {"model_name": model, "hardware_sku": "h200_sxm", "gpu_budget": budget,
                         "backend": backends or ["vllm", "sglang", "trtllm"], **space},
        "workload": WORKLOAD,
    })


# ---------------------------------------------------------------- the catalog itself


def test_catalog_declares_every_stage_once() -> None:
    assert list(CATALOG) == STAGES
    assert [s.file for s in CATALOG.values()] == [f"{name}.parquet" for name in STAGES]
    for stage in CATALOG.values():
        assert stage.rows_are and stage.inputs and len(stage.schema) > 0
    assert CATALOG["shapes"].inputs == ("branches",)


def _trials(config: SmartSearchConfig) -> list[Trial]:
    """A feasible trial with every field set, an infeasible one that built nothing, and a cache hit."""
    space = CandidateSpace(enumerate_branches(config).branch("agg"))
    first, second = space.proposal(0, "gp"), space.proposal(space.size - 1, "space-filling")
    candidate = Candidate.unroll(config.search_space, first.selection, first.parallel).resolved(
        backend_version="0.24.0", concurrency=16)
    band = Band(p10=0.9, p50=1.0, p90=1.25, rows=40, group="vllm agg tp2", spread=0.02)
    feasible = Trial("agg", 0, 0, Status.feasible, first.parallel, first.raw, first.selection, ask=0,
                     cache_key="key-0", projection=first.projection, candidate=candidate, score=812.5,
                     objectives={"throughput_per_gpu": 812.5}, metrics={"mean_ttft_ms": 250.0, "p90_itl_ms": 12.5,
                                                                        "num_requests": 20.0,
                                                                        "goodput_completed_requests": 19.0},
                     eval_seconds=1.5, replay_seconds=1.25, suggest_seconds=0.75, suggested_by="gp",
                     bands={"ttft_ms": band})
    infeasible = Trial("agg", 1, 1, Status.infeasible, second.parallel, second.raw, second.selection, ask=1,
                       reason="no KV cache left at this memory fraction", cache_key="key-1",
                       projection=second.projection, suggested_by="space-filling")
    hit = dataclasses.replace(feasible, trial=2, ask=2, cache_hit=True, duplicate_of=0, eval_seconds=None,
                              replay_seconds=None)
    return [feasible, infeasible, hit]


PROVENANCE = Provenance("0.1.0", "1.6.1", "0.12.0", {"vllm": "0.24.0"}, "config-fp", "trace-fp",
                        {"trials": "trials-fp"}, "aiconfigurator-core perf database (h200_sxm)")


def declared_values_round_trip(stage: str, config: SmartSearchConfig, rd: RunDir,
                               trace: Path) -> tuple[list[Any], list[Any]]:
    """Values of the stage's declared row type from a real result, and the same values rebuilt from what
    ``rd`` wrote and read back (each type's own row format)."""
    if stage == "config":
        identity = identify(config, trace)
        rd.write(stage, config_rows(config, identity, trace), "fp")
        [row] = rd.rows(stage)
        assert config_from_row(row).normalised() == config.normalised() and row["trace_file"] == str(trace)
        return [identity], [RunIdentity(row["run_id"], row["config_fingerprint"], row["trace_fingerprint"],
                                        json.loads(row["engines_json"]))]
    if stage == "branches":
        space = legal_space(config)
        rd.write(stage, space.rows(), "fp")
        return list(space.spaces), list(LegalSpace.from_rows(config, rd.rows(stage)).spaces)
    if stage == "shapes":
        records = ordered_records(estimate_shapes(legal_space(config)), config.search_space)
        rd.write(stage, [r.row() for r in records], "fp")
        return records, [ShapeKV.from_row(r) for r in rd.rows(stage)]
    if stage == "load_predictor":
        result = LoadPredictorResult(
            best_by_interval={180: {"load_predictor": "kalman"}, 600: "constant_last"},
            losses={180: {"constant_last": 0.5, "custom_1": 0.25}, 600: {"constant_last": math.inf}},
            reason="swept; no_winner_fallback_constant_last@[600]",
            entries={"constant_last": "constant_last", "custom_1": {"load_predictor": "kalman"}})
        rd.write(stage, result.rows(), "fp")
        return [result], [LoadPredictorResult.from_rows(rd.rows(stage))]
    trials = _trials(config)
    if stage == "trials":
        rd.write(stage, [t.to_row() for t in trials], "fp")
        return trials, [Trial.from_row(r) for r in rd.rows(stage)]
    ranked = [RankedCandidate.of(1, trials[0], OptimizationGoal(sla={"ttft_ms": 500.0}))]
    assert (ranked[0].attainment, ranked[0].meets_sla) == (0.95, True)
    if stage == "ranking":
        rd.write(stage, [r.to_row() for r in ranked], "fp")
        return ranked, [RankedCandidate.from_row(r) for r in rd.rows(stage)]
    assert stage == "candidates"
    headroom = Headroom(scale=2.5, attainment=0.97, evaluations=4, points=((1.0, 1.0), (2.5, 0.97)))
    records = [dataclasses.replace(CandidateRecord.of(ranked[0], {"attempts": 3, "reasons": {"no KV": 1}},
                                                      PROVENANCE), headroom=headroom, score_spread=1.5,
                                   tied_with=(2,))]
    rd.write(stage, [r.to_row() for r in records], "fp")
    return records, [CandidateRecord.from_row(r) for r in rd.rows(stage)]


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_stores_values_of_its_declared_row_type_and_reads_them_back_equal(
        stage: str, qwen_tp: SmartSearchConfig, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n')
    rd = RunDir(tmp_path / "run")
    written, read_back = declared_values_round_trip(stage, qwen_tp, rd, trace)
    row_type = ROW_TYPES[stage]
    assert row_type.__name__ in CATALOG[stage].rows_are  # the catalog names the type its rows stand for
    assert written and all(type(value) is row_type for value in written), (row_type, written[:1])
    assert read_back == written
    assert rd.read(stage).schema.equals(CATALOG[stage].schema)


def test_fingerprint_is_formed_from_exactly_the_declared_inputs() -> None:
    branches = CATALOG["branches"]
    fp = branches.fingerprint(search_config={"a": 1, "b": 2}, engines={"aic": "1"})
    assert fp == branches.fingerprint(engines={"aic": "1"}, search_config={"b": 2, "a": 1})
    assert fp != branches.fingerprint(search_config={"a": 1, "b": 2}, engines={"aic": "2"})
    assert fp != CATALOG["load_predictor"].fingerprint(search_config={"a": 1, "b": 2}, trace=None)
    with pytest.raises(TypeError, match="engines"):
        branches.fingerprint(search_config={})
    with pytest.raises(TypeError, match="trace"):
        branches.fingerprint(search_config={}, engines={}, trace=None)


# ---------------------------------------------------------------- round trip of every stage


def rows_from_schema(schema: pa.Schema) -> list[dict[str, Any]]:
    """A row with a value in every column, and one that is all nulls."""
    sample = {pa.string(): "x", pa.int64(): 7, pa.float64(): 2.5, pa.bool_(): True, pa.binary(): b"\x00\x01"}
    return [{f.name: sample[f.type] for f in schema}, {f.name: None for f in schema}]


@pytest.fixture(scope="module")
def qwen_tp() -> SmartSearchConfig:
    return make(deployment_mode=["agg"], backends=["vllm", "trtllm"], context_length=250_000)


def stage_rows(stage: str, config: SmartSearchConfig) -> list[dict[str, Any]]:
    if stage == "config":
        return config_rows(config, identify(config, None), None)
    if stage == "branches":
        return legal_space(config).rows()
    if stage == "shapes":
        return enumerate_branches(config).shape_rows()
    if stage == "load_predictor":
        return LoadPredictorResult(
            best_by_interval={180: {"load_predictor": "kalman"}, 600: "constant_last"},
            losses={180: {"constant_last": 0.5, "custom_1": 0.25}, 600: {"constant_last": math.inf}},
            reason="swept; no_winner_fallback_constant_last@[600]",
            entries={"constant_last": "constant_last", "custom_1": {"load_predictor": "kalman"}}).rows()
    return rows_from_schema(CATALOG[stage].schema)


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_round_trips(stage: str, qwen_tp: SmartSearchConfig, tmp_path: Path) -> None:
    rows = stage_rows(stage, qwen_tp)
    assert rows
    rd = RunDir(tmp_path)
    assert not rd.has(stage) and not rd.fresh(stage, "fp")
    rd.write(stage, rows, "fp")
    table = rd.read(stage)
    assert table.schema.equals(CATALOG[stage].schema)
    assert table.schema.metadata == {FINGERPRINT_KEY: b"fp"}
    assert rd.rows(stage) == rows
    assert rd.fresh(stage, "fp") and not rd.fresh(stage, "other")
    assert [p.name for p in tmp_path.iterdir()] == [CATALOG[stage].file]  # no temporary file left behind


def test_an_empty_artifact_keeps_its_columns(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rd.write("load_predictor", LoadPredictorResult({}, {}, "no_throughput_scaling_candidate").rows(), "fp")
    assert rd.rows("load_predictor") == [] and rd.read("load_predictor").schema.equals(CATALOG["load_predictor"].schema)


def test_write_refuses_rows_that_are_not_the_declared_columns(tmp_path: Path) -> None:
    row = rows_from_schema(CATALOG["ranking"].schema)[0]
    with pytest.raises(ValueError, match=r"missing \['trial'\], extra \['trail'\]"):
        RunDir(tmp_path).write("ranking", [{**{k: v for k, v in row.items() if k != "trial"}, "trail": 1}], "fp")
    assert not RunDir(tmp_path).has("ranking")


def test_fresh_needs_the_declared_columns(tmp_path: Path) -> None:
    """An artifact written with other columns (an older schema) is stale even with the right fingerprint."""
    rd = RunDir(tmp_path)
    old = pa.schema([("rank", pa.int64())]).with_metadata({FINGERPRINT_KEY: b"fp"})
    pq.write_table(pa.Table.from_pylist([{"rank": 1}], schema=old), rd.artifact("ranking"))
    assert rd.has("ranking") and not rd.fresh("ranking", "fp")


def test_append_adds_rows_and_never_mixes_inputs(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    full, empty = rows_from_schema(CATALOG["trials"].schema)
    rd.append("trials", [full], "fp")
    rd.append("trials", [empty, full], "fp")
    assert rd.rows("trials") == [full, empty, full] and rd.fresh("trials", "fp")
    with pytest.raises(RunDirError, match="other inputs"):
        rd.append("trials", [full], "other")
    assert rd.rows("trials") == [full, empty, full]
    rd.write("trials", [], "other")
    rd.append("trials", [empty], "other")
    assert rd.rows("trials") == [empty]


# ---------------------------------------------------------------- branches and shapes rebuilt from their rows

REBUILD_CASES = {
    "qwen-all-backends": make(),  # trtllm dropped from disagg; TP8 is a worker shape no disagg config uses
    "qwen-kv-infeasible-tp1": make(backends=["vllm", "trtllm"], context_length=250_000),
    "qwen-one-gpu": make(budget=1),  # disagg has no legal config on one GPU: the mode is skipped
    "qwen-min-budget": make(10, min_gpu_budget=9, deployment_mode=["agg"]),  # TP4 and TP8 fill no config
    "dsv3-derived": make(32, model="deepseek-ai/DeepSeek-V3"),
    "qwen-pinned-disagg": make(deployment_mode=["disagg"], backends=["trtllm", "vllm"],
                               parallel_configs=[{"prefill": {"tp": 2, "replicas": 2}, "decode": {"tp": 4}}]),
    "dsv3-pinned-menu": make(32, ["vllm", "sglang"], "deepseek-ai/DeepSeek-V3", deployment_mode=["agg"],
                             parallel_configs=[{"tp": 1, "attention_dp": 16, "moe_tp": 16},
                                               {"tp": 8, "moe_ep": 8, "replicas": 2}]),
    "dsv3-pin-kv-infeasible": make(32, model="deepseek-ai/DeepSeek-V3", deployment_mode=["agg"],
                                   parallel_configs=[{"tp": 4, "moe_ep": 4, "replicas": 2}]),
}


def forbid(monkeypatch: pytest.MonkeyPatch, module: Any, *names: str) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a read-back must not enumerate or estimate")

    for name in names:
        monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("config", REBUILD_CASES.values(), ids=REBUILD_CASES.keys())
def test_branches_and_shapes_rebuild_from_their_rows(config: SmartSearchConfig, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    space = legal_space(config)
    records = estimate_shapes(space)
    rd = RunDir(tmp_path)
    rd.write("branches", space.rows(), "fp")
    rd.write("shapes", [r.row() for r in ordered_records(records, config.search_space)], "fp")
    try:
        computed: Any = kv_filter(space, records)
    except NoViableParallelConfigError as exc:
        computed = str(exc)

    forbid(monkeypatch, branches_mod, "legal_space", "estimate_shapes", "shape_kv")
    rebuilt = LegalSpace.from_rows(config, rd.rows("branches"))
    assert rebuilt == space
    assert records_from_rows(rd.rows("shapes")) == records
    try:
        again: Any = kv_filter(rebuilt, records_from_rows(rd.rows("shapes")))
    except NoViableParallelConfigError as exc:
        again = str(exc)
    assert again == computed


# ---------------------------------------------------------------- a re-run reads every stage back

CONFIG_YAML = """search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 8
  deployment_mode: [agg, disagg]
  backend: [vllm, trtllm]
  context_length: 250000
  planner_scaling_policy: [disabled, throughput_180_5]
  load_predictor_candidates: [constant_last, kalman_default_raw]
workload:
  trace_path: trace.jsonl
goal:
  target: goodput_per_gpu
  sla: {ttft_ms: 2000, itl_ms: 40}
"""


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("config")
    write_sine_trace(folder / "trace.jsonl", duration_s=1800, base_rps=2, amplitude_rps=1, period_s=600,
                     isl=1000, osl=100, seed=1)
    path = folder / "config.yaml"
    path.write_text(CONFIG_YAML)
    return path


@dataclasses.dataclass
class Calls:
    """How often each expensive computation ran, as the tasks see it."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def count(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            return real(*args, **kwargs)

        self.counts[name] = 0
        monkeypatch.setattr(module, name, counted)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    c = Calls()
    c.count(monkeypatch, space_mod, "legal_space")
    c.count(monkeypatch, space_mod, "estimate_shapes")
    c.count(monkeypatch, branches_mod, "shape_kv")
    c.count(monkeypatch, load_predictor_mod, "sweep_load_predictor")
    return c


def run_stages(config_path: Path, run_dir: Path) -> tuple[Any, LegalSpace, Any, LoadPredictorResult]:
    run = validate_config.fn(str(config_path), run_dir=str(run_dir))
    space = enumerate_branches_task.fn(run.search_config, run.run_dir)
    return run, space, kv_filter_task.fn(space, run.run_dir), load_predictor_task.fn(run)


def stamps(run_dir: Path) -> dict[str, int]:
    """Modification times of the artifacts (the lock file is rewritten by every sweep: it names the holder)."""
    return {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.name != lock.LOCK_FILE}


def test_a_truncated_artifact_is_moved_aside_and_recomputed_never_a_traceback(config_file: Path,
                                                                             tmp_path: Path) -> None:
    run = validate_config.fn(str(config_file), run_dir=str(tmp_path))
    good = run.run_dir.rows("config")
    path = run.run_dir.artifact("config")
    path.write_bytes(path.read_bytes()[:10])  # a crash of some other tool, a full disk
    with pytest.raises(RunDirError, match="config.parquet cannot be read .*move it away"):
        run.run_dir.rows("config")
    again = validate_config.fn(str(config_file), run_dir=str(tmp_path))
    assert again.run_dir.rows("config") == good
    assert len((tmp_path / "config.parquet.unreadable").read_bytes()) == 10  # kept aside, not deleted


def test_a_foreign_parquet_file_is_kept_aside_and_the_stage_recomputed(config_file: Path, tmp_path: Path) -> None:
    """A valid Parquet file that is not the stage's (another tool's, another version's) is never read as one."""
    pq.write_table(pa.table({"run_id": ["mine"], "notes": ["a user's own table"]}), tmp_path / "config.parquet")
    run = validate_config.fn(str(config_file), run_dir=str(tmp_path))
    assert run.run_dir.rows("config")[0]["run_id"] == run.identity.run_id
    assert pq.read_table(tmp_path / "config.parquet.foreign").to_pylist() == [
        {"run_id": "mine", "notes": "a user's own table"}]


def test_rerun_reads_every_stage_back(config_file: Path, tmp_path: Path, calls: Calls) -> None:
    _, space, branch_set, predictor = run_stages(config_file, tmp_path)
    assert calls.counts == {"legal_space": 1, "estimate_shapes": 1, "shape_kv": 8, "sweep_load_predictor": 1}
    assert predictor.reason == "swept" and set(predictor.best_by_interval) == {180}
    written = stamps(tmp_path)
    assert sorted(written) == ["branches.parquet", "config.parquet", "load_predictor.parquet", "shapes.parquet"]

    _, space2, branch_set2, predictor2 = run_stages(config_file, tmp_path)
    assert calls.counts == {"legal_space": 1, "estimate_shapes": 1, "shape_kv": 8, "sweep_load_predictor": 1}
    assert stamps(tmp_path) == written  # nothing rewritten
    assert space2 == space and branch_set2 == branch_set
    for b, b2 in zip(branch_set.branches, branch_set2.branches, strict=True):
        assert (b2.mode, b2.backends, b2.pool) == (b.mode, b.backends, b.pool)
        assert b2.supported_backends == b.supported_backends and b2.knob_choices == b.knob_choices
    assert branch_set2.dropped == branch_set.dropped and branch_set2.shape_records == branch_set.shape_records
    assert predictor2.rows() == predictor.rows() and predictor2.best_by_interval == predictor.best_by_interval


# ---------------------------------------------------------------- changed inputs recompute


def tamper(rd: RunDir, stage: str) -> None:
    rd.write(stage, rd.rows(stage), "tampered")


def test_a_tampered_fingerprint_recomputes_that_stage(config_file: Path, tmp_path: Path, calls: Calls) -> None:
    run, *_ = run_stages(config_file, tmp_path)
    rd = run.run_dir
    first = {stage: rd.rows(stage) for stage in ("config", "branches", "shapes", "load_predictor")}
    for stage in first:
        tamper(rd, stage)
    run_stages(config_file, tmp_path)
    assert calls.counts == {"legal_space": 2, "estimate_shapes": 2, "shape_kv": 16, "sweep_load_predictor": 2}
    assert {stage: rd.rows(stage) for stage in first} == first  # recomputed to the same rows
    run_stages(config_file, tmp_path)  # and fresh again
    assert calls.counts == {"legal_space": 2, "estimate_shapes": 2, "shape_kv": 16, "sweep_load_predictor": 2}


def changed(config: SmartSearchConfig, **space: Any) -> SmartSearchConfig:
    data = config.normalised()
    return SmartSearchConfig.model_validate({**data, "search_space": {**data["search_space"], **space}})


def test_other_inputs_in_the_same_folder_recompute(config_file: Path, tmp_path: Path, calls: Calls) -> None:
    run, space, *_ = run_stages(config_file, tmp_path)
    rd = run.run_dir
    other = changed(run.search_config, backend=["vllm"])
    space2 = enumerate_branches_task.fn(other, rd)
    assert calls.counts["legal_space"] == 2 and space2 != space
    assert {r["backend"] for r in rd.rows("branches")} == {"vllm"}
    kv_filter_task.fn(space2, rd)  # the shapes fingerprint follows the branches fingerprint
    assert calls.counts["estimate_shapes"] == 2 and {r["backend"] for r in rd.rows("shapes")} == {"vllm"}

    kalman_only = changed(run.search_config, load_predictor_candidates=["kalman_default_raw"])
    load_predictor_task.fn(dataclasses.replace(run, search_config=kalman_only))
    assert calls.counts["sweep_load_predictor"] == 2
    assert {r["entry_label"] for r in rd.rows("load_predictor")} == {"kalman_default_raw"}


def test_a_folder_holding_another_run_is_refused(config_file: Path, tmp_path: Path) -> None:
    validate_config.fn(str(config_file), run_dir=str(tmp_path))
    other = config_file.with_name("other.yaml")
    other.write_text(CONFIG_YAML.replace("gpu_budget: 8", "gpu_budget: 4"))
    with pytest.raises(RunDirError, match="holds a different run"):
        validate_config.fn(str(other), run_dir=str(tmp_path))


# ---------------------------------------------------------------- the whole flow, twice

SWEEP_YAML = """search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 8
  deployment_mode: [agg]
  parallel_configs: [{tp: 2, replicas: 2}]
  router_mode: [round_robin]
  planner_scaling_policy: [disabled]
  agg_max_num_batched_tokens: [8192]
  agg_max_num_seqs: [256, 512]
workload: {isl: 1000, osl: 50, concurrency: 8, num_request_ratio: 2}
goal: {target: throughput_per_gpu}
sweep: {policy: thorough, candidates_per_round: 1, parallel_evals: 1}
"""


@pytest.mark.slow
def test_a_finished_sweep_rerun_reads_every_stage_back(tmp_path: Path, calls: Calls,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import spica_core.evaluate.pool as pool_mod
    import tasks.search as search_mod
    from flows.sweep import sweep

    calls.count(monkeypatch, pool_mod, "evaluate_one")
    calls.count(monkeypatch, search_mod, "rank_trials")
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_YAML)
    first = sweep(config_path=str(path), run_dir=str(tmp_path / "run"))
    assert calls.counts == {"legal_space": 1, "estimate_shapes": 1, "shape_kv": 1, "sweep_load_predictor": 1,
                            "evaluate_one": 2, "rank_trials": 1}
    written = stamps(tmp_path / "run")
    assert sorted(written) == sorted([*(CATALOG[s].file for s in STAGES),
                                      *(f.rstrip("/") for f in CATALOG["candidates"].companions)])
    again = sweep(config_path=str(path), run_dir=str(tmp_path / "run"))
    assert calls.counts == {"legal_space": 1, "estimate_shapes": 1, "shape_kv": 1, "sweep_load_predictor": 1,
                            "evaluate_one": 2, "rank_trials": 1}
    assert stamps(tmp_path / "run") == written  # no artifact rewritten
    assert again.ranking == first.ranking and len(first.ranking) == 2

    # A corrupt shapes.parquet: only the KV filter runs again; its result is the same, so nothing downstream does.
    (tmp_path / "run" / "shapes.parquet").write_bytes(b"not parquet")
    third = sweep(config_path=str(path), run_dir=str(tmp_path / "run"))
    assert calls.counts == {"legal_space": 1, "estimate_shapes": 2, "shape_kv": 2, "sweep_load_predictor": 1,
                            "evaluate_one": 2, "rank_trials": 1}
    changed = {name for name, stamp in stamps(tmp_path / "run").items() if written.get(name) != stamp}
    assert changed == {"shapes.parquet", "shapes.parquet.unreadable"}
    assert third.ranking == first.ranking

    # --from-stage ranking: the ranking and the emit stage are recomputed, nothing upstream.
    before = stamps(tmp_path / "run")
    sweep(config_path=str(path), run_dir=str(tmp_path / "run"), from_stage="ranking")
    assert calls.counts["rank_trials"] == 2 and calls.counts["evaluate_one"] == 2 and calls.counts["shape_kv"] == 2
    changed = {name for name, stamp in stamps(tmp_path / "run").items() if before.get(name) != stamp}
    assert {"ranking.parquet", "candidates.parquet", "report.md"} <= changed
    assert not changed & {"config.parquet", "branches.parquet", "shapes.parquet", "load_predictor.parquet",
                          "trials.parquet"}


def test_from_stage_names_what_it_recomputes() -> None:
    from spica_core.run.catalog import downstream

    assert downstream("shapes") == ("shapes", "trials", "ranking", "candidates")
    assert downstream("load_predictor") == ("load_predictor", "trials", "ranking", "candidates")
    assert downstream("candidates") == ("candidates",)
    with pytest.raises(RunDirError, match="unknown stage 'kv'"):
        downstream("kv")


def test_a_stage_is_read_back_when_fresh_and_made_again_when_its_inputs_change(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    made: list[str] = []

    def make(tag: str) -> Callable[[], list[RankedCandidate]]:
        def run() -> list[RankedCandidate]:
            made.append(tag)
            return []
        return run

    rows, read = (lambda v: [r.to_row() for r in v]), (lambda rs: [RankedCandidate.from_row(r) for r in rs])
    assert rd.kept_or_made("ranking", "inputs-a", make("a"), rows=rows, read=read) == []
    assert rd.kept_or_made("ranking", "inputs-a", make("again"), rows=rows, read=read) == []
    assert made == ["a"] and rd.fresh("ranking", "inputs-a")          # read back, not made again
    rd.kept_or_made("ranking", "inputs-b", make("b"), rows=rows, read=read)
    assert made == ["a", "b"] and rd.fresh("ranking", "inputs-b") and not rd.fresh("ranking", "inputs-a")
