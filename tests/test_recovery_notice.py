"""Issue 22: an artifact moved aside and recomputed is told — one line on stderr, one in the flow run's log."""
from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from spica_cli.sweep import print_set_aside, set_aside_line
from spica_core.run.catalog import RunDir, SetAside
from tasks.notices import listening
from tasks.validate import validate_config
from test_catalog import SWEEP_YAML  # the small sweep the catalog's end-to-end test runs

UNREADABLE = "is not a readable Parquet file ("


def truncate(path: Path, keep: int = 10) -> bytes:
    """What a crash of some other tool or a full disk leaves behind; returns the bytes left."""
    data = path.read_bytes()[:keep]
    path.write_bytes(data)
    return data


# ---------------------------------------------------------------- the catalog records a typed notice


def test_a_truncated_artifact_gives_one_notice_with_file_reason_and_where_it_is_kept(tmp_path: Path) -> None:
    got: list[SetAside] = []
    rd = RunDir(tmp_path, on_set_aside=got.append)
    path = rd.write("branches", [], "fp")
    left = truncate(path)
    assert not rd.fresh("branches", "fp")
    kept = tmp_path / "branches.parquet.unreadable"
    [notice] = rd.set_aside
    assert notice == SetAside("branches", path, kept, notice.reason)
    assert notice.reason.startswith(UNREADABLE) and "\n" not in notice.reason
    assert got == [notice]  # handed to the callback as it happened
    assert kept.read_bytes() == left and not path.exists()
    assert "\n" not in notice.message
    assert notice.message.startswith(f"{path} {UNREADABLE}") and f"kept it as {kept}" in notice.message
    # gone from its place now: asking again is "absent", not a second notice
    assert not rd.fresh("branches", "fp") and not rd.readable("branches") and rd.set_aside == [notice]


def test_a_foreign_file_gives_a_notice_naming_its_columns(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)  # no callback: the notices are still recorded
    pq.write_table(pa.table({"run_id": ["mine"], "notes": ["a user's own table"]}), tmp_path / "config.parquet")
    assert rd.input_fingerprint("config") is None
    assert rd.set_aside == [SetAside("config", tmp_path / "config.parquet", tmp_path / "config.parquet.foreign",
                                     "does not have the columns of the config stage (run_id, notes)")]


def test_a_good_artifact_gives_no_notice(tmp_path: Path) -> None:
    got: list[SetAside] = []
    rd = RunDir(tmp_path, on_set_aside=got.append)
    rd.write("branches", [], "fp")
    assert rd.fresh("branches", "fp") and not rd.fresh("branches", "other inputs") and rd.readable("branches")
    assert rd.set_aside == [] and got == []


def test_the_sweep_s_run_folder_reports_to_listeners(tmp_path: Path) -> None:
    """The validate stage opens the run folder with the task layer's reporter: what `spica sweep` listens to."""
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_YAML)
    first = validate_config.fn(str(path), run_dir=str(tmp_path / "run"))
    good = first.run_dir.rows("config")
    left = truncate(first.run_dir.artifact("config"))
    heard: list[SetAside] = []
    with listening(heard.append):
        again = validate_config.fn(str(path), run_dir=str(tmp_path / "run"))
    validate_config.fn(str(path), run_dir=str(tmp_path / "run"))  # no listener any more: nothing heard
    kept = tmp_path / "run" / "config.parquet.unreadable"
    assert heard == again.run_dir.set_aside == [SetAside("config", tmp_path / "run" / "config.parquet", kept,
                                                         heard[0].reason)]
    assert heard[0].reason.startswith(UNREADABLE)
    assert kept.read_bytes() == left and again.run_dir.rows("config") == good


def test_the_cli_line_is_one_stderr_line() -> None:
    notice = SetAside("config", Path("runs/x/config.parquet"), Path("runs/x/config.parquet.unreadable"),
                      "is not a readable Parquet file (Parquet magic bytes not found in footer)")
    out = io.StringIO()
    print_set_aside(notice, out)
    assert out.getvalue() == set_aside_line(notice) + "\n"
    assert set_aside_line(notice) == (
        "warning: runs/x/config.parquet is not a readable Parquet file (Parquet magic bytes not found in footer); "
        "kept it as runs/x/config.parquet.unreadable and computing the config stage again")


# ---------------------------------------------------------------- `spica sweep`, end to end


def spica_sweep(config: Path, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spica_cli.main", "sweep", str(config), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, cwd=REPO, timeout=900)


def results(run_dir: Path) -> dict[str, list[dict[str, object]]]:
    return {stage: pq.read_table(run_dir / f"{stage}.parquet").to_pylist()
            for stage in ("config", "trials", "ranking", "candidates")}


def flow_run_log(message_part: str) -> list[tuple[str, int, str | None, str]] | None:
    """(logger, level, task run, message) of the run logs in the local Prefect database that contain the text;
    None when the sweep's API is not the local temporary server (PREFECT_API_URL, another database)."""
    if os.environ.get("PREFECT_API_URL") or os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
        return None
    db = Path(os.environ["PREFECT_HOME"]) / "prefect.db"
    with sqlite3.connect(db) as con:
        return con.execute("SELECT log.name, log.level, task_run.name, log.message FROM log "
                           "JOIN flow_run ON flow_run.id = log.flow_run_id "
                           "LEFT JOIN task_run ON task_run.id = log.task_run_id "
                           "WHERE instr(log.message, ?) > 0", (message_part,)).fetchall()


@pytest.mark.slow
def test_spica_sweep_tells_which_artifact_it_set_aside(tmp_path: Path) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(SWEEP_YAML)
    run_dir = tmp_path / "run"
    first = spica_sweep(config, run_dir)
    assert first.returncode == 0, first.stderr
    assert "config.parquet" not in first.stderr and "warning:" not in first.stderr  # nothing to tell
    before = results(run_dir)

    left = truncate(run_dir / "config.parquet")
    again = spica_sweep(config, run_dir)
    assert again.returncode == 0, again.stderr
    kept = run_dir / "config.parquet.unreadable"
    [line] = [line for line in again.stderr.splitlines() if "config.parquet" in line]
    assert line.startswith(f"warning: {run_dir / 'config.parquet'} {UNREADABLE}")
    assert f"kept it as {kept} " in line and line.endswith("computing the config stage again")
    assert sum("warning:" in line for line in again.stderr.splitlines()) == 1
    assert kept.read_bytes() == left  # the old file, as it was
    assert results(run_dir) == before  # recomputed to the same identity; every other stage read back
    assert again.stdout.split("artifacts:")[0] == first.stdout.split("artifacts:")[0]

    logged = flow_run_log(str(kept))
    if logged is not None:  # the same line in the flow run's log: a warning of the task that read the artifact
        assert logged == [("prefect.task_runs", 30, "validate", line.removeprefix("warning: "))]
