"""The run folder and its stage artifacts, declared in one place (a Kedro-style catalog).

Every stage writes one Parquet file into ``runs/<run id>/``; writes are atomic so a crash never
leaves a half-written artifact that a resumed run would trust.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

# stage name -> file name inside the run folder
CATALOG: Final[dict[str, str]] = {
    "config": "config.parquet",
    "branches": "branches.parquet",
    "shapes": "shapes.parquet",
    "load_predictor": "load_predictor.parquet",
    "trials": "trials.parquet",
    "ranking": "ranking.parquet",
}

DEFAULT_RUNS_ROOT: Final = Path("runs")


class RunDir:
    """``runs/<run id>/``: where one sweep's artifacts live."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def for_run(cls, run_id: str, runs_root: str | Path | None = None) -> RunDir:
        return cls(Path(runs_root or DEFAULT_RUNS_ROOT) / run_id)

    def artifact(self, stage: str) -> Path:
        return self.path / CATALOG[stage]

    def has(self, stage: str) -> bool:
        return self.artifact(stage).is_file()

    def write(self, stage: str, rows: list[dict[str, Any]] | pa.Table, schema: pa.Schema | None = None) -> Path:
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        return write_table_atomic(table, self.artifact(stage))

    def read(self, stage: str) -> pa.Table:
        return pq.read_table(self.artifact(stage))

    def rows(self, stage: str) -> list[dict[str, Any]]:
        return self.read(stage).to_pylist()


def write_table_atomic(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path
