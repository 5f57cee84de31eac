"""The optimizer process: studies asked over a pipe pick what local ones pick, the sweep's process never imports jax,
errors come back with their message, and the process stops the way the sweep's children do."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.errors import OptimizerStoppedError
from spica_core.search import optimizer as optimizer_module
from spica_core.search import (
    EvalCache, OptimizerProcess, SearchContext, Study, optimizer_for, optimizer_process,
    search_branch,
)
from test_search import SPACE, branch_of, keep_the_model_on, make
from test_study import SMALL, SMALL_POOL, filled, free_of

ROOT = Path(__file__).resolve().parents[1]


def asked_both_ways(algorithm: str, steps: int = 2, pending: bool = True, exploit: bool = True) -> list[tuple[Any, Any]]:
    """The same asks of a local study and of one in the optimizer process, on the same trials and pool."""
    local = filled(SMALL, algorithm, seed=3, n=6)
    remote = optimizer_process().study(SMALL, algorithm=algorithm, seed=3)
    remote.sync(local.trials)
    out = []
    for step in range(1, steps + 1):
        kwargs: dict[str, Any] = {"pending": [SMALL_POOL[-1]] if pending else [], "exploit": exploit}
        out.append((local.suggest(3, step, SMALL_POOL, free_of(local, SMALL_POOL), **kwargs),
                    remote.suggest(3, step, SMALL_POOL, free_of(local, SMALL_POOL), **kwargs)))
    return out


def test_a_study_in_the_optimizer_process_picks_what_a_local_one_picks() -> None:
    for local, remote in asked_both_ways("QUASI_RANDOM_SEARCH") + asked_both_ways("RANDOM_SEARCH", pending=False):
        assert len(local) == 3 and remote == local


@pytest.mark.slow
@pytest.mark.parametrize("exploit", [True, False])
def test_a_gp_study_in_the_optimizer_process_picks_what_a_local_one_picks(exploit: bool) -> None:
    for local, remote in asked_both_ways("DEFAULT", exploit=exploit):
        assert len(local) == 3 and remote == local


def test_a_bad_declaration_or_ask_raises_in_the_sweep_s_process_with_the_study_s_message() -> None:
    process = optimizer_process()
    with pytest.raises(ValueError, match="algorithm 'NOPE' is not supported"):
        process.study(SMALL, algorithm="NOPE")
    study = process.study(SMALL, algorithm="QUASI_RANDOM_SEARCH")
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):
        study.suggest(0, 1, SMALL_POOL)
    assert study.suggest(1, 1, SMALL_POOL) != []  # the process serves on


def _refuse(text: str) -> Exception:
    raise TypeError(f"cannot rebuild {text!r}")


class UnloadableError(Exception):
    """Pickles, and fails to unpickle (as an exception whose constructor wants more than its message does)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _refuse, (str(self),)


def test_an_error_that_would_not_unpickle_is_sent_as_its_text() -> None:
    """An error that pickles in the optimizer process and fails to unpickle in the sweep's would leave the ask
    without an answer: the process sends its text instead."""
    assert optimizer_module._travels(ValueError("count must be >= 1"))
    assert not optimizer_module._travels(UnloadableError("no model"))


def test_the_sweep_s_process_never_imports_jax() -> None:
    """Asks of every kind go to the optimizer process; jax and Vizier are imported there only."""
    script = textwrap.dedent("""
        import sys
        from spica_core.search import optimizer_process
        from spica_core.space.params import Param
        if __name__ == "__main__":
            params = [Param("x", "float", bounds=(0.0, 1.0)), Param("c", "categorical", values=("a", "b"))]
            pool = [{"x": i / 10, "c": c} for i in range(11) for c in "ab"]
            study = optimizer_process().study(params, algorithm="GAUSSIAN_PROCESS_BANDIT", seed=1)
            first = study.suggest(2, 0, pool)
            print(len(first), "jax" in sys.modules, "vizier" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "False", "False"]


def test_the_optimizer_process_ignores_sigint_and_ends_with_its_pipe() -> None:
    process = OptimizerProcess()
    try:
        pid = process.pid
        assert pid is not None
        os.kill(pid, signal.SIGINT)  # a Ctrl-C reaches the process group: the sweep decides, not its children
        study = process.study(SMALL, algorithm="QUASI_RANDOM_SEARCH")
        assert len(study.suggest(2, 1, SMALL_POOL)) == 2 and process.alive
    finally:
        process.close()
    assert not process.alive and process.exitcode == 0


def test_an_ended_optimizer_process_fails_its_asks_and_the_next_sweep_gets_a_new_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    process = OptimizerProcess()
    study = process.study(SMALL, algorithm="QUASI_RANDOM_SEARCH")
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while process.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(OptimizerStoppedError, match="the optimizer process, which holds the sweep's studies, ended"):
        study.suggest(2, 1, SMALL_POOL)
    assert process.exitcode == -signal.SIGKILL
    monkeypatch.setattr(optimizer_module, "_PROCESS", [process])
    fresh = optimizer_process()
    try:
        assert fresh is not process and fresh.alive
    finally:
        fresh.close()


@pytest.mark.parametrize(("sweep", "goal", "traced"), [
    ({}, {}, True),  # rapid DEFAULT, one objective: the first model ask is GP-UCB-PE's
    ({"algorithm": "GAUSSIAN_PROCESS_BANDIT"}, {}, False),
    ({"algorithm": "RANDOM_SEARCH"}, {}, False),
    ({}, {"target": "pareto"}, False),
])
def test_a_rapid_sweep_gets_the_optimizer_process_tracing_only_for_gp_ucb_pe_and_a_thorough_one_none(
        monkeypatch: pytest.MonkeyPatch, sweep: dict[str, Any], goal: dict[str, Any], traced: bool) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(optimizer_module, "optimizer_process", lambda trace=False: asked.append(trace) or "process")
    config = SmartSearchConfig.from_dict({"search_space": SPACE, "workload": {"trace_path": "t.jsonl"}, "goal": goal,
                                          "sweep": sweep})
    assert optimizer_for(config) == "process" and asked == [traced]
    asked.clear()
    thorough = SmartSearchConfig.from_dict({**config.normalised(), "sweep": {**sweep, "policy": "thorough"}})
    assert optimizer_for(thorough) is None and asked == []  # asks no model: nothing of jax is imported


@pytest.mark.slow
def test_a_branch_searched_with_the_optimizer_process_is_the_branch_searched_in_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole loop, GP-UCB-PE asks included: the same trials, in the same asks, as with local studies."""
    from spica_core.evaluate import SequentialEvaluator

    keep_the_model_on(monkeypatch)
    config = make(space={"deployment_mode": ["agg"], "agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 3, "max_rounds": 3, "seed": 4})
    branch = branch_of(config)
    here = search_branch(branch, SearchContext(config, None, None), SequentialEvaluator(), EvalCache())
    remote_context = SearchContext(config, None, None, optimizer=optimizer_process())
    there = search_branch(branch, remote_context, SequentialEvaluator(), EvalCache())
    assert not isinstance(remote_context.suggesters["agg"].study, Study)  # type: ignore[attr-defined]

    def key(trials: list[Any]) -> list[Any]:
        return [(t.trial, t.ask, t.suggested_by, t.parallel, t.params) for t in trials]

    assert len(here.trials) == 9 and {t.suggested_by for t in here.trials} >= {"gp"}
    assert key(there.trials) == key(here.trials)


@pytest.mark.slow
def test_the_sweep_flow_asks_its_studies_in_the_optimizer_process(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from flows.sweep import sweep
    from spica_core.search import RemoteStudy

    asked: list[int] = []
    suggest = RemoteStudy.suggest
    monkeypatch.setattr(RemoteStudy, "suggest", lambda self, count, *a, **k: asked.append(count) or
                        suggest(self, count, *a, **k))
    config = make(space={"deployment_mode": ["agg"], "agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 2, "max_rounds": 1, "algorithm": "QUASI_RANDOM_SEARCH"})
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config.normalised()))
    summary = sweep(config_path=str(path), run_dir=str(tmp_path / "run"))
    assert len(summary.ranking) == 2 and sum(asked) >= 2
