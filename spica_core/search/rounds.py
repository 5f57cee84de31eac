"""The search loop of one branch (reference §6.2–§6.6, §7.4–§7.5), free of any orchestration.

A round asks the study for suggestions, projects each onto a legal parallel config, answers
repeats from the in-run cache, evaluates the rest in parallel and tells the study what happened.
Every attempt becomes one row of the trials table, which is the source of truth: a study is
rebuilt from it, so a resumed sweep continues exactly where it stopped.
"""
from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa

from spica_core.space.branches import Branch
from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate.evaluator import EvalRequest, Outcome
from spica_core.run.fingerprint import canonical_json, fingerprint
from spica_core.space.parallel import ParallelConfig
from spica_core.space.projection import ProjectionRecord, latent_params, project, study_params
from spica_core.evaluate.candidate import unroll_sample
from spica_core.search.study import Study, TrialRecord

ATTEMPT_CAP_FACTOR = 11  # "requested batch + at most 10× replacements" (§6.2)
SCALAR_METRIC = "objective"


class Evaluator(Protocol):
    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]: ...


# ---------------------------------------------------------------- run context and cache


@dataclass(frozen=True)
class SearchContext:
    """What every evaluation of a run shares; its fingerprint is part of every cache key (§6.3)."""

    config: SmartSearchConfig          # after the goal's policy filtering
    trace_file: str | None
    load_predictor: Any                # LoadPredictorResult or None
    profile_dir: str | None = None

    @property
    def key(self) -> str:
        lp = self.load_predictor
        lp_rows = lp.rows() if lp is not None else None
        return fingerprint({"config": self.config.normalised(), "load_predictor": lp_rows})

    def objectives(self) -> list[tuple[str, str]]:
        goal = self.config.goal
        if goal.is_pareto:
            return [(o.value, "min" if o.value == "e2e_latency" else "max") for o in goal.objectives]
        return [(SCALAR_METRIC, "max")]


def cache_key(context_key: str, selection: Mapping[str, Any], config: ParallelConfig) -> str:
    return fingerprint({"context": context_key, "selection": dict(selection), "parallel": config.to_dict(),
                        "mode": config.mode})


def study_metrics(context: SearchContext, outcome: Outcome) -> dict[str, float]:
    """What the study observes: the signed score, or the raw value per Pareto objective."""
    if context.config.goal.is_pareto:
        return {k: float(v) for k, v in (outcome.objectives or {}).items()}
    return {SCALAR_METRIC: float(outcome.score)}  # type: ignore[arg-type]


def finite_or_infeasible(context: SearchContext, outcome: Outcome) -> Outcome:
    """A feasible outcome whose objective is not finite (e.g. no request completed) cannot be ranked
    or told to the study: it becomes infeasible with that reason."""
    if outcome.feasible:
        metrics = study_metrics(context, outcome)
        if not metrics or not all(math.isfinite(v) for v in metrics.values()):
            return replace(outcome, status="infeasible",
                           reason=f"non-finite objective {metrics} (did any request complete?)")
    return outcome


# ---------------------------------------------------------------- one suggestion → one candidate


@dataclass(frozen=True)
class Candidate:
    """A decoded suggestion: the knob selection, the projection, and the actual parallel config."""

    raw: dict[str, Any]
    selection: dict[str, Any]
    projection: ProjectionRecord | None
    parallel: ParallelConfig


def build_candidate(branch: Branch, latent_names: set[str], raw: Mapping[str, Any],
                    decoded: Mapping[str, Any]) -> Candidate:
    """Split a decoded suggestion into knobs and latent features, and project the latter (§7.4)."""
    selection = {k: v for k, v in decoded.items() if k not in latent_names}
    selection["deployment_mode"] = branch.mode
    if branch.is_strict_pin:
        return Candidate(dict(raw), selection, None, branch.pool[0])
    requested = {k: v for k, v in decoded.items() if k in latent_names}
    record = project(branch, str(selection["backend"]), requested)
    return Candidate(dict(raw), selection, record, record.config)


# ---------------------------------------------------------------- trial rows

TRIALS_SCHEMA = pa.schema([
    ("mode", pa.string()), ("round", pa.int64()), ("ask", pa.int64()), ("trial", pa.int64()),
    ("status", pa.string()),
    ("reason", pa.string()), ("cache_hit", pa.bool_()), ("duplicate_of", pa.int64()), ("cache_key", pa.string()),
    ("backend", pa.string()), ("used_gpus", pa.int64()), ("parallel", pa.string()), ("score", pa.float64()),
    ("objectives_json", pa.string()), ("metrics_json", pa.string()), ("params_json", pa.string()),
    ("selection_json", pa.string()), ("projection_json", pa.string()), ("parallel_json", pa.string()),
    ("sample_json", pa.string()), ("eval_seconds", pa.float64()), ("replay_seconds", pa.float64()),
])
RANKING_SCHEMA = pa.schema([
    ("rank", pa.int64()), ("mode", pa.string()), ("backend", pa.string()), ("parallel", pa.string()),
    ("used_gpus", pa.int64()), ("score", pa.float64()), ("objectives_json", pa.string()),
    ("metrics_json", pa.string()), ("sample_json", pa.string()), ("round", pa.int64()), ("trial", pa.int64()),
])


def trial_row(*, mode: str, round_no: int, trial: int, candidate: Candidate, status: str, reason: str = "", ask: int = 0,
              outcome: Outcome | None = None, sample: Mapping[str, Any] | None = None, cache_hit: bool = False,
              duplicate_of: int | None = None, key: str = "", metrics: Mapping[str, float] | None = None,
              score: float | None = None, objectives: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One row of ``trials.parquet``: what was asked, what ran, what came back."""
    if outcome is not None:
        sample, metrics, score, objectives = outcome.sample or sample, outcome.metrics, outcome.score, \
            outcome.objectives
    sample = dict(sample or {})
    timings = outcome.timings if outcome is not None else {}
    return {
        "mode": mode,
        "round": round_no,
        "ask": ask,
        "trial": trial,
        "status": status,
        "reason": reason,
        "cache_hit": cache_hit,
        "duplicate_of": duplicate_of,
        "cache_key": key,
        "backend": candidate.selection.get("backend"),
        "used_gpus": int(sample["used_gpus"]) if "used_gpus" in sample else candidate.parallel.used_gpus,
        "parallel": candidate.parallel.label(),
        "score": None if score is None else float(score),
        "objectives_json": None if objectives is None else canonical_json(objectives),
        "metrics_json": canonical_json(dict(metrics or {})),
        "params_json": canonical_json(candidate.raw),
        "selection_json": canonical_json(candidate.selection),
        "projection_json": candidate.projection.to_json() if candidate.projection else None,
        "parallel_json": canonical_json({"mode": candidate.parallel.mode, **candidate.parallel.to_dict()}),
        "sample_json": canonical_json(sample),
        "eval_seconds": float(timings.get("total_s", 0.0)) if timings else None,
        "replay_seconds": float(timings.get("replay_s", 0.0)) if timings else None,
    }


def is_evaluated_success(row: Mapping[str, Any]) -> bool:
    """A feasible row that ran its own replay: neither a cache hit nor a duplicate (which are hits)."""
    return row["status"] == "feasible" and not row["cache_hit"]


def record_of(row: Mapping[str, Any], context: SearchContext) -> TrialRecord | None:
    """The study's view of a stored trial row (None for rows the study never saw, e.g. thorough)."""
    params = json.loads(row["params_json"])
    if row["status"] == "feasible":
        metrics = json.loads(row["objectives_json"]) if context.config.goal.is_pareto else \
            {SCALAR_METRIC: float(row["score"])}
        return TrialRecord(params=params, metrics=metrics)
    return TrialRecord(params=params, infeasible_reason=row["reason"] or row["status"])


# ---------------------------------------------------------------- the round


@dataclass
class RoundResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    unique: int = 0
    attempts: int = 0
    stalled: bool = False
    message: str = ""
    new_evaluations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EvalCache:
    """Successful evaluations of this run by cache key (only successes are cached, §6.3)."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, key: str, outcome: Outcome) -> None:
        self.entries[key] = {"sample": outcome.sample, "metrics": outcome.metrics, "score": outcome.score,
                             "objectives": outcome.objectives}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> EvalCache:
        cache = cls()
        for row in rows:
            if is_evaluated_success(row):
                cache.entries[row["cache_key"]] = {
                    "sample": json.loads(row["sample_json"]), "metrics": json.loads(row["metrics_json"]),
                    "score": row["score"],
                    "objectives": json.loads(row["objectives_json"]) if row["objectives_json"] else None}
        return cache


def make_study(branch: Branch, context: SearchContext, history: Sequence[Mapping[str, Any]]) -> Study:
    """A fresh, seeded study for the branch, fed every recorded trial of that branch."""
    sweep = context.config.sweep
    study = Study(study_params(branch), objectives=context.objectives(), algorithm=sweep.algorithm.value,
                  seed=sweep.seed, constants=branch.constants())
    for row in history:
        record = record_of(row, context)
        if record is not None:
            study.complete(record.params, record.metrics, record.infeasible_reason)
    return study


def _request(context: SearchContext, candidate: Candidate, eval_id: str) -> EvalRequest:
    cfg = context.config
    sample = unroll_sample(cfg.search_space, candidate.selection, candidate.parallel, context.load_predictor)
    ratio = candidate.selection.get("kv_load_ratio")
    return EvalRequest.from_config(cfg, sample, trace_file=context.trace_file, profile_dir=context.profile_dir,
                                   kv_load_ratio=None if ratio is None else float(ratio), eval_id=eval_id)


def round_progress(rows: Sequence[Mapping[str, Any]]) -> tuple[int, int, int]:
    """(unique successes, attempts, next ask index) of a round's rows so far."""
    unique = sum(1 for r in rows if is_evaluated_success(r))
    return unique, len(rows), max((int(r["ask"]) for r in rows), default=-1) + 1


def round_complete(rows: Sequence[Mapping[str, Any]], per_round: int) -> bool:
    """A round is over once it reached its target or its attempt cap (§6.2)."""
    unique, attempts, _ = round_progress(rows)
    return unique >= per_round or attempts >= ATTEMPT_CAP_FACTOR * per_round


def run_round(branch: Branch, context: SearchContext, round_no: int, history: Sequence[Mapping[str, Any]],
              evaluator: Evaluator, cache: EvalCache,
              on_result: Callable[[dict[str, Any]], None] | None = None,
              partial: Sequence[Mapping[str, Any]] = (),
              on_batch: Callable[[list[dict[str, Any]]], None] | None = None) -> RoundResult:
    """One barrier round of §6.2 for one branch.

    ``history`` holds the branch's rows of earlier rounds, ``partial`` the rows this round already
    wrote before an interruption. Before every ask the study is rebuilt from those rows in trial
    order, and ``on_batch`` receives each ask's rows once evaluated, so a resumed round asks,
    projects and evaluates exactly what an uninterrupted one would, without repeating evaluations.
    """
    per_round = context.config.sweep.per_round
    cap = ATTEMPT_CAP_FACTOR * per_round
    latent_names = {p.name for p in latent_params(branch)}
    rows: list[dict[str, Any]] = [dict(r) for r in partial]
    result = RoundResult()
    result.unique, result.attempts, ask = round_progress(rows)
    trial = len(history) + len(rows)
    while result.unique < per_round and result.attempts < cap:
        study = make_study(branch, context, [*history, *rows])
        count = min(per_round - result.unique, cap - result.attempts)
        raws = study.suggest(count, step=round_no * 1000 + ask)
        if not raws:
            break
        result.attempts += len(raws)
        batch: dict[int, dict[str, Any]] = {}
        primaries: list[tuple[int, Candidate, str]] = []
        duplicates: dict[str, list[tuple[int, Candidate]]] = {}

        def row(t: int, cand: Candidate, status: str, **kw: Any) -> dict[str, Any]:
            return trial_row(mode=branch.mode, round_no=round_no, ask=ask, trial=t, candidate=cand, status=status,
                             **kw)

        for raw in raws:
            cand = build_candidate(branch, latent_names, raw, study.decode(raw))
            key = cache_key(context.key, cand.selection, cand.parallel)
            backend = cand.selection.get("backend")
            if backend not in branch.supported_backends.get(cand.parallel, ()):
                batch[trial] = row(trial, cand, "unsupported", key=key,
                                   reason=f"unsupported: {backend} cannot run {cand.parallel.label()}")
            elif (hit := cache.get(key)) is not None:
                batch[trial] = row(trial, cand, "feasible", cache_hit=True, key=key, sample=hit["sample"],
                                   metrics=hit["metrics"], score=hit["score"], objectives=hit["objectives"])
            elif key in {k for _, _, k in primaries}:
                duplicates.setdefault(key, []).append((trial, cand))
            else:
                primaries.append((trial, cand, key))
            trial += 1
        requests = [_request(context, cand, f"{branch.mode}-{t}") for t, cand, _ in primaries]
        outcomes = evaluator.evaluate_batch(requests) if requests else []
        for (t, cand, key), outcome in zip(primaries, outcomes):
            outcome = finite_or_infeasible(context, outcome)
            batch[t] = row(t, cand, outcome.status, reason=outcome.reason, outcome=outcome, key=key)
            if outcome.feasible:
                cache.add(key, outcome)
                result.unique += 1
            for dt, dcand in duplicates.get(key, []):
                batch[dt] = row(dt, dcand, outcome.status, reason=outcome.reason, cache_hit=outcome.feasible,
                                duplicate_of=t, key=key, sample=outcome.sample, metrics=outcome.metrics,
                                score=outcome.score, objectives=outcome.objectives)
            if on_result is not None:
                on_result(batch[t])
        new_rows = [batch[t] for t in sorted(batch)]
        rows.extend(new_rows)
        if on_batch is not None:
            on_batch(new_rows)
        ask += 1
    result.rows = rows
    return _mark_stall(result, branch, round_no, per_round)


def _mark_stall(result: RoundResult, branch: Branch, round_no: int, per_round: int) -> RoundResult:
    """§6.5: a round short of its target ends the branch."""
    if result.unique < per_round:
        result.stalled = True
        result.message = (f"{branch.mode}: stopped early: projection stalled after {result.attempts} Vizier "
                          f"trial(s) in round {round_no + 1} ({result.unique}/{per_round} unique successful "
                          "evaluations); moving on")
    return result


def stored_round(branch: Branch, round_no: int, rows: Sequence[Mapping[str, Any]],
                 context: SearchContext) -> RoundResult:
    """A round already in trials.parquet, as run_round returned it (resume reads, never re-evaluates)."""
    unique, attempts, _ = round_progress(rows)
    result = RoundResult(rows=list(rows), unique=unique, attempts=attempts)
    if context.config.sweep.policy.value == "thorough":
        return result
    return _mark_stall(result, branch, round_no, context.config.sweep.per_round)


# ---------------------------------------------------------------- thorough policy


def thorough_candidates(branch: Branch) -> Iterator[Candidate]:
    """Every (backend, legal parallel config, knob combination) of a finite branch, in canonical order."""
    knobs = {k: v for k, v in branch.knob_choices.items() if k != "backend"}
    names = list(knobs)
    for backend in branch.backends:
        for config in branch.configs_for(backend):
            for combo in itertools.product(*(knobs[n] for n in names)):
                selection = {"deployment_mode": branch.mode, "backend": backend, **dict(zip(names, combo))}
                raw = {k: v for k, v in selection.items() if k != "deployment_mode"}
                yield Candidate(raw, selection, None, config)


def round_plan(branches: Sequence[Branch], config: SmartSearchConfig) -> tuple[dict[str, int], int]:
    """Rounds per branch and the evaluation target (§6.1): rapid → max_rounds × per_round per branch;
    thorough → enough rounds to enumerate each branch, the target being the space's size."""
    sweep = config.sweep
    if sweep.policy.value == "thorough":
        rounds = {b.mode: -(-thorough_size(b) // sweep.per_round) for b in branches}
        return rounds, sum(thorough_size(b) for b in branches)
    return {b.mode: sweep.max_rounds for b in branches}, len(branches) * sweep.max_rounds * sweep.per_round


def thorough_size(branch: Branch) -> int:
    combos = 1
    for name, values in branch.knob_choices.items():
        if name != "backend":
            combos *= len(values)
    return combos * sum(len(branch.configs_for(b)) for b in branch.backends)


def run_thorough_round(branch: Branch, context: SearchContext, round_no: int, start: int, evaluator: Evaluator,
                       cache: EvalCache, on_result: Callable[[dict[str, Any]], None] | None = None) -> RoundResult:
    """Evaluate the next ``per_round`` candidates of the canonical enumeration, from index ``start``."""
    per_round = context.config.sweep.per_round
    chosen = list(itertools.islice(thorough_candidates(branch), start, start + per_round))
    result = RoundResult(attempts=len(chosen))
    todo: list[tuple[int, Candidate, str]] = []
    for offset, cand in enumerate(chosen):
        t = start + offset
        key = cache_key(context.key, cand.selection, cand.parallel)
        if (hit := cache.get(key)) is not None:
            result.rows.append(trial_row(mode=branch.mode, round_no=round_no, trial=t, candidate=cand,
                                         status="feasible", cache_hit=True, key=key, sample=hit["sample"],
                                         metrics=hit["metrics"], score=hit["score"], objectives=hit["objectives"]))
        else:
            todo.append((t, cand, key))
    outcomes = evaluator.evaluate_batch([_request(context, c, f"{branch.mode}-{t}") for t, c, _ in todo])
    for (t, cand, key), outcome in zip(todo, outcomes):
        outcome = finite_or_infeasible(context, outcome)
        if outcome.feasible:
            cache.add(key, outcome)
            result.unique += 1
        row = trial_row(mode=branch.mode, round_no=round_no, trial=t, candidate=cand, status=outcome.status,
                        reason=outcome.reason, outcome=outcome, key=key)
        result.rows.append(row)
        if on_result is not None:
            on_result(row)
    result.rows.sort(key=lambda r: r["trial"])
    return result


# ---------------------------------------------------------------- merge and tally


def candidates_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Unique feasible candidates (each evaluated sample once), in evaluation order."""
    out = []
    for row in rows:
        if is_evaluated_success(row):
            out.append({"mode": row["mode"], "round": row["round"], "trial": row["trial"],
                        "backend": row["backend"], "parallel": row["parallel"], "used_gpus": row["used_gpus"],
                        "score": row["score"],
                        "objectives": json.loads(row["objectives_json"]) if row["objectives_json"] else None,
                        "metrics": json.loads(row["metrics_json"]), "sample": json.loads(row["sample_json"])})
    return out


def merge(rows: Sequence[Mapping[str, Any]], config: SmartSearchConfig) -> list[dict[str, Any]]:
    """One ranking across branches and backends, or the non-dominated front (§4.3, §4.5)."""
    from spica_core.evaluate.scoring import pareto_front, rank

    candidates = candidates_from_rows(rows)
    if config.goal.is_pareto:
        return pareto_front(candidates, [o.value for o in config.goal.objectives])
    return rank(candidates)


def ranking_rows(merged: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"rank": i + 1, "mode": c["mode"], "backend": c["backend"], "parallel": c["parallel"],
             "used_gpus": c["used_gpus"], "score": c["score"],
             "objectives_json": canonical_json(c["objectives"]) if c["objectives"] else None,
             "metrics_json": canonical_json(c["metrics"]), "sample_json": canonical_json(c["sample"]),
             "round": c["round"], "trial": c["trial"]} for i, c in enumerate(merged)]


@dataclass
class Tally:
    """The outcome counts the summary prints (§6.6)."""

    attempts: int = 0
    feasible: int = 0
    infeasible: int = 0
    failed: int = 0
    unsupported: int = 0
    cache_hits: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Sequence[Mapping[str, Any]]) -> Tally:
        t = cls(attempts=len(rows))
        for row in rows:
            if row["cache_hit"]:
                t.cache_hits += 1
                continue
            status = row["status"]
            setattr(t, status, getattr(t, status) + 1)
            if status != "feasible":
                reason = _reason_class(row["reason"] or status)
                t.reasons[reason] = t.reasons.get(reason, 0) + 1
        return t

    def top_reasons(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(self.reasons.items(), key=lambda kv: -kv[1])[:n]


def _reason_class(reason: str) -> str:
    """Group reasons that differ only in numbers (e.g. 'over budget: 40 GPUs > 32')."""
    return reason.split(":")[0].strip()[:160] if ":" in reason else reason[:160]

