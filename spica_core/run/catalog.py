"""The run folder and its stage artifacts, declared in one place (a Kedro-style catalog).

Every stage writes one Parquet file into ``runs/<run id>/``. :data:`CATALOG` declares each stage
once: its file, its Arrow schema, the Python type its rows stand for and the named inputs its
*input fingerprint* is formed from. The fingerprint is stored in the file's schema metadata, so a
task asks :meth:`RunDir.fresh` whether the artifact on disk was computed from the inputs it has
now — if so it reads the artifact back, otherwise it computes and writes it. Writes are atomic,
so a crash never leaves a half-written artifact that a resumed run would trust.

An artifact that cannot be used as it is (truncated, another tool's file) is moved aside, never deleted,
and its stage computed again; each such recovery is a :class:`SetAside` notice, recorded on the
:class:`RunDir` and handed to its ``on_set_aside`` callback, so that the caller (the task layer, the CLI)
can tell the user. This module only records them: it knows nothing of Prefect or of the terminal.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Final, Mapping, Sequence, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from spica_core.errors import RunDirError
from spica_core.store import fingerprint
from spica_core.run.stages import STAGE_NAMES, StageName

T = TypeVar("T")

log = logging.getLogger(__name__)

DEFAULT_RUNS_ROOT: Final = Path("runs")

# Schema-metadata key under which an artifact records the fingerprint of the inputs it came from.
FINGERPRINT_KEY: Final = b"spica.inputs_fingerprint"


@dataclass(frozen=True)
class Stage:
    """One stage's artifact: file, columns, what its rows stand for, what its input fingerprint covers.

    ``rows_are`` names the Python type the rows stand for in words: the row types live in the packages above
    ``run`` (search, emit), which this module must not import; ``tests/test_catalog.py`` checks each stage
    writes and reads back values of the type it names.
    """

    name: str
    file: str
    schema: pa.Schema
    rows_are: str               # what one row is, and how rows make up the row type
    inputs: tuple[str, ...]     # the named values the input fingerprint is formed from
    after: tuple[str, ...] = ()       # the stages whose results it is computed from (for --from-stage)
    companions: tuple[str, ...] = ()  # files the stage writes next to its Parquet, for people and kubectl

    def fingerprint(self, **inputs: Any) -> str:
        """Hash of exactly the declared inputs (JSON values); a missing or extra input is a bug."""
        if sorted(inputs) != sorted(self.inputs):
            raise TypeError(f"the {self.name} fingerprint is formed from {sorted(self.inputs)}, got {sorted(inputs)}")
        return fingerprint({"stage": self.name, "inputs": inputs})

CONFIG_SCHEMA: Final = pa.schema([
    ("run_id", pa.string()),
    ("config_fingerprint", pa.string()),
    ("trace_fingerprint", pa.string()),
    ("trace_file", pa.string()),
    ("engines_json", pa.string()),
    ("config_json", pa.string()),
])

BRANCHES_SCHEMA: Final = pa.schema([
    ("mode", pa.string()), ("backend", pa.string()), ("hardware_sku", pa.string()), ("backend_version", pa.string()),
    ("parallel_config", pa.string()), ("label", pa.string()), ("strategy", pa.string()),
    ("used_gpus", pa.int64()), ("pinned", pa.bool_()), ("supported", pa.bool_()), ("reason", pa.string()),
])

SHAPES_SCHEMA: Final = pa.schema([
    ("hardware_sku", pa.string()), ("backend", pa.string()), ("backend_version", pa.string()), ("shape", pa.string()),
    ("tp", pa.int64()), ("attention_dp", pa.int64()), ("moe_tp", pa.int64()), ("moe_ep", pa.int64()),
    ("pp", pa.int64()), ("gpus", pa.int64()), ("strategy", pa.string()),
    ("quantization", pa.string()), ("kv_cache_dtype", pa.string()), ("native_precision", pa.bool_()),
    ("weight_bytes_per_gpu", pa.int64()), ("kv_tokens_per_rank", pa.int64()), ("max_seq_len", pa.int64()),
    ("feasible", pa.bool_()),
    ("reason", pa.string()),
])

LOAD_PREDICTOR_SCHEMA: Final = pa.schema([
    ("interval_seconds", pa.int64()),
    ("entry_label", pa.string()),
    ("entry_json", pa.string()),
    ("mean_loss", pa.float64()),
    ("winner", pa.bool_()),
    ("reason", pa.string()),
])

TRIALS_SCHEMA: Final = pa.schema([
    ("mode", pa.string()), ("round", pa.int64()), ("ask", pa.int64()), ("trial", pa.int64()),
    ("status", pa.string()),
    ("reason", pa.string()), ("cache_hit", pa.bool_()), ("duplicate_of", pa.int64()), ("cache_key", pa.string()),
    ("backend", pa.string()), ("used_gpus", pa.int64()), ("parallel", pa.string()), ("score", pa.float64()),
    ("objectives_json", pa.string()), ("metrics_json", pa.string()), ("params_json", pa.string()),
    ("selection_json", pa.string()), ("projection_json", pa.string()), ("parallel_json", pa.string()),
    ("sample_json", pa.string()), ("eval_seconds", pa.float64()), ("replay_seconds", pa.float64()),
    ("suggest_seconds", pa.float64()), ("suggested_by", pa.string()), ("bands_json", pa.string()),
    ("requests", pa.binary()), ("calibration_json", pa.string()), ("uncalibrated_json", pa.string()),
])

RANKING_SCHEMA: Final = pa.schema([
    ("rank", pa.int64()), ("mode", pa.string()), ("backend", pa.string()), ("parallel", pa.string()),
    ("used_gpus", pa.int64()), ("score", pa.float64()), ("objectives_json", pa.string()),
    ("metrics_json", pa.string()), ("sample_json", pa.string()), ("round", pa.int64()), ("trial", pa.int64()),
    ("bands_json", pa.string()), ("attainment", pa.float64()), ("meets_sla", pa.bool_()),
    ("calibration_json", pa.string()), ("uncalibrated_json", pa.string()),
])

CANDIDATES_SCHEMA: Final = pa.schema([
    ("rank", pa.int64()), ("score", pa.float64()), ("used_gpus", pa.int64()), ("mode", pa.string()),
    ("backend", pa.string()), ("parallel", pa.string()), ("round", pa.int64()), ("trial", pa.int64()),
    ("config_json", pa.string()), ("metrics_json", pa.string()), ("objectives_json", pa.string()),
    ("tally_json", pa.string()), ("provenance_json", pa.string()), ("bands_json", pa.string()),
    ("headroom_json", pa.string()), ("attainment", pa.float64()), ("meets_sla", pa.bool_()),
    ("score_spread", pa.float64()), ("tied_with_json", pa.string()),
    ("calibration_json", pa.string()), ("uncalibrated_json", pa.string()),
])

# Input names: "config" = the normalised config's fingerprint, "search_config" = the normalised config
# after the goal's policy filtering (what the later stages search), "trace" = the trace content's
# fingerprint (None for a synthetic workload), "engines" = the engine versions; a stage name = that
# stage's input fingerprint; "context" = the search context's key (config after policy filtering and
# the load-predictor result), "trials" = the trials file's content fingerprint, "ranking" = the ranking
# file's content fingerprint, "options" = the emit options (how many manifests, image, namespace, PVC).
_STAGES: Final = (
    Stage("config", "config.parquet", CONFIG_SCHEMA,
          "the one row, a RunIdentity: the run's identity, its normalised config (config_json) and resolved "
          "trace file",
          ("config", "trace", "engines")),
    Stage("branches", "branches.parquet", BRANCHES_SCHEMA,
          "one (mode, backend, parallel config) legality verdict, or one config-less row for a pair that "
          "cannot run; the rows of a (mode, backend) pair are one BackendSpace, all rows one LegalSpace",
          ("search_config", "engines"), after=("config",)),
    Stage("shapes", "shapes.parquet", SHAPES_SCHEMA,
          "one ShapeKV: the KV verdict of one distinct (backend, precision, worker shape)",
          ("branches",), after=("branches",)),
    Stage("load_predictor", "load_predictor.parquet", LOAD_PREDICTOR_SCHEMA,
          "one (throughput interval, predictor entry) loss, or an unscored winner; all rows are one "
          "LoadPredictorResult", ("search_config", "trace"), after=("config",)),
    Stage("trials", "trials.parquet", TRIALS_SCHEMA,
          "one Trial: an attempt of one round of one branch (appended per ask)",
          ("context",), after=("shapes", "load_predictor")),
    Stage("ranking", "ranking.parquet", RANKING_SCHEMA,
          "one RankedCandidate: a ranked candidate (scalar rank) or a member of the Pareto front",
          ("trials",), after=("trials",)),
    Stage("candidates", "candidates.parquet", CANDIDATES_SCHEMA,
          "one CandidateRecord: an emitted candidate (the ranked list, or the Pareto front) with the run's tally "
          "and provenance",
          ("ranking", "options"), after=("ranking",),
          companions=("candidates.json", "candidates.csv", "manifests/", "benchmarks/", "report.md", "report.html",
                      "report/")),
)

CATALOG: Final[Mapping[str, Stage]] = {s.name: s for s in _STAGES}
assert STAGE_NAMES == tuple(CATALOG), "stages.StageName lists the catalog's stages in order"


def downstream(stage: str) -> tuple[str, ...]:
    """``stage`` and every stage computed from it, in catalog order (what ``--from-stage`` recomputes)."""
    if stage not in CATALOG:
        raise RunDirError(f"--from-stage: unknown stage {stage!r}; stages: {', '.join(CATALOG)}")
    hit = {stage}
    for s in _STAGES:
        if hit & set(s.after):
            hit.add(s.name)
    return tuple(s.name for s in _STAGES if s.name in hit)


@dataclass(frozen=True)
class SetAside:
    """An artifact that could not be used: moved aside (kept, never deleted); its stage is computed again."""

    stage: str
    path: Path          # the stage's artifact, where the file was
    kept_at: Path       # where the old file is kept now (``<file>.unreadable`` or ``<file>.foreign``)
    reason: str         # why, one line: "is not a readable Parquet file (...)", "does not have the columns ..."

    @property
    def message(self) -> str:
        """One line: which file, why, where the old one is kept."""
        return f"{self.path} {self.reason}; kept it as {self.kept_at} and computing the {self.stage} stage again"


class RunDir:
    """``runs/<run id>/``: where one sweep's artifacts live, read and written by stage name."""

    def __init__(self, path: str | Path, recompute: Sequence[str] = (),
                 on_set_aside: Callable[[SetAside], None] | None = None):
        """``recompute``: stages whose artifact is treated as stale until this process writes it again.
        ``on_set_aside``: called with each artifact this object moves aside, as it happens (also in
        :attr:`set_aside`, in order)."""
        self.path = Path(path)
        self._stale = set(recompute)
        self.set_aside: list[SetAside] = []
        self._on_set_aside = on_set_aside

    @classmethod
    def for_run(cls, run_id: str, runs_root: str | Path | None = None) -> RunDir:
        return cls(Path(runs_root or DEFAULT_RUNS_ROOT) / run_id)

    def artifact(self, stage: str) -> Path:
        return self.path / CATALOG[stage].file

    def has(self, stage: str) -> bool:
        return self.artifact(stage).is_file()

    def readable(self, stage: str) -> bool:
        """Present, a Parquet file and with the stage's declared columns. Anything else at that name
        (truncated, or another tool's file) is moved aside to ``<file>.unreadable`` or ``<file>.foreign``,
        never deleted, and the stage is recomputed."""
        return self._schema(stage) is not None

    def _schema(self, stage: str) -> pa.Schema | None:
        path = self.artifact(stage)
        if not path.is_file():
            return None
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError) as exc:
            return self._set_aside(stage, "unreadable", f"is not a readable Parquet file ({exc})")
        if not schema.equals(CATALOG[stage].schema):
            return self._set_aside(stage, "foreign", f"does not have the columns of the {stage} stage "
                                   f"({', '.join(schema.names[:6])}{', ...' if len(schema.names) > 6 else ''})")
        return schema

    def _set_aside(self, stage: str, suffix: str, problem: str) -> None:
        path = self.artifact(stage)
        aside = path.with_name(f"{path.name}.{suffix}")
        os.replace(path, aside)
        notice = SetAside(stage, path, aside, " ".join(problem.split()))  # one line, whatever Arrow's text was
        log.warning("%s", notice.message)
        self.set_aside.append(notice)
        if self._on_set_aside is not None:
            self._on_set_aside(notice)
        return None

    def fresh(self, stage: str, inputs_fingerprint: str) -> bool:
        """Present, computed from these inputs and with the declared columns: read it instead of recomputing."""
        if stage in self._stale:
            return False
        schema = self._schema(stage)
        if schema is None:
            return False
        if (schema.metadata or {}).get(FINGERPRINT_KEY) != inputs_fingerprint.encode():
            log.warning("%s was computed from other inputs; computing the stage again", self.artifact(stage))
            return False
        return True

    def kept_or_made(self, stage: str, inputs_fingerprint: str, make: Callable[[], T],
                     rows: Callable[[T], Sequence[Mapping[str, Any]]],
                     read: Callable[[list[dict[str, Any]]], T]) -> T:
        """The stage's value: read back from its artifact when that is fresh for these inputs, else made
        and written (the rule every stage follows, so that a resumed run recomputes nothing it has)."""
        if self.fresh(stage, inputs_fingerprint):
            return read(self.rows(stage))
        value = make()
        self.write(stage, rows(value), inputs_fingerprint)
        return value

    def write(self, stage: str, rows: Sequence[Mapping[str, Any]], inputs_fingerprint: str) -> Path:
        """Replace the artifact with these rows, tagged with the fingerprint of the inputs they came from."""
        spec = CATALOG[stage]
        names = set(spec.schema.names)
        for row in rows:
            if set(row) != names:
                raise ValueError(f"a {stage} row must have exactly the columns {spec.schema.names}; "
                                 f"missing {sorted(names - set(row))}, extra {sorted(set(row) - names)}")
        schema = spec.schema.with_metadata({FINGERPRINT_KEY: inputs_fingerprint.encode()})
        self._stale.discard(stage)
        return _write_atomic(pa.Table.from_pylist(list(rows), schema=schema), self.artifact(stage))

    def append(self, stage: str, rows: Sequence[Mapping[str, Any]], inputs_fingerprint: str) -> Path:
        """Add rows to the artifact (rewritten atomically: a crash keeps the old file).

        Stored rows computed from other inputs are never mixed with new ones: that raises, and the
        caller decides (``fresh`` first, ``write`` to start over).
        """
        old: list[dict[str, Any]] = []
        if self.fresh(stage, inputs_fingerprint):
            old = self.rows(stage)
        elif self.has(stage):
            raise RunDirError(f"{self.artifact(stage)} was computed from other inputs; "
                              f"rows for these inputs cannot be appended to it")
        return self.write(stage, [*old, *rows], inputs_fingerprint)

    def input_fingerprint(self, stage: str) -> str | None:
        """The fingerprint of the inputs a present artifact was computed from (provenance)."""
        schema = self._schema(stage)
        stored = (schema.metadata or {}).get(FINGERPRINT_KEY) if schema is not None else None
        return stored.decode() if stored else None

    def read(self, stage: str) -> pa.Table:
        try:
            return pq.read_table(self.artifact(stage))
        except (pa.ArrowException, OSError) as exc:
            raise RunDirError(f"{self.artifact(stage)} cannot be read ({exc}); move it away to compute the stage "
                              "again, or choose another --run-dir") from None

    def rows(self, stage: str) -> list[dict[str, Any]]:
        return self.read(stage).to_pylist()


def _write_atomic(table: pa.Table, path: Path) -> Path:
    """Write beside the target, then rename over it: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


__all__ = [
    "CATALOG", "Stage", "StageName", "RunDir", "SetAside", "DEFAULT_RUNS_ROOT", "FINGERPRINT_KEY",
    "CONFIG_SCHEMA", "BRANCHES_SCHEMA", "SHAPES_SCHEMA", "LOAD_PREDICTOR_SCHEMA", "TRIALS_SCHEMA", "RANKING_SCHEMA",
]
