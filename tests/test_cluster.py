"""Evaluations on an existing Dask or Ray cluster (``spica_core.evaluate.cluster``, docs/clusters.md).

The slow tests start a real cluster on 127.0.0.1 (a Dask scheduler and two one-thread worker processes; a
Ray head with two CPUs), stop it by process group at the end, and replay the same tiny candidates as
tests/test_evaluation.py through it.
"""
from __future__ import annotations

import dataclasses
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_evaluation import FAST, SLOW, modelled, request

from spica_core.errors import SpicaError
from spica_core.evaluate import EvalPool, EvalRequest, SequentialEvaluator, make_evaluator
from spica_core.evaluate.cluster import ClusterEvaluator

BIN = Path(sys.executable).parent
LONG = {**SLOW, "num_request_ratio": 6000}  # ~15 s in-process: always past the tests' deadlines and kills
# A small sweep whose search does not depend on timings (quasi-random picks) and whose replays are exactly
# reproducible (round-robin routing; the KV router's replay varies by ~0.1 %), so two runs are comparable.
SWEEP = """search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 8
  deployment_mode: [agg]
  backend: [vllm]
  agg_max_num_seqs: [256, 512, 1024]
  agg_max_num_batched_tokens: [8192]
  router_mode: [round_robin]
  planner_scaling_policy: [disabled]
workload:
  trace_path: trace.jsonl
  replay_concurrency: 16
goal:
  target: throughput_per_gpu
sweep: {max_rounds: 2, candidates_per_round: 4, parallel_evals: 2, seed: 5, algorithm: QUASI_RANDOM_SEARCH}
"""


def _no_core_dumps() -> None:
    """Workers killed with SIGABRT (a native abort) must not leave core files behind."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A process in a session of its own, so that it and its children stop together by its id."""
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_no_core_dumps, env=env or os.environ.copy(),
                                cwd=log.parent)


def _stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM to the process (it stops its children), then SIGKILL to what is left of its group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group (workers of a stopped nanny, ...)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _wait(what: str, ok: Callable[[], bool], timeout: float, procs: list[subprocess.Popen[bytes]],
          logs: list[Path]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.3)
    tail = "\n".join(log.read_text(errors="replace")[-3000:] for log in logs if log.exists())
    raise RuntimeError(f"{what} did not come up:\n{tail}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _kill_marked(name: str, value: str) -> None:
    """SIGKILL the processes (started by this test) whose environment carries ``name=value``."""
    needle = f"{name}={value}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def numbered(*reqs: EvalRequest) -> list[EvalRequest]:
    return [dataclasses.replace(r, eval_id=f"e{i}") for i, r in enumerate(reqs)]


def same_outcome(a: Any, b: Any) -> None:
    assert (a.status, a.reason, a.eval_id) == (b.status, b.reason, b.eval_id)
    assert a.score == b.score and a.objectives == b.objectives
    assert a.candidate.to_sample() == b.candidate.to_sample()
    assert modelled(a.report) == modelled(b.report)


# ---------------------------------------------------------------- addresses (no cluster)


@pytest.mark.parametrize("bad", ["localhost:8786", "http://127.0.0.1:8786", "tcp://127.0.0.1", "tcp://:8786",
                                 "tcp://127.0.0.1:port", "ray:/127.0.0.1:10001", ""])
def test_an_address_of_another_form_names_the_option_and_the_forms(bad: str) -> None:
    with pytest.raises(SpicaError) as err:
        make_evaluator(1, 10, bad)
    text = str(err.value)
    assert "sweep.cluster" in text and "--cluster" in text
    assert "tcp://HOST:PORT" in text and "ray://HOST:PORT" in text


@pytest.mark.parametrize(("address", "parsed"), [("tcp://[::1]:8786", ("tcp", "::1", 8786)),
                                               ("ray://head.example:10001", ("ray", "head.example", 10001)),
                                               (" tcp://10.0.0.2:1 ", ("tcp", "10.0.0.2", 1))])
def test_the_config_and_the_evaluator_read_an_address_alike(address: str, parsed: tuple[str, str, int]) -> None:
    from spica_core.config.sweep import SweepConfig, parse_cluster_address
    from spica_core.evaluate.cluster_connect import _parse

    assert parse_cluster_address(address) == _parse(address) == parsed
    assert SweepConfig(cluster=address).cluster == address
    for bad in ("tcp://[::1]", "tcp://[zz]:1", "tcp://host:70000", "tcp://a b:1"):
        with pytest.raises(ValueError, match="tcp://HOST:PORT"):
            SweepConfig(cluster=bad)
        with pytest.raises(SpicaError, match="sweep.cluster"):
            _parse(bad)


@pytest.mark.parametrize("scheme", ["tcp", "ray"])
def test_an_unreachable_address_fails_quickly_naming_it(scheme: str) -> None:
    address = f"{scheme}://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(SpicaError, match=address):
        make_evaluator(1, 10, address)
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(("scheme", "module", "hint"), [("tcp", "distributed", "pip install distributed"),
                                                         ("ray", "ray", "pip install 'ray[client]'")])
def test_an_engine_that_is_not_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch, scheme: str,
                                                              module: str, hint: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    with pytest.raises(SpicaError, match=f"{scheme}://127.0.0.1:1 .*not installed: {re.escape(hint)}"):
        make_evaluator(1, 10, f"{scheme}://127.0.0.1:1")


@pytest.mark.slow
def test_a_port_that_is_not_a_scheduler_fails_within_seconds() -> None:
    """A listener that never answers: distributed's own handshake read has no timeout, Ray retries ~30 s."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        for scheme in ("tcp", "ray"):
            t0 = time.monotonic()
            with pytest.raises(SpicaError, match=f"{scheme}://127.0.0.1:{port}"):
                make_evaluator(1, 10, f"{scheme}://127.0.0.1:{port}")
            assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(("address", "says"), [
    ("localhost:8786", "--cluster: 1 problem(s)\n  - sweep.cluster: must be tcp://HOST:PORT"),
    ("tcp://127.0.0.1:1", "cannot reach the Dask scheduler at tcp://127.0.0.1:1"),
    ("ray://127.0.0.1:1", "cannot reach the Ray client server at ray://127.0.0.1:1"),
])
def test_spica_sweep_with_a_bad_cluster_exits_2_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, says: str) -> None:
    from spica_cli.main import main
    from examples.make_traces import write_poisson_trace

    config = tmp_path / "config.yaml"
    config.write_text(SWEEP)
    write_poisson_trace(tmp_path / "trace.jsonl", num_requests=20, rate_rps=8, isl=2000, osl=100, seed=1)
    t0 = time.monotonic()
    assert main(["sweep", str(config), "--runs-root", str(tmp_path / "runs"), "--cluster", address]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert time.monotonic() - t0 < 15 and not (tmp_path / "runs").exists()  # no Prefect server, no run folder


# ---------------------------------------------------------------- Dask


def start_dask(root: Path, workers: int, procs: list[subprocess.Popen[bytes]]) -> str:
    """A scheduler and ``workers`` one-thread worker processes (each under its nanny) on 127.0.0.1; the
    processes go into ``procs`` as they start (so a failure half-way still stops them)."""
    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = [root / "scheduler.log", root / "workers.log"]
    procs.append(_spawn([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                         "--no-dashboard"], logs[0]))
    _wait("the Dask scheduler", lambda: _listening(port), 60, procs, logs)
    procs.append(_spawn([str(BIN / "dask"), "worker", address, "--nworkers", str(workers), "--nthreads", "1",
                         "--host", "127.0.0.1", "--no-dashboard", "--local-directory", str(root / "space")], logs[1]))
    with Client(address, timeout=10, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=60)
    return address


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two worker processes, the way docs/clusters.md starts them."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield start_dask(tmp_path_factory.mktemp("dask"), 2, procs)
    finally:
        for proc in reversed(procs):
            _stop(proc)


def kill_under(ev: ClusterEvaluator, index: int, kills: int, pid_of: Callable[[Any], int | None]) -> tuple[
        threading.Thread, threading.Event, list[int]]:
    """A thread that SIGABRTs (a native abort) the process running request ``index`` (its eval_id, see
    ``numbered``) once it has run 1 s, ``kills`` times."""
    stop, killed = threading.Event(), []

    def run() -> None:
        while len(killed) < kills and not stop.is_set():
            for task in [t for ts in list(ev._fifo.values()) for t in list(ts)]:
                pid = pid_of(task.slot)
                if (task.request.eval_id == f"e{index}" and task.start is not None and time.perf_counter() - task.start >= 1.0
                        and pid and pid not in killed):
                    os.kill(pid, signal.SIGABRT)
                    killed.append(pid)
                    break
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, stop, killed


@pytest.mark.slow
def test_dask_outcomes_match_the_local_evaluator_in_request_order(dask_cluster: str) -> None:
    reqs = numbered(request(FAST), request(FAST, {"tp": 4}), request(FAST, {"tp": 4, "replicas": 3}),
                    request(FAST, backend=["sglang"], num_g2_blocks=100, kv_bytes_per_token=262144))
    local = SequentialEvaluator().evaluate_batch(reqs)
    assert [o.status for o in local] == ["feasible", "feasible", "infeasible", "failed"]
    with make_evaluator(1, 120, dask_cluster) as ev:
        assert isinstance(ev, ClusterEvaluator) and ev.engine == "dask" and ev.workers == 2
        remote = ev.evaluate_batch(reqs)
        many = ev.evaluate_batch(numbered(*[request(FAST, {"tp": 2 + 2 * (i % 2)}) for i in range(9)]))
    for a, b in zip(remote, local, strict=True):
        same_outcome(a, b)
        assert a.timings["wall_s"] > 0
    assert [o.eval_id for o in many] == [f"e{i}" for i in range(9)]  # queued two deep per worker, still in order
    for i, o in enumerate(many):  # even: TP2 (request 0), odd: TP4 (request 1)
        same_outcome(dataclasses.replace(o, eval_id=""), dataclasses.replace(remote[i % 2], eval_id=""))
    assert ev.restarts == 0


def scheduler_transitions(address: str) -> int:
    """How many task state transitions the scheduler has made: grows only when work runs on the cluster."""
    from distributed import Client

    with Client(address, timeout=10, set_as_default=False) as client:
        return int(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter))


def ranked(folder: Path) -> list[tuple[Any, ...]]:
    import pyarrow.parquet as pq

    trials = {(t["round"], t["trial"]): t for t in pq.read_table(folder / "trials.parquet").to_pylist()}
    return [(r["rank"], r["score"], trials[(r["round"], r["trial"])]["selection_json"],
             trials[(r["round"], r["trial"])]["parallel_json"])
            for r in pq.read_table(folder / "ranking.parquet").to_pylist()]


@pytest.mark.slow
def test_a_sweep_on_the_dask_cluster_ranks_like_the_local_pool(dask_cluster: str, tmp_path: Path) -> None:
    """The same config through the flow twice, on two local worker processes and on the cluster's two: where
    the evaluations ran changes neither the run's identity nor a score nor the ranking."""
    from flows.sweep import sweep
    from examples.make_traces import write_poisson_trace

    config = tmp_path / "config.yaml"
    config.write_text(SWEEP)
    write_poisson_trace(tmp_path / "trace.jsonl", num_requests=100, rate_rps=8, isl=2000, osl=100, seed=1)
    before = scheduler_transitions(dask_cluster)
    local = sweep(config_path=str(config), run_dir=str(tmp_path / "local"))
    assert scheduler_transitions(dask_cluster) == before  # the default stays the local pool
    remote = sweep(config_path=str(config), run_dir=str(tmp_path / "dask"), cluster=dask_cluster)
    assert scheduler_transitions(dask_cluster) >= before + 3 * 8  # 8 evaluations, each ≥ 3 task transitions
    assert remote.run_id == local.run_id and remote.tally.attempts == local.tally.attempts == 8
    assert remote.tally.feasible >= 2
    expected = ranked(tmp_path / "local")
    assert len(expected) >= 2 and ranked(tmp_path / "dask") == expected
    with pytest.raises(SpicaError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:1"):
        sweep(config_path=str(config), run_dir=str(tmp_path / "nowhere"), cluster="tcp://127.0.0.1:1")


@pytest.mark.slow
def test_dask_deadline_is_the_pools_infeasible_outcome_and_replaces_the_worker(dask_cluster: str) -> None:
    with EvalPool(1, max_eval_seconds=2.0) as pool:
        (pooled,) = pool.evaluate_batch([request(LONG)])
    with make_evaluator(1, 120, dask_cluster) as ev:
        ev.evaluate_batch([request(FAST), request(FAST, {"tp": 4})])  # both workers load AIC once
        pids = {w.pid for w in ev._backend._workers.values()}
        ev.max_eval_seconds = 2.0
        t0 = time.perf_counter()  # two per worker: one FAST is queued behind LONG (and moves, or is requeued)
        slow, fast, *others = ev.evaluate_batch([request(LONG), request(FAST), request(FAST), request(FAST)])
        assert time.perf_counter() - t0 < 10
        assert [o.status for o in others] == ["feasible"] * 2
        assert (slow.status, slow.reason) == (pooled.status, pooled.reason) == ("infeasible",
                                                                                 "exceed runtime: replay > 2s")
        assert slow.timings["wall_s"] >= 2.0 and fast.status == "feasible"
        assert ev.restarts == 1
        end = time.monotonic() + 30  # the killed worker process is gone (its nanny starts another)
        while all(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.2)
        assert not all(_alive(p) for p in pids)
        ev.max_eval_seconds = 120
        again = ev.evaluate_batch([request(FAST)] * 4)
        assert [o.status for o in again] == ["feasible"] * 4
        assert modelled(again[0].report) == modelled(fast.report)


@pytest.mark.slow
def test_dask_a_worker_lost_twice_fails_the_candidate_and_the_sweep_goes_on(dask_cluster: str) -> None:
    with make_evaluator(1, 120, dask_cluster) as ev:
        ev.evaluate_batch([request(FAST), request(FAST)])
        workers = ev._backend._workers
        killer, stop, killed = kill_under(ev, 0, 2, lambda slot: workers[slot].pid if slot in workers else None)
        try:
            t0 = time.perf_counter()
            lost, *others = ev.evaluate_batch(numbered(request(LONG), request(FAST), request(FAST), request(FAST)))
        finally:
            stop.set()
            killer.join(15)
        assert len(killed) == 2 and time.perf_counter() - t0 < 60
        assert [o.status for o in others] == ["feasible"] * 3
        assert lost.status == "failed" and lost.eval_id == "e0"
        assert lost.reason.startswith("worker lost twice: ")
        assert lost.reason.count("left the cluster while evaluating") == 2
        for pid in killed:
            assert f"(pid {pid})" in lost.reason
        assert ev.restarts == 2
        after = ev.evaluate_batch([request(FAST)] * 3)  # on the workers the nannies started again
        assert [o.status for o in after] == ["feasible"] * 3


@pytest.mark.slow
def test_dask_a_worker_the_scheduler_retires_is_not_held_against_its_candidate(dask_cluster: str) -> None:
    """A scale-down (retire_workers) moves the candidate on without counting a loss. Runs last: one worker less."""
    from distributed import Client

    with make_evaluator(1, 120, dask_cluster) as ev, Client(dask_cluster, set_as_default=False) as admin:
        ev.evaluate_batch([request(FAST), request(FAST)])  # both workers load AIC once
        ev.max_eval_seconds = 6.0  # room for a graceful retirement, which takes a moment on a loaded machine
        workers = ev._backend._workers
        retired: list[str] = []

        def retire() -> None:
            while not retired:
                running = [t for ts in list(ev._fifo.values()) for t in list(ts) if t.start is not None]
                if running and time.perf_counter() - running[0].start >= 1.0:
                    retired.append(running[0].slot)
                    admin.retire_workers(workers=[running[0].slot], close_workers=True)
                time.sleep(0.05)

        pids = {a: w.pid for a, w in workers.items()}
        thread = threading.Thread(target=retire, daemon=True)
        thread.start()
        t0 = time.perf_counter()
        try:
            (slow,) = ev.evaluate_batch([request(LONG)])
        finally:
            elapsed = time.perf_counter() - t0
            thread.join(30)
            if retired and pids.get(retired[0]) and _alive(pids[retired[0]]):
                os.kill(pids[retired[0]], signal.SIGKILL)  # the retired process still runs the abandoned replay
        assert retired and retired[0] not in workers
        # retired after 1 s, then a whole deadline on the other worker, and no loss counted (only the kill)
        assert (slow.status, slow.reason, ev.restarts) == ("infeasible", "exceed runtime: replay > 6s", 1)
        assert elapsed > 6.5, elapsed


def kill_once_executing(address: str, kill: Callable[[], None], timeout: float = 120.0) -> tuple[
        threading.Thread, list[float]]:
    """A thread that calls ``kill`` as soon as a worker of the cluster at ``address`` is executing an evaluation
    (asked of the workers themselves, so the evaluation is known to be in flight: not still on its way, not
    waiting for a worker that is still starting); the monotonic time of the kill goes into the list."""
    from distributed import Client

    killed_at: list[float] = []

    def executing(dask_worker: Any) -> int:  # runs on the worker (nested: pickled by value, not by module name)
        return sum("-eval-" in str(ts.key) for ts in dask_worker.state.executing)

    def run() -> None:
        end = time.monotonic() + timeout
        with Client(address, timeout=10, set_as_default=False) as admin:
            while time.monotonic() < end:
                if any(admin.run(executing).values()):
                    break
                time.sleep(0.05)
            else:
                return
        kill()
        killed_at.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, killed_at


@pytest.mark.slow
def test_dask_a_lost_scheduler_stops_the_batch_with_an_error_naming_it(tmp_path: Path) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        address = start_dask(tmp_path, 1, procs)
        with make_evaluator(1, 120, address) as ev:
            ev.evaluate_batch([request(FAST)])
            killer, killed_at = kill_once_executing(address, procs[0].kill)  # the scheduler dies under it
            with pytest.raises(SpicaError, match=f"lost the connection to the Dask scheduler at {address}"):
                ev.evaluate_batch([request(LONG)])
            killer.join(15)
            assert killed_at and time.monotonic() - killed_at[0] < 15
    finally:
        for proc in reversed(procs):
            _stop(proc, grace=2)  # the worker is deep in a replay: no need to wait for it


# ---------------------------------------------------------------- Ray


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head with two CPUs and its client server, all on 127.0.0.1 (``--block``: it stops with its group)."""
    pytest.importorskip("ray")
    root = tmp_path_factory.mktemp("ray")
    temp = Path(f"/tmp/spica-ray-{os.getpid()}")  # Ray's socket paths must stay short
    gcs, client_port = free_port(), free_port()
    # a one-node cluster on loopback: Ray otherwise advertises (and connects to) the host's own address
    marker = f"spica-test-{os.getpid()}-{time.monotonic_ns()}"  # inherited by every process of this Ray
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "SPICA_TEST_RAY": marker}
    logs = [root / "head.log"]
    procs = [_spawn([str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}",
                     f"--ray-client-server-port={client_port}", "--num-cpus=2", "--include-dashboard=false",
                     "--disable-usage-stats", f"--temp-dir={temp}", "--object-store-memory=100000000"],
                    logs[0], env)]
    try:
        _wait("the Ray head", lambda: _listening(client_port), 120, procs, logs)
        yield f"ray://127.0.0.1:{client_port}"
    finally:
        _stop(procs[0], grace=30)
        _kill_marked("SPICA_TEST_RAY", marker)  # Ray's agents run in a process group of their own
        subprocess.run(["rm", "-rf", str(temp)], check=False)


@pytest.mark.slow
def test_ray_outcomes_deadline_and_lost_workers(ray_cluster: str) -> None:
    reqs = numbered(request(FAST), request(FAST, {"tp": 4}), request(FAST, {"tp": 4, "replicas": 3}))
    local = SequentialEvaluator().evaluate_batch(reqs)
    with make_evaluator(1, 120, ray_cluster) as ev:
        assert ev.engine == "ray" and ev.workers == 2
        remote = ev.evaluate_batch(reqs)
        for a, b in zip(remote, local, strict=True):
            same_outcome(a, b)
        # deadline: the pool's outcome; the actor is replaced and the sweep goes on
        ev.max_eval_seconds = 2.0
        slow, fast = ev.evaluate_batch([request(LONG), request(FAST)])
        assert (slow.status, slow.reason) == ("infeasible", "exceed runtime: replay > 2s")
        assert fast.status == "feasible" and ev.restarts == 1
        ev.max_eval_seconds = 120
        # an actor process killed under its evaluation, twice: retried once, then failed
        killer, stop, killed = kill_under(ev, 0, 2, lambda slot: slot.pid)
        try:
            lost, *others = ev.evaluate_batch(numbered(request(LONG), request(FAST), request(FAST)))
        finally:
            stop.set()
            killer.join(15)
        assert len(killed) == 2 and [o.status for o in others] == ["feasible"] * 2
        assert lost.status == "failed" and lost.reason.startswith("worker lost twice: ")
        assert lost.reason.count("died while evaluating") == 2 and all(f"pid {p}" in lost.reason for p in killed)
        after = ev.evaluate_batch([request(FAST)] * 3)
        assert [o.status for o in after] == ["feasible"] * 3


@pytest.mark.slow
def test_ray_a_client_server_that_fails_to_start_once_is_tried_again(ray_cluster: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The head starts a server process per client, which can fail on a busy machine: the evaluator connects
    again instead of failing the sweep; any other connection error fails it at once."""
    import ray

    real, calls = ray.init, []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise ConnectionAbortedError("Initialization failure from server:\nRuntimeError: Starting Ray client "
                                         "server failed. See ray_client_server_23000.err for detailed logs.")
        return real(*args, **kwargs)

    monkeypatch.setattr(ray, "init", flaky)
    with make_evaluator(1, 120, ray_cluster) as ev:
        assert [o.status for o in ev.evaluate_batch([request(FAST)])] == ["feasible"]
    assert len(calls) == 2

    def refused(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise ConnectionError("version mismatch")

    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(SpicaError, match="cannot connect to the Ray cluster at .*version mismatch"):
        make_evaluator(1, 120, ray_cluster)
    assert len(calls) == 3


def test_a_ray_connect_failure_names_what_failed_on_the_head_and_retries_a_busy_head() -> None:
    from spica_core.evaluate.ray_cluster import _RAY_TRANSIENT, _connect_failure

    busy = ConnectionAbortedError("Initialization failure from server:\nTraceback (most recent call last):\n"
                                  "  File \"proxier.py\", line 780\nRuntimeError: Proxy failed to Connect to backend!")
    assert _connect_failure(busy) == ("ConnectionAbortedError: Initialization failure from server: "
                                      "RuntimeError: Proxy failed to Connect to backend!")
    assert any(m in str(busy) for m in _RAY_TRANSIENT)
    zombie = ConnectionAbortedError("Initialization failure from server: psutil.ZombieProcess: PID still exists but "
                                    "it's a zombie (pid=15438)")   # seen in CI on a busy 2-core machine
    assert any(m in str(zombie) for m in _RAY_TRANSIENT)
    assert not any(m in "Version mismatch: client 2.9 server 2.8" for m in _RAY_TRANSIENT)
    assert _connect_failure(ConnectionError("refused\nmore")) == "ConnectionError: refused"
