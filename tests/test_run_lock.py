"""One sweep per run folder: a held folder is refused naming its holder, a dead holder's lock is taken over."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spica_core.errors import RunDirError
from spica_core.run import lock
from spica_core.run.identity import locate
from spica_cli.main import main

ROOT = Path(__file__).resolve().parents[1]
HOLD = "import sys, time; from spica_core.run import lock; lock.acquire(sys.argv[1]); print('held', flush=True); " \
       "time.sleep(600)"


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """Another process holding the lock on a run folder."""
    folder = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield folder, proc
    proc.kill()
    proc.wait()


def test_a_held_folder_is_refused_naming_the_process_then_taken_over_when_it_dies(
        holder: tuple[Path, subprocess.Popen[str]]) -> None:
    folder, proc = holder
    with pytest.raises(RunDirError, match=f"is in use by process {proc.pid} on "):
        lock.acquire(folder)
    os.kill(proc.pid, signal.SIGKILL)  # a killed sweep leaves its lock file behind
    proc.wait()
    try:
        assert lock.acquire(folder) == folder.resolve()
        assert json.loads((folder / lock.LOCK_FILE).read_text())["pid"] == os.getpid()
        assert lock.acquire(folder) == folder.resolve()  # this process again: a no-op
    finally:
        lock.release(folder)


def test_sweep_on_a_held_folder_exits_2_before_any_stage(holder: tuple[Path, subprocess.Popen[str]],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    folder, proc = holder
    code = main(["sweep", str(ROOT / "examples" / "quickstart.yaml"), "--run-dir", str(folder)])
    assert code == 2
    assert f"is in use by process {proc.pid}" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == [lock.LOCK_FILE]  # nothing was written


def test_a_run_dir_that_is_a_file_is_refused_naming_the_option(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    with pytest.raises(RunDirError, match="--run-dir .*notes.txt: is an existing file, not a folder"):
        locate(ROOT / "examples" / "quickstart.yaml", run_dir=target)
    assert main(["sweep", str(ROOT / "examples" / "quickstart.yaml"), "--run-dir", str(target)]) == 2
    assert "--run-dir" in capsys.readouterr().err and target.read_text() == "mine"


def test_the_lock_file_names_the_given_holder(tmp_path: Path) -> None:
    """A sweep's flow process holds the lock but names `spica sweep`, its supervising parent, as the holder."""
    folder = tmp_path / "run"
    try:
        lock.acquire(folder, pid=os.getppid())
        assert json.loads((folder / lock.LOCK_FILE).read_text())["pid"] == os.getppid()
    finally:
        lock.release(folder)
