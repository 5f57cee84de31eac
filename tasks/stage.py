"""The one decorator every stage task uses: readable names, retries that can help, user errors without tracebacks.

Prefect logs a traceback for any exception a task raises and retries it blindly. A bad config or trace
is neither a crash nor worth a retry, so a :class:`SpicaError` ends the task in a ``Failed`` state whose
message is the error's text; calling the stage re-raises it in the flow, which fails the run with the
same one-line message. I/O errors and worker crashes are retried.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Generic, ParamSpec, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import Failed, State

from spica_core.errors import SpicaError

P = ParamSpec("P")
R = TypeVar("R")


def one_line(exc: BaseException) -> str:
    """A multi-line error (a config's problem list) as one state message."""
    lines = [line.strip(" -") for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


def _retry_unless_user_error(task_: Task[..., Any], run: TaskRun, state: State) -> bool:
    return not isinstance(state.result(raise_on_failure=False), SpicaError)


class StageTask(Generic[P, R]):
    """A Prefect task that returns its value, or raises the user error that failed it."""

    def __init__(self, fn: Callable[P, R], prefect_task: Task[P, Any]):
        self.fn = fn                    # the undecorated function: tests call stages without a flow run
        self.task = prefect_task
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result = self.task(*args, **kwargs)
        if isinstance(result, State):   # only a user error returns a state (see ``stage``)
            raise result.result(raise_on_failure=False)
        return result


def stage(name: str, *, task_run_name: str | Callable[[], str] | None = None, retries: int = 0,
          log_prints: bool = False) -> Callable[[Callable[P, R]], StageTask[P, R]]:
    def decorate(fn: Callable[P, R]) -> StageTask[P, R]:
        @functools.wraps(fn)
        def body(*args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                return fn(*args, **kwargs)
            except SpicaError as exc:
                return Failed(message=one_line(exc), data=exc)

        prefect_task = task(name=name, task_run_name=task_run_name or name, retries=retries, retry_delay_seconds=1,
                            retry_condition_fn=_retry_unless_user_error, cache_policy=NO_CACHE,
                            log_prints=log_prints)(body)
        return StageTask(fn, prefect_task)
    return decorate
