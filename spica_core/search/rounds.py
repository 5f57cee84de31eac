"""The search loop of the branches, free of any orchestration.

Each branch asks its suggester for batches of proposals while the workers replay the ones before,
answers repeats from the in-run cache and records every attempt as a :class:`Trial` the moment it
finishes. The branches of a sweep are searched together (``search_branches``): one pool of workers
takes their queued candidates in the order they were picked, so one branch's replays keep the
workers busy while another waits for its first outcomes or its model. The trials table is the source
of truth: a branch that already finished is read back, never re-evaluated, and an interrupted one
continues exactly where it stopped (``BranchSearch``).

This module is one branch's search (batches, rounds as quotas, the resume rule); the loop over the
branches is ``branch_loop.py``, what their evaluations share (cache keys, study metrics) ``context.py``.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from spica_core.config.model import SmartSearchConfig
from spica_core.config.sweep import SweepPolicy
from spica_core.evaluate.evaluation import Outcome, Status
from spica_core.evaluate.evaluator import Evaluator
from spica_core.search.context import SearchContext, cache_key, finite_or_infeasible
from spica_core.search.costs import BATCH_ROUNDS, Costs
from spica_core.search.suggesters import ATTEMPT_CAP_FACTOR, Proposal, Suggester, thorough_size
from spica_core.search.trials import EvalCache, Trial
from spica_core.space.branches import Branch


# ---------------------------------------------------------------- the branch


@dataclass
class BranchResult:
    """A branch's search: every trial in trial order, and why it ended early (if it did)."""

    trials: list[Trial] = field(default_factory=list)
    stalled: bool = False
    message: str = ""


def round_plan(branches: Sequence[Branch], config: SmartSearchConfig) -> tuple[dict[str, int], int]:
    """Rounds per branch and the evaluation target: rapid → max_rounds × per_round per branch;
    thorough → enough rounds to enumerate each branch, the target being the space's size."""
    sweep = config.sweep
    if sweep.policy is SweepPolicy.thorough:
        rounds = {b.mode: -(-thorough_size(b) // sweep.per_round) for b in branches}
        return rounds, sum(thorough_size(b) for b in branches)
    return {b.mode: sweep.max_rounds for b in branches}, len(branches) * sweep.max_rounds * sweep.per_round


@dataclass(frozen=True)
class Batch:
    """One ask's proposals: trials ``first`` … ``first + len(proposals) - 1`` of the branch."""

    number: int
    first: int
    proposals: tuple[Proposal, ...]
    rounds: tuple[int, ...]
    suggest_seconds: float = 0.0

    @property
    def indices(self) -> range:
        return range(self.first, self.first + len(self.proposals))


WAIT: Final = "wait"  # the next ask needs outcomes that are still being evaluated
ASK_POLL_S: Final = 0.05  # while an ask runs: how often the loop looks whether it is done


@dataclass(frozen=True)
class _Queued:
    """A picked proposal on its way to a worker; ``order`` is when it was picked, across the branches."""

    order: int
    trial: int
    proposal: Proposal
    round: int
    batch: Batch


@dataclass(frozen=True)
class _Ask:
    """What a model ask for batch ``number`` knows: fixed when it starts, so its thread reads nothing else."""

    number: int
    first: int
    rounds: tuple[int, ...]
    known: list[Trial]
    pending: list[Proposal]
    costs: Costs
    exploit: bool

    def start(self, suggester: Suggester) -> _RunningAsk:
        running = _RunningAsk(self)
        threading.Thread(target=running.run, args=(suggester,), name="spica-ask", daemon=True).start()
        return running


@dataclass
class _RunningAsk:
    """An ask on its thread (a daemon: a stopping sweep never waits for the optimizer)."""

    ask: _Ask
    done: threading.Event = field(default_factory=threading.Event)
    proposals: list[Proposal] = field(default_factory=list)
    error: BaseException | None = None
    seconds: float = 0.0

    def run(self, suggester: Suggester) -> None:
        a = self.ask
        started = time.perf_counter()
        try:
            self.proposals = suggester.suggest(len(a.rounds), a.known, a.pending, step=a.number,
                                               costs=a.costs, exploit=a.exploit)
        except BaseException as exc:  # noqa: BLE001 - raised again in the search loop's thread
            self.error = exc
        finally:
            # What the ask cost: model asks take turns (jax_setup.MODEL_ASK), and the turn's wait is not its cost.
            self.seconds = time.perf_counter() - started - suggester.waited
            self.done.set()

    def batch(self) -> Batch | None:
        if self.error is not None:
            raise self.error
        a = self.ask
        if not self.proposals:
            return None
        return Batch(a.number, a.first, tuple(self.proposals), a.rounds[:len(self.proposals)], self.seconds)


class BranchSearch:
    """The search of one branch: asks and evaluations overlap, and what is asked never depends on timing.

    Batch *b* is picked once every trial of batches ≤ *b* − 2 has finished, knowing their outcomes, with
    batch *b* − 1 pending (GP-UCB-PE explores away from it). It is picked while batch *b* − 1 is being
    evaluated, and a worker that frees up takes the next queued candidate at once. When the lagged view
    asks for nothing (pending trials may still fail), the batch is picked again once batch *b* − 1 has
    finished. So the same seed and the same recorded trials give the same batches, and a resumed
    branch re-derives the batches it had asked for, takes recorded outcomes from ``log`` and evaluates
    only the rest.

    Rounds are quotas, not barriers: a proposal belongs to the earliest round whose unique successes,
    counting its pending trials as successes, are short of ``candidates_per_round``; a round whose
    attempts reach the cap (11 × per round) short of its target ends the branch.

    A branch does not run itself: :func:`search_branches` steps it (``plan``, ``dispatch``, ``record``)
    beside the sweep's other branches, on one pool of workers.
    """

    def __init__(self, branch: Branch, context: SearchContext, evaluator: Evaluator, cache: EvalCache,
                 log: Sequence[Trial] = (), on_result: Callable[[Trial], None] | None = None,
                 order: Iterator[int] | None = None):
        self.branch = branch
        self.context = context
        self.evaluator = evaluator
        self.cache = cache
        self.on_result = on_result
        self.order = order if order is not None else itertools.count()  # shared by the sweep's branches
        self.suggester = context.suggester(branch)
        sweep = context.config.sweep
        self.per_round = sweep.per_round
        self.rounds = round_plan([branch], context.config)[0][branch.mode]
        self.workers = max(1, evaluator.workers)
        self.done: dict[int, Trial] = {t.trial: t for t in log if t.mode == branch.mode}
        self.batches: list[Batch] = []
        self.enumerating = False
        self.queue: list[_Queued] = []            # picked, not started
        self.running: dict[int, _Queued] = {}     # ticket → what it evaluates
        self.result: BranchResult | None = None
        self.asking: _RunningAsk | None = None   # the ask on its thread
        self.exhausted = False                # an ask found nothing left to propose

    @property
    def finished(self) -> bool:
        return self.result is not None and not self.queue and not self.running

    def leave(self) -> None:
        """The sweep stops stepping this branch: an ask still on its thread keeps its designer busy, so a retry
        gets a study of its own."""
        if self.asking is not None:
            self.context.suggesters.pop(self.branch.mode, None)

    def dispatch_head(self) -> bool:
        """Answer the next queued proposal if it needs no replay, else send it to a free worker; False when
        there is none or no worker is free."""
        if not self.queue:
            return False
        q = self.queue[0]
        p = q.proposal
        key = cache_key(self.context.key, p.selection, p.parallel)
        backend = p.selection.get("backend")
        if backend not in self.branch.supported_backends.get(p.parallel, ()):
            self.queue.pop(0)
            self._add(self._trial(q, Status.unsupported, key,
                                  reason=f"unsupported: {backend} cannot run {p.parallel.label()}"))
        elif (hit := self.cache.get(key)) is not None:
            self.queue.pop(0)
            self._add(self._trial(q, Status.feasible, key, cache_hit=True, **_result_of(hit)))
        elif self.evaluator.capacity() > 0:
            self.queue.pop(0)
            self.running[self.evaluator.submit(self.context.request(p, f"{self.branch.mode}-{q.trial}"))] = q
        else:
            return False
        return True

    def record(self, ticket: int, outcome: Outcome) -> None:
        q = self.running.pop(ticket)
        p = q.proposal
        outcome = finite_or_infeasible(self.context, outcome)
        timings = outcome.timings
        trial = self._trial(q, outcome.status, cache_key(self.context.key, p.selection, p.parallel),
                            reason=outcome.reason, candidate=outcome.candidate, score=outcome.score,
                            objectives=outcome.objectives, metrics=outcome.metrics, bands=outcome.bands,
                            requests=outcome.requests, calibration=outcome.calibration,
                            uncalibrated=outcome.uncalibrated,
                            eval_seconds=float(timings.get("total_s", 0.0)) if timings else None,
                            replay_seconds=float(timings.get("replay_s", 0.0)) if timings else None)
        if trial.is_evaluated_success:
            self.cache.add(trial)
        self._add(trial)

    def _add(self, trial: Trial) -> None:
        self.done[trial.trial] = trial
        if self.on_result is not None:
            self.on_result(trial)

    def _trial(self, q: _Queued, status: Status, key: str, **kw: Any) -> Trial:
        p = q.proposal
        return Trial(self.branch.mode, q.round, q.trial, status, p.parallel, p.raw, p.selection, ask=q.batch.number,
                     cache_key=key, projection=p.projection, suggest_seconds=q.batch.suggest_seconds,
                     suggested_by=p.suggested_by, **kw)

    # ------------------------------------------------------------ asking

    def plan(self) -> bool:
        """Pick the next batch, or end the branch; False while that needs outcomes still being evaluated or
        an ask still running (asks run on a thread, so the workers get their next candidates meanwhile)."""
        if self.result is not None:
            return False
        if self.asking is not None:
            if not self.asking.done.is_set():
                return False
            asked, self.asking = self.asking, None
            batch: Batch | str | None = asked.batch()
            self.exhausted = batch is None
        elif self.exhausted:
            batch = None
        else:
            b = len(self.batches)
            first = self.batches[-1].indices.stop if self.batches else 0
            batch = self._pick(b, first, lag=1)
            if batch is None:
                batch = self._pick(b, first, lag=0)
            if isinstance(batch, _Ask):
                self.asking = batch.start(self.suggester)
                return False
        if batch == WAIT:
            return False
        if batch is None:
            ending = self._ending()
            if ending is None:
                return False
            self.result = ending
            return True
        assert isinstance(batch, Batch)
        self.batches.append(batch)
        for t, p, round_no in zip(batch.indices, batch.proposals, batch.rounds):
            if t not in self.done:
                self.queue.append(_Queued(next(self.order), t, p, round_no, batch))
        return True

    def _known(self, upto: int) -> list[Trial] | None:
        """The trials of batches before ``upto``, or None while some of them are still being evaluated."""
        indices = [i for batch in self.batches[:max(0, upto)] for i in batch.indices]
        if any(i not in self.done for i in indices):
            return None
        return [self.done[i] for i in indices]

    def _pick(self, b: int, first: int, lag: int) -> Batch | _Ask | str | None:
        """Batch ``b`` knowing the outcomes of batches < b − lag, the ones after pending: at once when no
        model is asked, else the ask to run (None: nothing to ask; WAIT: those outcomes are not all in)."""
        # Picks that never depend on outcomes (thorough) count every earlier proposal as pending: no waiting.
        known = self._known(b - lag) if self.suggester.stalls else []
        if known is None:
            return WAIT
        pending_batches = self.batches[max(0, b - lag):] if self.suggester.stalls else self.batches
        pending = [p for batch in pending_batches for p in batch.proposals]
        pending_rounds = [r for batch in pending_batches for r in batch.rounds]
        budget = self.rounds * self.per_round
        costs = Costs.of(known, self.workers, model=self.suggester.fits_model,
                         pending=[p.suggested_by for p in pending], budget=budget)
        space = self.suggester.space
        seen = space.seen(known) | {p.index for p in pending if p.index is not None}
        size = costs.batch_size(BATCH_ROUNDS * max(self.per_round, self.workers)) if self.suggester.stalls \
            else self.workers
        rounds = self._quota(known, pending_rounds, size)
        if self.suggester.stalls and not self.enumerating and rounds:
            untried = space.size - len(seen)
            left = budget - sum(1 for t in known if t.is_evaluated_success) - len(pending)
            self.enumerating = untried > left and costs.enumeration_pays(untried, left, size)
        if self.enumerating:
            rounds = self._quota(known, pending_rounds, size, extra=space.size - len(seen))
        if not rounds:
            return None
        logged = [self.done.get(t) for t in range(first, first + len(rounds))]
        if all(t is not None and t.ask == b for t in logged):  # a resumed branch: asked and recorded before
            proposals = [space.proposal(space.index_of(t), t.suggested_by) for t in logged]  # type: ignore[arg-type,union-attr]
            return Batch(b, first, tuple(proposals), tuple(rounds), logged[0].suggest_seconds or 0.0)  # type: ignore[union-attr]
        if self.enumerating:  # an earlier run's top candidates first, as an ask would have put them
            warm = [i for i in self.suggester.warm if i not in seen]
            order = itertools.chain(warm, (i for i in space.unseen(seen) if i not in set(warm)))
            proposals = [space.proposal(i, "warm-start" if i in warm else "enumerated")
                         for i in itertools.islice(order, len(rounds))]
            return Batch(b, first, tuple(proposals), tuple(rounds[:len(proposals)])) if proposals else None
        # GP-UCB-PE's rhythm, as in batches of candidates_per_round: one UCB pick per that many, PE between
        exploit = any(i % self.per_round == 0 for i in range(first, first + len(rounds)))
        return _Ask(b, first, tuple(rounds), known, pending, costs, exploit)

    def _quota(self, known: Sequence[Trial], pending_rounds: Sequence[int], size: int, extra: int = 0) -> list[int]:
        """The rounds of up to ``size`` new proposals: the earliest rounds short of their target first;
        ``extra`` more (an enumerated branch) go to rounds after the last."""
        out: list[int] = []
        cap = ATTEMPT_CAP_FACTOR * self.per_round
        last = max([self.rounds - 1, *pending_rounds, *(t.round for t in known)])
        for r in range(last + 1 + (-(-extra // self.per_round) if extra else 0)):
            mine = [t for t in known if t.round == r]
            waiting = sum(1 for x in pending_rounds if x == r)
            attempts = len(mine) + waiting
            if r >= self.rounds:
                if not extra:
                    break
                want = self.per_round - attempts
            elif self.suggester.stalls:
                successes = sum(1 for t in mine if t.is_evaluated_success)
                want = min(self.per_round - successes - waiting, cap - attempts)
            else:
                want = self.per_round - attempts
            out += [r] * max(0, min(want, size - len(out)))
            if len(out) >= size:
                break
        return out

    def _ending(self) -> BranchResult | None:
        """Why the branch asks for nothing more, knowing every outcome (None until they are all in)."""
        known = self._known(len(self.batches))
        if known is None:
            return None
        space = self.suggester.space
        if len(space.seen(known)) >= space.size:
            return BranchResult(stalled=True, message=(
                f"{self.branch.mode}: legal space exhausted: all {space.size} candidate(s) of the branch have "
                f"been tried{' (enumerated: cheaper than asking)' if self.enumerating else ''}; moving on"))
        if self.suggester.stalls:
            for r in range(self.rounds):
                mine = [t for t in known if t.round == r]
                unique = sum(1 for t in mine if t.is_evaluated_success)
                if unique < self.per_round:
                    return BranchResult(stalled=True, message=(
                        f"{self.branch.mode}: stopped early: {unique}/{self.per_round} unique successful "
                        f"evaluations after {len(mine)} attempt(s) in round {r + 1} (the attempt cap is "
                        f"{ATTEMPT_CAP_FACTOR} × candidates_per_round); moving on"))
        return BranchResult()


def _result_of(trial: Trial) -> dict[str, Any]:
    """What a cache hit or duplicate copies from the trial that ran."""
    return {"candidate": trial.candidate, "score": trial.score, "objectives": trial.objectives,
            "metrics": dict(trial.metrics), "bands": dict(trial.bands), "requests": trial.requests,
            "calibration": trial.calibration, "uncalibrated": dict(trial.uncalibrated)}


__all__ = ["Batch", "BranchResult", "BranchSearch", "round_plan"]
