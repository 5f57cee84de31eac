"""The run report: ``report.md`` and ``report.html`` in the run folder, with PNG plots in ``report/``.

:func:`render_markdown` is pure (it reads the trace, never writes); :func:`write_report` draws the
plots with matplotlib's Agg canvas (a :class:`~matplotlib.figure.Figure` without pyplot: no global
state, safe in threads) and writes every file atomically.

The report shows the goal and SLA, the workload (the trace's request rate over time), the plots
(front or score against GPUs, best score so far per branch, scores by backend × strategy), the
winner next to the runner-up and what it gives up, AI Configurator's analytic estimate next to the
replay for static agg candidates, the outcome tally with its reasons, links to the files and the
provenance.
"""
from __future__ import annotations

import functools
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spica_core.config.model import SmartSearchConfig
from spica_core.emit.rechecks import CHECK_CONFIDENCE, ConfidenceCheck, sla_moves_ranking
from spica_core.emit.numbers import fmt
from spica_core.emit.records import CandidateRecord, Provenance
from spica_core.evaluate.bands import Band
from spica_core.errors import SpicaError
from spica_core.deployment import Candidate
from spica_core.evaluate.evaluator import Status
from spica_core.evaluate.metrics import METRICS, derived_metrics, metric_or_fallback, objective_metric
from spica_core.evaluate.scoring import minimised, raw_value
from spica_core.store import write_file
from spica_core.search.trials import Tally, Trial, reason_class
from spica_core.space.branches import config_strategy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from spica_core.emit.aic_estimate import AICEstimate

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "report"
PLOT_NAMES = ("front", "progress", "by_backend", "headroom", "trace_rate")
CANDIDATE_FILES = ("candidates.parquet", "candidates.json", "candidates.csv")
FIGSIZE = (6.0, 4.0)
DPI = 110


@dataclass(frozen=True)
class ReportInputs:
    """Everything the report shows; the emit stage builds it from the run's artifacts."""

    config: SmartSearchConfig
    records: Sequence[CandidateRecord]          # the ranked list or the front, rank order
    emitted: Sequence[int]                      # ranks that got manifests
    manifests: Mapping[int, str]                # rank -> manifest path relative to the run dir
    trials: Sequence[Trial]                     # every attempt (feasible ones have score/objectives/metrics)
    tally: Tally
    provenance: Provenance
    trace_file: Path | None
    aic: Mapping[int, AICEstimate | str | None]  # rank -> estimate (static agg only); a str is why there is none
    pareto: bool
    objectives: tuple[str, ...]                 # objective names (goal.objectives values)
    confidence: ConfidenceCheck | None = None   # the top candidates re-scored at another SLA confidence


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    plots: tuple[Path, ...]


# ---------------------------------------------------------------- metrics and number formatting

# the winner / runner-up comparison, in this order (labels, units and directions: evaluate/metrics.py)
COMPARED = tuple(METRICS[k] for k in (
    "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_tpot_ms", "mean_e2e_latency_ms",
    "p99_e2e_latency_ms", "output_throughput_tok_s", "output_throughput_tok_s_per_gpu",
    "mean_output_token_throughput_per_user", "goodput_output_throughput_tok_s",
    "goodput_output_throughput_tok_s_per_gpu", "used_gpus", "avg_gpus", "gpu_hours"))


def _signed_fmt(delta: float, unit: str) -> str:
    sign = "+" if delta > 0 else "-" if delta < 0 else "±"
    return sign + fmt(abs(delta), unit)


def _difference(a: float, b: float, unit: str) -> str:
    """a − b with its unit, and relative to b."""
    d = a - b
    text = _signed_fmt(d, unit)
    if b != 0 and math.isfinite(d):
        text += f" ({d / abs(b) * 100:+.1f}%)"
    return text


def _target_label(objective: str) -> tuple[str, str]:
    metric = objective_metric(objective)
    return metric.label, metric.unit


def _direction(objective: str) -> str:
    return "lower is better" if minimised(objective) else "higher is better"


def _cell(text: Any) -> str:
    """Safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------- what a score means

class _Goal:
    """Turns stored scores into the raw value a person reads (scores are higher-is-better)."""

    def __init__(self, inputs: ReportInputs):
        self.pareto = inputs.pareto
        self.objectives = tuple(inputs.objectives) or tuple(o.value for o in inputs.config.goal.objectives)
        self.first = self.objectives[0]

    def raw(self, score: float) -> float:
        """The first objective's value: a scalar score is signed; a Pareto score is already raw."""
        return score if self.pareto else raw_value(self.first, score)

    def better_key(self, score: float) -> float:
        """Higher is better, for both kinds of score."""
        return -score if self.pareto and minimised(self.first) else score

    def axis_label(self) -> str:
        label, unit = _target_label(self.first)
        return f"{label} ({unit})" if unit else label


def _feasible(trials: Sequence[Trial]) -> list[Trial]:
    """Feasible trials with a replay of their own (cache hits repeat one) and a score."""
    return [t for t in trials if t.is_evaluated_success and t.score is not None]


def _is_static_agg(candidate: Candidate) -> bool:
    return candidate.mode == "agg" and not candidate.planner.scales


def _describe(record: CandidateRecord) -> str:
    c = record.candidate
    return f"{c.mode} {c.backend} {c.parallel.label()}"


# ---------------------------------------------------------------- the trace


@dataclass(frozen=True)
class TraceProfile:
    requests: int
    duration_s: float
    mean_isl: float
    mean_osl: float
    bin_s: float
    rates: tuple[float, ...]         # requests/s per bin, from the first arrival

    @property
    def mean_rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def peak_rps(self) -> float:
        return max(self.rates, default=0.0)


def _whole(value: float) -> float | int:
    """An integral float as an int, so it prints without decimals."""
    return int(value) if float(value).is_integer() else value


def _seconds(value: float) -> str:
    return fmt(_whole(value), "s")


_NICE_BINS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def trace_profile(path: Path, bins: int = 60) -> TraceProfile:
    """Arrivals per time bin (about ``bins`` bins of a round width) and mean lengths of a mooncake trace.

    The last profile is kept by the file's identity (path, size, mtime), so the report's text, its plot and
    AIC's mean lengths share one parse of a trace that may hold a million rows."""
    stat = os.stat(path)
    return _profile(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, bins)


@functools.lru_cache(maxsize=1)
def _profile(path: str, size: int, mtime_ns: int, bins: int) -> TraceProfile:
    """One parse of the trace; ``size`` and ``mtime_ns`` are only part of the cache's key."""
    from spica_core.predictors.windows import read_arrivals, windows_from_arrivals

    arrivals = read_arrivals(path)
    n = int(arrivals.timestamp_ms.size)
    if n == 0:
        return TraceProfile(0, 0.0, 0.0, 0.0, 1.0, ())
    start, end = float(arrivals.timestamp_ms.min()) / 1000.0, float(arrivals.timestamp_ms.max()) / 1000.0
    span = end - start
    width = float(next((b for b in _NICE_BINS if b * bins >= span), math.ceil(span / bins)))
    windows = windows_from_arrivals(arrivals, width, origin_s=start)
    return TraceProfile(n, span, float(arrivals.input_length.mean()), float(arrivals.output_length.mean()), width,
                        tuple(w.num_req / width for w in windows))


# ---------------------------------------------------------------- markdown


def render_markdown(inputs: ReportInputs, plots: Mapping[str, str]) -> str:
    """The whole report as Markdown; ``plots`` maps a plot name (see PLOT_NAMES) to its relative PNG path."""
    goal = _Goal(inputs)
    lines: list[str] = ["# Spica sweep report", ""]
    ss = inputs.config.search_space
    lines.append(f"{ss.model_name} on {ss.hardware_sku}, GPU budget {ss.gpu_budget}; "
                 f"modes {', '.join(ss.deployment_mode)}; backends {', '.join(ss.backend)}.")
    lines.append("")
    lines += _goal_section(inputs, goal)
    lines += _workload_section(inputs, plots)
    lines += _results_section(inputs, goal, plots)
    lines += _winner_section(inputs, goal)
    lines += _aic_section(inputs)
    lines += _tally_section(inputs)
    lines += _files_section(inputs)
    lines += _provenance_section(inputs.provenance)
    return "\n".join(lines).rstrip() + "\n"


def _goal_section(inputs: ReportInputs, goal: _Goal) -> list[str]:
    config = inputs.config
    lines = ["## Goal and SLA", ""]
    if goal.pareto:
        parts = [f"{o} ({_target_label(o)[1]}, {_direction(o)})" for o in goal.objectives]
        lines.append(f"- goal: Pareto front over {', '.join(parts)}")
    else:
        label, unit = _target_label(goal.first)
        ties = ("ties go to higher goodput per GPU, then fewer GPUs" if goal.first == "min_gpus"
                else "ties go to fewer GPUs")
        lines.append(f"- goal: {goal.first}: {label} ({unit}, {_direction(goal.first)}); {ties}")
    sla = config.goal.sla
    if sla is None or not sla.model_dump(exclude_none=True):
        lines.append("- SLA: none")
    else:
        parts = [f"{name} ≤ {fmt(_whole(value), 'ms')}" for name, value in
                 (("TTFT", sla.ttft_ms), ("ITL", sla.itl_ms), ("E2E", sla.e2e_ms)) if value is not None]
        lines.append(f"- SLA: {', '.join(parts)}")
        lines.append(_requirement_line(config))
        lines += _confidence_lines(inputs)
    sweep = config.sweep
    lines.append(f"- search: {sweep.policy.value}, {sweep.max_rounds} rounds × {sweep.per_round} per round, "
                 f"seed {sweep.seed}")
    lines.append("")
    return lines


def _requirement_line(config: SmartSearchConfig) -> str:
    """What the SLA asks of a candidate, in a user's words."""
    goal = config.goal
    required = goal.required_attainment
    if required <= 0:
        return ("- SLA requirement: none (`sla_attainment: 0`): the SLA counts only in goodput, so a candidate "
                "whose requests mostly miss it can still rank first")
    where = ("only candidates that meet it are on the front (all of them when none does)" if goal.is_pareto else
             "a candidate that misses it is still listed, but after every candidate that meets it, and those "
             "that miss it rank by attainment")
    return (f"- SLA requirement: at least {percent(required)} of requests (rejected ones included) must meet the SLA "
            f"at today's traffic (`sla_attainment`; the share that does is the candidate's attainment); {where}")


def percent(share: float) -> str:
    """``90 %``, ``80.5 %``: a share of requests."""
    return f"{share * 100:.3g} %"


def attainment_text(share: float | None, meets: bool | None) -> str:
    """``0.93 (meets)``, ``0.81 (misses)``: the SLA attainment and the requirement's verdict; ``—`` without an SLA."""
    if share is None:
        return "—"
    return f"{share:.2f} ({'meets' if meets else 'misses'})"


def _confidence_lines(inputs: ReportInputs) -> list[str]:
    """Which SLA confidence ranked the candidates, and how the top ones would rank at the check's."""
    conf = inputs.config.goal.sla_confidence
    lines = [f"- SLA confidence: {conf:g} — " + ("the point prediction" if conf <= 0.5 else
             f"a request meets the SLA only if its latency, times the p{round(conf * 100)} of measured ÷ "
             "predicted on measured GPUs (the candidate's error band), meets it")]
    check = inputs.confidence
    if check is None:
        if not sla_moves_ranking(inputs.config):
            lines.append("- the SLA does not enter this goal's ranking, so no confidence changes it")
        elif conf != CHECK_CONFIDENCE:
            lines.append(f"- at confidence {CHECK_CONFIDENCE:g}: not replayed (`spica emit` replays nothing)")
        return lines
    order = check.reranked()

    def shown_one(r: int) -> str:
        if check.scores[r] is None:
            return f"rank {r} (failed)"
        share = check.attainments.get(r)
        missing = ", misses the SLA requirement" if check.misses(r) else ""
        return (f"rank {r} ({fmt(check.scores[r])}" + (f", attainment {share:.2f}" if share is not None else "")
                + f"{missing})")

    shown = ", ".join(shown_one(r) for r in order)
    same = order == sorted(check.scores)
    lines.append(f"- at confidence {check.confidence:g} the top {len(order)} would rank: {shown}"
                 + (" — the same order" if same else " — a different order"))
    return lines


def _over_context_lines(inputs: ReportInputs) -> list[str]:
    """How many requests exceed the context and what became of them (workload.over_context)."""
    from spica_core.run.inputs import over_context_note

    note = over_context_note(inputs.config, inputs.trace_file)
    return [f"- {note}"] if note else []


def _workload_section(inputs: ReportInputs, plots: Mapping[str, str]) -> list[str]:
    w = inputs.config.workload
    lines = ["## Workload", ""]
    if w.is_trace:
        name = inputs.trace_file.name if inputs.trace_file is not None else w.trace_path
        lines.append(f"- trace: `{name}` ({w.trace_format})")
        if w.arrival_speedup_ratio != 1.0:
            lines.append(f"- arrivals replayed {fmt(w.arrival_speedup_ratio)}× as fast as recorded")
        if w.replay_concurrency is not None:
            lines.append(f"- replay concurrency cap: {fmt(w.replay_concurrency)} in flight")
        profile: TraceProfile | None = None
        if inputs.trace_file is not None:
            try:
                profile = trace_profile(inputs.trace_file)
            except (OSError, SpicaError) as exc:  # a report renders whatever became of the trace
                lines.append(f"- the trace could not be read: {exc}")
        else:
            lines.append("- the trace file is not available to this report (a copied run folder)")
        if profile is not None:
            lines.append(f"- {fmt(profile.requests)} requests over {fmt(profile.duration_s, 's')}: mean "
                         f"{fmt(profile.mean_rps, 'req/s')}, peak {fmt(profile.peak_rps, 'req/s')} "
                         f"(per {_seconds(profile.bin_s)} bin)")
            lines.append(f"- mean ISL {fmt(profile.mean_isl, 'tokens')}, mean OSL {fmt(profile.mean_osl, 'tokens')}")
        lines += _over_context_lines(inputs)
        if "trace_rate" in plots:
            lines += ["", f"![requests per second over time]({plots['trace_rate']})"]
    else:
        lines.append(f"- synthetic: ISL {fmt(w.isl, 'tokens')}, OSL {fmt(w.osl, 'tokens')}")
        if w.request_rate is not None:
            load = f"open loop at {fmt(w.request_rate, 'req/s')}"
        elif w.concurrency is not None:
            load = f"closed loop, {fmt(w.concurrency)} requests in flight"
        elif w.kv_load_range is not None:
            lo, hi = w.kv_load_range
            load = f"closed loop, KV load ratio searched in [{fmt(lo)}, {fmt(hi)}] of KV capacity"
        else:
            load = f"closed loop, KV load ratio {fmt(w.kv_load_ratio)} of KV capacity"
        lines.append(f"- load: {load}")
        if w.num_request_ratio is not None:
            count = w.concurrency or w.request_rate
            extra = (f" ({fmt(round(w.num_request_ratio * count) * w.turns_per_session)} requests)"
                     if count is not None else "")
            lines.append(f"- num_request_ratio {fmt(w.num_request_ratio)}{extra}")
        if w.shared_prefix_ratio > 0 or w.num_prefix_groups > 0:
            lines.append(f"- shared prefix: {fmt(w.shared_prefix_ratio * 100)}% of the prompt, "
                         f"{fmt(w.num_prefix_groups)} groups")
        if w.turns_per_session > 1:
            lines.append(f"- {fmt(w.turns_per_session)} turns per session, "
                         f"{fmt(w.inter_turn_delay_ms, 'ms')} between turns")
    lines.append("")
    return lines


def _results_section(inputs: ReportInputs, goal: _Goal, plots: Mapping[str, str]) -> list[str]:
    lines = ["## Results", ""]
    feasible = _feasible(inputs.trials)
    if not inputs.records:
        lines += _no_candidate(inputs.tally)
    else:
        what = "points of the Pareto front" if goal.pareto else "ranked candidates"
        lines.append(f"{len(inputs.records)} {what} from {fmt(len(feasible))} feasible evaluation(s); "
                     f"{len(inputs.emitted)} emitted as manifests.")
        lines.append("")
    captions = {"front": "Pareto front (emitted points marked)" if goal.pareto
                else f"{goal.axis_label()} against GPUs used (ranked and emitted candidates marked)",
                "progress": "best score so far against evaluations, per branch",
                "by_backend": "scores by backend and parallel strategy"}
    for name, caption in captions.items():
        if name in plots:
            lines += [f"![{caption}]({plots[name]})", ""]
    if inputs.records:
        lines += _candidates_table(inputs, goal)
        lines += _headroom_lines(inputs, plots)
    return lines


def _headroom_lines(inputs: ReportInputs, plots: Mapping[str, str]) -> list[str]:
    """How much more traffic the emitted candidates take before their SLA breaks."""
    goal = inputs.config.goal
    lines = ["### Headroom", ""]
    if goal.sla is None:
        return [*lines, "No SLA, so no headroom: nothing breaks as traffic grows.", ""]
    measured = [r for r in inputs.records if r.headroom is not None]
    if not measured:
        return [*lines, "Not measured for these candidates (`spica emit` replays nothing).", ""]
    lines.append(f"The largest traffic scale (up to {fmt(goal.headroom_max)}×) at which at least "
                 f"{percent(goal.headroom_share)} of requests meet the SLA, found by bisection to 5 %:")
    lines.append("")
    for r in measured:
        assert r.headroom is not None
        lines.append(f"- rank {r.rank} ({_describe(r)}): {r.headroom.text()}, {r.headroom.evaluations} extra replays")
    if "headroom" in plots:
        lines += ["", f"![SLA attainment against traffic scale]({plots['headroom']})"]
    return [*lines, ""]


def _no_candidate(tally: Tally) -> list[str]:
    top = tally.top_reasons(3)
    lines = [f"**No feasible candidate**: none of the {fmt(tally.attempts)} attempt(s) was feasible "
             f"({fmt(tally.infeasible)} infeasible, {fmt(tally.failed)} failed, {fmt(tally.unsupported)} "
             "unsupported)."]
    if top:
        lines.append("Top reasons: " + "; ".join(f"{reason} ({n}×)" for reason, n in top) + ".")
    lines.append("")
    return lines


def _candidates_table(inputs: ReportInputs, goal: _Goal) -> list[str]:
    emitted = set(inputs.emitted)
    value_cols = [f"{o} ({_target_label(o)[1]})" for o in goal.objectives]
    scale = inputs.config.goal.robust_scale
    robust = scale > 1 and not goal.pareto
    if robust:
        value_cols = [f"{value_cols[0]}, robust: the worse of 1× and {fmt(scale)}× traffic", "at today's traffic"]
    sla = inputs.config.goal.sla is not None
    header = ["rank", "mode", "backend", "parallel", "strategy", "GPUs", "precision / batching / router / planner",
              *value_cols, *(["SLA attainment"] if sla else []), "throughput", "TTFT mean (band)", "ITL mean (band)",
              "manifest"]
    rows = []
    for r in inputs.records[:TABLE_ROWS]:
        m = derived_metrics(r.metrics)
        c = r.candidate
        if goal.pareto:
            values = [fmt((r.objectives or {}).get(o), _target_label(o)[1]) for o in goal.objectives]
        else:
            values = [fmt(goal.raw(r.score), _target_label(goal.first)[1])]
        if robust:
            values.append(fmt(goal.raw(r.metrics["plain_score"]), _target_label(goal.first)[1])
                          if "plain_score" in r.metrics else "—")
        itl = metric_or_fallback(m, "mean_itl_ms")
        link = inputs.manifests.get(r.rank)
        manifest = f"[{link}]({link})" if link else ("emitted" if r.rank in emitted else "")
        rows.append([rank_label(r), c.mode, c.backend, c.parallel.label(), config_strategy(c.parallel), r.used_gpus,
                     c.knobs_label(), *values, *([attainment_text(r.attainment, r.meets_sla)] if sla else []),
                     fmt(m.get("output_throughput_tok_s"), "tok/s"),
                     _with_band(m.get("mean_ttft_ms"), r.bands.get("ttft_ms")),
                     _with_band(itl, r.bands.get("itl_ms")), manifest])
    lines = _table(header, rows)
    lines += _requirement_notes(inputs, goal)
    lines += _tie_notes(inputs.records)
    if any(r.candidate.router.is_kv for r in inputs.records[:TABLE_ROWS]):
        lines += ["", "KV-router replays are not exactly reproducible: ai-dynamo-runtime breaks routing ties with an "
                      "unseeded generator, so the same candidate scores about 0.1–0.5 % apart from run to run and a "
                      "re-run sweep can rank near-ties differently. Each emitted KV-router candidate was replayed "
                      "3 more times; twice its spread is in its band (`spread`)."]
    if len(inputs.records) > TABLE_ROWS:
        lines += ["", f"The top {TABLE_ROWS} of {fmt(len(inputs.records))} are shown; every candidate is in "
                      "[candidates.csv](candidates.csv)."]
    return [*lines, ""]


TABLE_ROWS = 20  # the results table's length; candidates.csv has every candidate


def rank_label(record: CandidateRecord) -> str:
    """``2`` or, in a near-tie, ``=2``: the order within a tie is not a result."""
    return f"={record.rank}" if record.tied_with else str(record.rank)


def _requirement_notes(inputs: ReportInputs, goal: _Goal) -> list[str]:
    """Every candidate that misses the SLA requirement, by name, or that none meets it."""
    required = inputs.config.goal.required_attainment
    missing = [r for r in inputs.records if r.meets_sla is False]
    if not missing or required <= 0:
        return []
    need = percent(required)
    if len(missing) == len(inputs.records):
        what = ("the front is drawn over all of them" if goal.pareto
                else "they are ranked by attainment, highest first")
        return ["", f"**No candidate meets the SLA requirement** ({need} of requests within the SLA); {what}. "
                    "Deploying any of them, expect more requests to miss the SLA than required: raise the GPU "
                    "budget, relax the SLA, or lower the traffic."]
    named = "; ".join(f"rank {r.rank} ({_describe(r)}): {percent(r.attainment or 0.0)}" for r in missing)
    return ["", f"Missing the SLA requirement ({need} of requests within the SLA), so ranked after every candidate "
                f"that meets it: {named}."]


def _tie_notes(records: Sequence[CandidateRecord]) -> list[str]:
    """Near-ties: neighbours whose scores differ by less than their replays' run-to-run spread."""
    groups = sorted({tuple(sorted((r.rank, *r.tied_with))) for r in records if r.tied_with})
    if not groups:
        return []
    named = "; ".join("ranks " + ", ".join(map(str, g)) for g in groups)
    return ["", f"Near-ties (`=` in the rank column): {named}. Their scores differ by less than their replays' "
                "run-to-run spread (`score_spread` in candidates.json), so their order is not a result: "
                "choose among them on the other columns."]


def _p10_p90(band: Band) -> str:
    return f"{fmt(band.p10)}–{fmt(band.p90)}"


def band_range(band: Band | None) -> str:
    """``34.0–46.0 ms (60 rows)``: where the true value has landed on measured GPUs (p10–p90)."""
    return "—" if band is None else f"{_p10_p90(band)} ms ({fmt(band.rows)} rows)"


def _with_band(value: float | None, band: Band | None) -> str:
    """``38 ms (34–46 on measured GPUs, 60 rows)``."""
    if value is None or band is None:
        return fmt(value, "ms")
    return f"{fmt(value, 'ms')} ({_p10_p90(band)} on measured GPUs, {fmt(band.rows)} rows)"


def _winner_section(inputs: ReportInputs, goal: _Goal) -> list[str]:
    if not inputs.records:
        return []
    winner = inputs.records[0]
    lines = ["## The winner and why", ""]
    lines.append(f"Rank {winner.rank}: **{_describe(winner)}** ({fmt(winner.used_gpus)} GPUs, found in round "
                 f"{winner.round + 1}).")
    if len(inputs.records) < 2:
        feasible = inputs.tally.feasible
        lines += ["", "It is the only ranked candidate" + (f" ({fmt(feasible)} feasible evaluation(s))."
                                                            if feasible else "."), ""]
        lines += _metrics_table([("winner", winner)])
        return lines
    runner = inputs.records[1]
    lines += ["", *_why(goal, winner, runner, inputs.config.search_space.gpu_budget), ""]
    lines += _metrics_table([(f"winner (rank {winner.rank})", winner), (f"runner-up (rank {runner.rank})", runner)],
                            diff=True)
    gives = _gives_up(winner, runner)
    lines.append(f"**What the winner gives up** (where the runner-up, {_describe(runner)}, is better):")
    lines.append("")
    lines += [f"- {g}" for g in gives] if gives else ["- nothing: it is at least as good on every metric shown"]
    lines.append("")
    return lines


def _why(goal: _Goal, winner: CandidateRecord, runner: CandidateRecord, budget: int) -> list[str]:
    if goal.pareto:
        w, r = winner.objectives or {}, runner.objectives or {}
        better = [o for o in goal.objectives if o in w and o in r
                  and (w[o] < r[o] if minimised(o) else w[o] > r[o])]
        worse = [o for o in goal.objectives if o in w and o in r
                 and (w[o] > r[o] if minimised(o) else w[o] < r[o])]
        parts = ", ".join(f"{o} {fmt(w[o], _target_label(o)[1])} vs {fmt(r[o], _target_label(o)[1])}"
                          for o in goal.objectives if o in w and o in r)
        return [f"A Pareto front has no single winner: rank {winner.rank} is the first point of the front "
                f"(ordered by {goal.objectives[-1]}) and is compared with its neighbour, rank {runner.rank}. "
                f"Neither dominates the other: {parts}; rank {winner.rank} is better on "
                f"{', '.join(better) or 'nothing'} and worse on {', '.join(worse) or 'nothing'}."]
    label, unit = _target_label(goal.first)
    wv, rv = goal.raw(winner.score), goal.raw(runner.score)
    if winner.meets_sla and runner.meets_sla is False:
        return [f"The runner-up misses the SLA requirement ({percent(runner.attainment or 0.0)} of its requests meet "
                f"the SLA); the winner meets it ({percent(winner.attainment or 0.0)}), with {label} {fmt(wv, unit)} vs "
                f"{fmt(rv, unit)}."]
    if winner.meets_sla is False:
        return [f"No candidate meets the SLA requirement; the winner comes closest ({percent(winner.attainment or 0.0)}"
                f" of its requests meet the SLA, the runner-up's {percent(runner.attainment or 0.0)})."]
    if winner.tied_with and runner.rank in winner.tied_with:
        return [f"A near-tie with the runner-up: {label} {fmt(wv, unit)} vs {fmt(rv, unit)} is within their replays' "
                "run-to-run spread, so either may come first on a re-run."]
    if winner.score == runner.score:
        return [f"Tied on {label} ({fmt(wv, unit)}); the winner uses fewer GPUs "
                f"({fmt(winner.used_gpus)} vs {fmt(runner.used_gpus)}), which breaks the tie."]
    return [f"Best {label}: {fmt(wv, unit)} vs the runner-up's {fmt(rv, unit)}, {_difference(wv, rv, unit)}, "
            f"within the GPU budget ({fmt(winner.used_gpus)} of {fmt(budget)} GPUs)."]


def _metrics_table(columns: Sequence[tuple[str, CandidateRecord]], diff: bool = False) -> list[str]:
    values = [derived_metrics(r.metrics, r.used_gpus) for _, r in columns]
    header = ["metric", *(name for name, _ in columns)] + (["difference"] if diff else [])
    rows = []
    for metric in COMPARED:
        label, key, unit = metric.label, metric.key, metric.unit
        if not any(key in v for v in values):
            continue
        row = [label, *(fmt(_value(key, v.get(key)), unit) for v in values)]
        if diff:
            a, b = _value(key, values[0].get(key)), _value(key, values[1].get(key))
            row.append(_difference(a, b, unit) if a is not None and b is not None else "—")
        rows.append(row)
    return [*_table(header, rows), ""]


def gives_up(winner: Mapping[str, float], runner: Mapping[str, float]) -> list[tuple[str, float, float, str]]:
    """(label, winner value, runner-up value, unit) for every compared metric where the runner-up is better."""
    out = []
    for metric in COMPARED:
        key = metric.key
        if key not in winner or key not in runner:
            continue
        a, b = winner[key], runner[key]
        if (a < b) if metric.higher_is_better else (a > b):
            out.append((metric.label, _value(key, a), _value(key, b), metric.unit))
    return out


def _gives_up(winner: CandidateRecord, runner: CandidateRecord) -> list[str]:
    w = derived_metrics(winner.metrics, winner.used_gpus)
    r = derived_metrics(runner.metrics, runner.used_gpus)
    lines = []
    for label, a, b, unit in gives_up(w, r):
        lines.append(f"{label}: {fmt(a, unit)} vs {fmt(b, unit)}, {_difference(a, b, unit)}")
    return lines


def _value(key: str, value: float | None) -> float | int | None:
    """GPU counts are whole numbers."""
    return int(value) if key == "used_gpus" and value is not None else value


def _aic_section(inputs: ReportInputs) -> list[str]:
    if not any(_is_static_agg(r.candidate) or r.rank in inputs.aic for r in inputs.records):
        return []  # nothing AIC's static agg estimate applies to
    shown = inputs.records
    lines = ["## AI Configurator's estimate (static agg)", "",
             "AI Configurator's own analytic estimate of the same config, next to the replay's number.", ""]
    for r in shown:
        est = inputs.aic.get(r.rank)
        title = f"- rank {r.rank} ({_describe(r)}):"
        if est is None or isinstance(est, str):
            why = est if isinstance(est, str) and est else _no_estimate_reason(r, r.rank in inputs.aic)
            lines += [f"{title} no AIC estimate" + (f" ({why})" if why else ""), ""]
            continue
        source = getattr(est, "source", "")
        asked = getattr(est, "requested_concurrency", 0)
        point = f"concurrency {fmt(int(est.concurrency))}" + (
            f" (asked {fmt(int(asked))})" if asked and asked != est.concurrency else "")
        lines += [f"{title} at ISL {fmt(int(est.isl))}, OSL {fmt(int(est.osl))}, {point}"
                  + (f"; source: {source}" if source else ""), ""]
        if getattr(est, "kv_cache_warning", None):
            lines += [f"  AIC warns: {est.kv_cache_warning}", ""]
        m = derived_metrics(r.metrics)
        tpot = metric_or_fallback(m, "mean_tpot_ms")
        pairs = (("TTFT mean", est.ttft_ms, m.get("mean_ttft_ms"), "ms"),
                 ("TPOT / ITL mean", est.tpot_ms, tpot, "ms"),
                 ("throughput", est.output_throughput_tok_s, m.get("output_throughput_tok_s"), "tok/s"),
                 ("throughput per GPU", est.output_throughput_tok_s_per_gpu,
                  m.get("output_throughput_tok_s_per_gpu"), "tok/s/GPU"))
        rows = [[label, fmt(a, unit), fmt(b, unit), _difference(b, a, unit) if a is not None and b is not None
                 else "—"] for label, a, b, unit in pairs]
        lines += _table(["metric", "AI Configurator", "replay", "replay − AIC"], rows)
        lines.append("")
    return lines


def _no_estimate_reason(record: CandidateRecord, asked: bool) -> str:
    c = record.candidate
    if c.mode != "agg":
        return "disagg: AIC's estimate is for a static agg deployment"
    if c.planner.scales:
        return "the planner scales replicas: not a static deployment"
    if asked:
        return ("AIC has no analytic answer for it: no perf database, an unknown model or SKU, a shape or "
                "quant mode AIC cannot model, or it does not fit in GPU memory")
    return "not estimated"


def _tally_section(inputs: ReportInputs) -> list[str]:
    t = inputs.tally
    lines = ["## Outcome tally", ""]
    lines.append(f"{fmt(t.attempts)} attempts: {fmt(t.feasible)} feasible, {fmt(t.infeasible)} infeasible, "
                 f"{fmt(t.failed)} failed, {fmt(t.unsupported)} unsupported, {fmt(t.cache_hits)} cache hits.")
    lines.append(f"Replay time {fmt(t.replay_seconds, 's')} (summed over workers), optimizer time "
                 f"{fmt(t.optimizer_seconds, 's')}.")
    lines.append("")
    if t.reasons:
        kinds = _reason_kinds(inputs.trials)
        rows = [[reason, ", ".join(sorted(kinds.get(reason, ()))) or "—", n]
                for reason, n in sorted(t.reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines += [*_table(["reason", "outcome", "count"], rows), ""]
    return lines


def _reason_kinds(trials: Sequence[Trial]) -> dict[str, set[str]]:
    """Which outcome (infeasible, failed, ...) each of the tally's reason groups came from."""
    out: dict[str, set[str]] = {}
    for trial in trials:
        if trial.cache_hit or trial.status is Status.feasible:
            continue
        out.setdefault(reason_class(trial.reason or trial.status.value), set()).add(trial.status.value)
    return out


def _files_section(inputs: ReportInputs) -> list[str]:
    lines = ["## Files", ""]
    lines.append("- candidates: " + ", ".join(f"[{name}]({name})" for name in CANDIDATE_FILES))
    if inputs.manifests:
        lines.append("- manifests:")
        lines += [f"  - rank {rank}: [{path}]({path})" for rank, path in sorted(inputs.manifests.items())]
    else:
        lines.append("- manifests: none written")
    lines.append("")
    return lines


def _provenance_section(p: Provenance) -> list[str]:
    rows: list[list[Any]] = [["spica", p.spica_version], ["ai-dynamo-runtime (replay)", p.replay_runtime],
                             ["aiconfigurator-core", p.aiconfigurator_core]]
    rows += [[f"perf DB ({backend})", version] for backend, version in sorted(p.perf_db_versions.items())]
    rows += [["timing source", p.timing_source], ["config fingerprint", f"`{p.config_fingerprint}`"],
             ["trace fingerprint", f"`{p.trace_fingerprint}`" if p.trace_fingerprint else "—"]]
    rows += [[f"stage {stage}", f"`{fp}`"] for stage, fp in sorted(p.stage_fingerprints.items())]
    return ["## Provenance", "", *_table(["what", "value"], rows), ""]


# ---------------------------------------------------------------- HTML

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #1d1d1f; line-height: 1.45; }
h1, h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .9rem; }
th, td { border: 1px solid #ccc; padding: .25rem .55rem; text-align: left; }
th { background: #f3f3f3; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; display: block; margin: .5rem 0; }
code { background: #f3f3f3; padding: 0 .2rem; border-radius: 3px; font-size: .85rem; }
"""


def render_html(markdown_text: str, title: str = "Spica sweep report") -> str:
    """The Markdown as a standalone page; images stay relative links (they sit next to it). Raw HTML is shown
    as text, never passed on: the report quotes failure reasons, model paths and config names verbatim."""
    import html

    import markdown

    converter = markdown.Markdown(extensions=["tables"], output_format="html")
    converter.preprocessors.deregister("html_block")   # python-markdown's documented way to drop raw HTML
    converter.inlinePatterns.deregister("html")
    body = converter.convert(markdown_text)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{html.escape(title)}</title>\n"
            f"<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


# ---------------------------------------------------------------- plots


def _figure() -> tuple[Figure, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI)
    fig.clear()
    return buffer.getvalue()


def plot_front(inputs: ReportInputs) -> bytes | None:
    """Pareto goal: the first two objectives, every feasible trial, the front and the emitted points.
    Scalar goal: the score against GPUs used, the ranked and the emitted candidates marked."""
    goal = _Goal(inputs)
    feasible = _feasible(inputs.trials)
    emitted = set(inputs.emitted)
    if goal.pareto and len(goal.objectives) >= 2:
        xo, yo = goal.objectives[0], goal.objectives[1]

        def xy(objs: Mapping[str, float] | None) -> tuple[float, float] | None:
            if not objs or xo not in objs or yo not in objs:
                return None
            return float(objs[xo]), float(objs[yo])

        points = [p for t in feasible if (p := xy(t.objectives)) is not None]
        front = [(r, p) for r in inputs.records if (p := xy(r.objectives)) is not None]
        if not points and not front:
            return None
        fig, ax = _figure()
        if points:
            ax.scatter(*zip(*points), s=14, color="#9a9a9a", alpha=0.6, label="feasible trials")
        if front:
            line = sorted(p for _, p in front)
            ax.plot(*zip(*line), "-o", color="#1f77b4", ms=5, label="front")
        marked = [(r, p) for r, p in front if r.rank in emitted]
        _mark_emitted(ax, marked)
        ax.set_xlabel(_axis(xo))
        ax.set_ylabel(_axis(yo))
        title = "Pareto front" + (f" (first two of {len(goal.objectives)} objectives)"
                                  if len(goal.objectives) > 2 else "")
        ax.set_title(title, fontsize=10)
    else:
        points = [(t.used_gpus, goal.raw(float(t.score))) for t in feasible if t.score is not None]
        ranked = [(r, (r.used_gpus, goal.raw(r.score))) for r in inputs.records]
        if not points and not ranked:
            return None
        fig, ax = _figure()
        if points:
            ax.scatter(*zip(*points), s=14, color="#9a9a9a", alpha=0.6, label="feasible trials")
        if ranked:
            ax.scatter(*zip(*(p for _, p in ranked)), s=36, facecolors="none", edgecolors="#1f77b4",
                       label="ranked")
        marked = [(r, p) for r, p in ranked if r.rank in emitted]
        _mark_emitted(ax, marked)
        ax.set_xlabel("GPUs used")
        ax.set_ylabel(goal.axis_label())
        ax.set_title(f"{goal.first} against GPUs", fontsize=10)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def _mark_emitted(ax: Any, marked: Sequence[tuple[Any, tuple[float, float]]]) -> None:
    """A red star and its rank on each candidate that got a manifest."""
    if not marked:
        return
    ax.scatter(*zip(*(p for _, p in marked)), marker="*", s=160, color="#d62728", zorder=5, label="emitted")
    for r, p in marked:
        ax.annotate(f"#{r.rank}", p, textcoords="offset points", xytext=(6, 4), fontsize=8)


def _axis(objective: str) -> str:
    label, unit = _target_label(objective)
    return f"{label} ({unit})" if unit else label


def progress_series(inputs: ReportInputs) -> dict[str, list[tuple[int, float]]]:
    """Per branch: (evaluation number, best value so far) after every replayed attempt from the first feasible."""
    goal = _Goal(inputs)
    out: dict[str, list[tuple[int, float]]] = {}
    modes = sorted({t.mode for t in inputs.trials})
    for mode in modes:
        ran = sorted((t for t in inputs.trials if t.mode == mode and not t.cache_hit
                      and t.status is not Status.unsupported), key=lambda t: (t.round, t.trial))
        best: float | None = None
        series: list[tuple[int, float]] = []
        for i, t in enumerate(ran, 1):
            if t.status is Status.feasible and t.score is not None:
                score = float(t.score)
                if best is None or goal.better_key(score) > goal.better_key(best):
                    best = score
            if best is not None:
                series.append((i, goal.raw(best)))
        if series:
            out[mode] = series
    return out


def plot_progress(inputs: ReportInputs) -> bytes | None:
    series = progress_series(inputs)
    if not series:
        return None
    goal = _Goal(inputs)
    fig, ax = _figure()
    for mode, points in series.items():
        xs, ys = zip(*points)
        ax.step(xs, ys, where="post", label=mode, lw=1.6)
        ax.plot(xs[-1], ys[-1], "o", ms=4, color=ax.lines[-1].get_color())
    ax.set_xlabel("evaluations (replays) in the branch")
    ax.set_ylabel("best " + goal.axis_label())
    ax.set_title("best so far, per branch" + (f" ({goal.first}, the front's first objective)"
                                              if goal.pareto else ""), fontsize=10)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def plot_headroom(inputs: ReportInputs) -> bytes | None:
    """SLA attainment against traffic scale for the candidates whose headroom was measured."""
    measured = [r for r in inputs.records if r.headroom is not None and r.headroom.points]
    if not measured:
        return None
    fig, ax = _figure()
    for r in measured:
        assert r.headroom is not None
        xs, ys = zip(*r.headroom.points)
        ax.plot(xs, ys, "o-", ms=3, lw=1.2, label=f"rank {r.rank}: {r.candidate.parallel.label()}")
    ax.axhline(inputs.config.goal.headroom_share, color="grey", lw=0.8, ls="--")
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("traffic scale (× today's)")
    ax.set_ylabel("share of requests meeting the SLA")
    ax.set_title("SLA attainment against traffic", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def backend_groups(inputs: ReportInputs) -> dict[str, list[float]]:
    """``backend / mode strategy`` -> the first objective's value of each feasible trial."""
    goal = _Goal(inputs)
    groups: dict[str, list[float]] = {}
    for t in _feasible(inputs.trials):
        key = f"{t.backend}\n{t.mode} {config_strategy(t.parallel)}"
        groups.setdefault(key, []).append(goal.raw(float(t.score)))  # type: ignore[arg-type]
    return dict(sorted(groups.items()))


def plot_by_backend(inputs: ReportInputs) -> bytes | None:
    groups = backend_groups(inputs)
    if not groups:
        return None
    import numpy as np

    goal = _Goal(inputs)
    fig, ax = _figure()
    labels = list(groups)
    data = [groups[k] for k in labels]
    positions = list(range(1, len(labels) + 1))
    ax.boxplot(data, positions=positions, widths=0.5, showfliers=False,
               medianprops={"color": "#1f77b4"}, boxprops={"color": "#555555"})
    rng = np.random.default_rng(0)
    for pos, values in zip(positions, data):
        jitter = rng.uniform(-0.15, 0.15, len(values))
        ax.scatter(np.full(len(values), pos) + jitter, values, s=12, color="#d62728", alpha=0.6, zorder=3)
    ax.set_xticks(positions)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(goal.axis_label())
    ax.set_title("scores by backend × parallel strategy", fontsize=10)
    return _png(fig)


def plot_trace_rate(path: Path) -> bytes | None:
    profile = trace_profile(path)
    if not profile.rates:
        return None
    fig, ax = _figure()
    xs = [i * profile.bin_s for i in range(len(profile.rates))]
    ax.step(xs, profile.rates, where="post", color="#1f77b4", lw=1.4)
    ax.axhline(profile.mean_rps, color="#d62728", ls="--", lw=1, label=f"mean {fmt(profile.mean_rps, 'req/s')}")
    ax.set_xlabel("time since the first request (s)")
    ax.set_ylabel(f"requests/s (per {_seconds(profile.bin_s)} bin)")
    ax.set_title(f"trace arrivals: {fmt(profile.requests)} requests", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


# ---------------------------------------------------------------- files


def draw_plots(inputs: ReportInputs) -> dict[str, bytes]:
    """Every plot the inputs can fill, as PNG bytes by name (a plot with no data is left out)."""
    out: dict[str, bytes] = {}
    drawers: dict[str, Any] = {"front": lambda: plot_front(inputs), "progress": lambda: plot_progress(inputs),
                               "by_backend": lambda: plot_by_backend(inputs), "headroom": lambda: plot_headroom(inputs)}
    if inputs.config.workload.is_trace and inputs.trace_file is not None and inputs.trace_file.is_file():
        drawers["trace_rate"] = lambda: plot_trace_rate(inputs.trace_file)  # type: ignore[arg-type]
    for name, draw in drawers.items():
        try:
            png = draw()
        except (OSError, SpicaError):  # an unreadable trace must not lose the rest of the report
            if name != "trace_rate":
                raise
            png = None
        if png is not None:
            out[name] = png
    return out


def write_report(folder: Path, inputs: ReportInputs) -> ReportFiles:
    """Draw the plots into ``folder/report/`` and write ``report.md`` and ``report.html`` next to them."""
    folder = Path(folder)
    plot_dir = folder / PLOTS_DIR
    pngs = draw_plots(inputs)
    written: list[Path] = []
    relative: dict[str, str] = {}
    for name in PLOT_NAMES:
        path = plot_dir / f"{name}.png"
        if name in pngs:
            written.append(write_file(path, pngs[name]))
            relative[name] = f"{PLOTS_DIR}/{name}.png"
        else:
            path.unlink(missing_ok=True)  # a plot of an earlier emit that has no data now
    text = render_markdown(inputs, relative)
    md = write_file(folder / REPORT_MD, text.encode())
    html = write_file(folder / REPORT_HTML, render_html(text).encode())
    return ReportFiles(md, html, tuple(written))


__all__ = ["ReportFiles", "ReportInputs", "render_html", "render_markdown", "write_report", "fmt",
           "gives_up", "band_range", "attainment_text", "percent", "rank_label", "trace_profile", "progress_series", "backend_groups", "PLOT_NAMES"]
