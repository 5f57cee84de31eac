"""The loop that searches a sweep's branches together to their ends on one pool of workers: it steps each
:class:`~spica_core.search.rounds.BranchSearch` (plan, dispatch, record) and hands every outcome to the branch
that asked for it.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from spica_core.evaluate.evaluator import POLL_S, Evaluator
from spica_core.search.context import SearchContext
from spica_core.search.rounds import ASK_POLL_S, BranchResult, BranchSearch
from spica_core.search.trials import EvalCache, Trial
from spica_core.space.branches import Branch



def search_branches(branches: Sequence[Branch], context: SearchContext, evaluator: Evaluator, cache: EvalCache,
                    log: Sequence[Trial] = (), on_result: Callable[[Trial], None] | None = None,
                    on_wait: Callable[[], None] | None = None,
                    on_branch: Callable[[Branch, BranchResult], None] | None = None) -> list[BranchResult]:
    """Search the branches together to their ends, resuming from ``log`` (every trial of the run so far).

    A free worker takes the queued candidate picked first, whichever branch picked it, so a branch waiting
    for its first outcomes or for its model leaves the workers to the others. What each branch asks depends
    only on its own trials (``BranchSearch``), so searching them together changes when trials finish, not
    which. ``on_branch`` is told each branch's result as it ends; the results are returned in branch order.
    """
    order = itertools.count()
    searches = [BranchSearch(b, context, evaluator, cache, log, on_result, order) for b in branches]
    live = list(searches)
    try:
        while live:
            while True:  # plan and dispatch until nothing moves without an outcome
                planned = [s.plan() for s in live]
                while (heads := [s for s in live if s.queue]) and \
                        min(heads, key=lambda s: s.queue[0].order).dispatch_head():
                    pass
                if not any(planned):
                    break
            for s in [s for s in live if s.finished]:
                assert s.result is not None
                s.result.trials = [s.done[i] for i in sorted(s.done)]
                live.remove(s)
                if on_branch is not None:
                    on_branch(s.branch, s.result)
            if not live:
                break
            owners = {ticket: s for s in live for ticket in s.running}
            if not owners:
                asking = [s.asking for s in live if s.asking is not None]
                if not asking:
                    raise RuntimeError("the search waits for outcomes that nothing is evaluating")
                asking[0].done.wait(POLL_S)  # in slices: the main thread's signal handlers run meanwhile
                continue
            timeout = ASK_POLL_S if any(s.asking is not None for s in live) else POLL_S
            for ticket, outcome in evaluator.poll(timeout):
                owners[ticket].record(ticket, outcome)
            if on_wait is not None:
                on_wait()
    finally:
        for s in live:
            s.leave()
    return [s.result for s in searches if s.result is not None]


def search_branch(branch: Branch, context: SearchContext, evaluator: Evaluator, cache: EvalCache,
                  log: Sequence[Trial] = (), on_result: Callable[[Trial], None] | None = None,
                  on_wait: Callable[[], None] | None = None) -> BranchResult:
    """Search one branch to its end, resuming from ``log``."""
    return search_branches([branch], context, evaluator, cache, log, on_result, on_wait)[0]


__all__ = ["search_branch", "search_branches"]
