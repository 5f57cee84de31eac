"""``spica sweep``: run the flow with a progress bar, then print the ranking or front and the tally."""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Protocol, Sequence, TextIO

from spica_cli.exits import EXIT_NO_RESULT, EXIT_OK

if TYPE_CHECKING:  # (imported when a sweep runs: `spica show` and the tests need none of the engines)
    from spica_core.deployment import Candidate
    from spica_core.evaluate import Applied
    from spica_core.run.catalog import SetAside
    from spica_core.search import SweepSummary, Tally

TOP = 10


def _fmt(value: Any) -> str:
    from spica_core.emit import fmt

    return fmt(value, digits=4)


class Ranked(Protocol):
    """What a table row needs: an emitted record (a ranked candidate with its SLA verdict and near-ties)."""

    rank: int
    score: float
    used_gpus: int
    candidate: Candidate
    metrics: dict[str, float]
    objectives: dict[str, float] | None
    attainment: float | None
    meets_sla: bool | None
    tied_with: tuple[int, ...]
    calibration: Applied | None


def candidate_table(ranking: Sequence[Ranked], pareto: bool, objectives: Sequence[str],
                    required_attainment: float = 0.0) -> list[str]:
    """The top candidates, or the front, as aligned text lines (a title line first, notes last)."""
    from spica_core.emit.report_format import rank_label
    from spica_core.emit.rows import candidate_row

    lines: list[str] = []
    sla = any(r.attainment is not None for r in ranking)
    verdict = ["SLA attainment"] if sla else []
    shown = ranking if pareto else ranking[:TOP]
    rows = [candidate_row(r.candidate, r.used_gpus, r.metrics, attainment=r.attainment, meets_sla=r.meets_sla)
            for r in shown]
    if pareto:
        lines.append(f"Pareto front: {len(ranking)} non-dominated candidate(s), sorted by {objectives[-1]}")
        header = ["#", "mode", "backend", "GPU type", "parallel", "GPUs", "concurrency", *objectives, *verdict]
        table = [[str(r.rank), row.mode, row.backend, row.gpu, row.parallel, str(row.gpus),
                  _fmt(r.candidate.concurrency),
                  *(_fmt((r.objectives or {}).get(o)) for o in objectives), *([row.attainment or "—"] if sla else [])]
                 for r, row in zip(shown, rows)]
    else:
        lines.append(f"Top {min(TOP, len(ranking))} of {len(ranking)} candidate(s) (score: higher is better)")
        priced = any(row.priced for row in rows)
        header = ["#", "score", *verdict, "mode", "backend", "GPU type", "parallel", "GPUs",
                  "precision seqs/tokens router planner",
                  "tok/s", "TTFT ms", "TPOT ms", *(["USD/Mtok"] if priced else [])]
        table = [[rank_label(r), _fmt(r.score), *([row.attainment or "—"] if sla else []), row.mode, row.backend,
                  row.gpu, row.parallel, str(row.gpus), row.knobs, _fmt(row.throughput_tok_s), _fmt(row.ttft_ms),
                  _fmt(row.tpot_ms), *([_fmt(row.cost_per_mtok)] if priced else [])]
                 for r, row in zip(shown, rows)]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(header)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in table]
    return lines + requirement_lines(ranking, pareto, required_attainment) + calibration_lines(shown)


def requirement_lines(ranking: Sequence[Ranked], pareto: bool, required: float) -> list[str]:
    """Under the table: how many meet the SLA requirement (or that none does), and the near-ties."""
    from spica_core.emit.report_format import percent

    lines = []
    if required > 0 and any(r.meets_sla is not None for r in ranking):
        meeting = sum(1 for r in ranking if r.meets_sla)
        need = f"{percent(required)} of requests within the SLA"
        if meeting == 0:
            lines.append(f"no candidate meets the SLA requirement ({need}): "
                         + ("the front is over all candidates" if pareto else "ranked by attainment, highest first"))
        elif not pareto:
            lines.append(f"{meeting} of {len(ranking)} candidate(s) meet the SLA requirement ({need}); the others "
                         "rank after them")
    if any(r.tied_with for r in ranking[:TOP]):
        lines.append("=N: a near-tie: scores within the replays' run-to-run spread, so the order is not a result")
    return lines


def calibration_lines(ranking: Sequence[Ranked]) -> list[str]:
    """Which calibration the table's numbers are under, and which of its rows each measured group corrected
    (no calibration: no line)."""
    applied = [r for r in ranking if r.calibration is not None]
    if not applied:
        return []
    by_group: dict[str, list[str]] = {}
    for r in applied:
        assert r.calibration is not None
        what = (f"{r.calibration.group} ({r.calibration.rows} measured)" if r.calibration.group is not None
                else "not measured, shipped numbers")
        by_group.setdefault(what, []).append(f"#{r.rank}")
    return [f"calibration: {applied[0].calibration.file}",  # type: ignore[union-attr]
            *(f"  {what}: {', '.join(ranks)}" for what, ranks in by_group.items())]


def tally_lines(tally: Tally) -> list[str]:
    lines = [f"tally: {tally.feasible} feasible of {tally.attempts} attempts; {tally.infeasible} infeasible, "
             f"{tally.failed} failed, {tally.unsupported} unsupported, {tally.cache_hits} cache hits"]
    lines += [f"  {n} × {reason}" for reason, n in tally.top_reasons()]
    return lines


def render_summary(summary: SweepSummary) -> str:
    tally = summary.tally
    lines = candidate_table(summary.ranking, summary.pareto, summary.objectives, summary.required_attainment)
    lines.append("")
    lines += tally_lines(tally)
    lines.append(f"search time: optimizer {tally.optimizer_seconds:.1f} s, replays {tally.replay_seconds:.1f} s "
                 "(summed over the workers)")
    if summary.load_predictor_winners:
        winners = ", ".join(f"{interval} s → {w if isinstance(w, str) else json.dumps(w)}"
                            for interval, w in sorted(summary.load_predictor_winners.items()))
        lines.append(f"load predictor ({summary.load_predictor_reason}): {winners}")
    for msg in (*summary.notes, *summary.stalls):
        lines.append(msg)
    for msg in summary.warnings:
        lines.append(f"warning: {msg}")
    for rank, why in summary.refused.items():
        lines.append(f"no manifest for #{rank}: {why}")
    lines.append(f"artifacts: {summary.run_dir} (candidates.parquet/.json/.csv, ranking.parquet, trials.parquet, ...)")
    if summary.report:
        lines.append(f"report: {summary.report} (and report.html)")
    if summary.manifests:
        lines.append("manifests: " + ", ".join(summary.manifests) + "  (kubectl apply -f FILE)")
    if summary.plans:
        lines.append("benchmark plans: " + ", ".join(summary.plans) + "  (AIPerf against the deployed frontend)")
    return "\n".join(lines)


def set_aside_line(notice: SetAside) -> str:
    """The stderr line for an artifact moved aside and recomputed: which file, why, where the old one is kept."""
    return f"warning: {notice.message}"


def print_set_aside(notice: SetAside, stream: TextIO | None = None) -> None:
    """One line on stderr, as it happens. Written to the stream, not print()ed: inside the flow run (log_prints)
    Prefect's patched print would send it to the run's log instead (see spica_core/search/progress.py). On a terminal the
    progress bar's unfinished line is cleared first; the bar redraws itself."""
    out = stream if stream is not None else sys.stderr
    out.write(("\r\x1b[K" if out.isatty() else "") + set_aside_line(notice) + "\n")
    out.flush()


# What the flow's first call imports (its engine, and FastAPI's encoder for the parameters), then pandas (pyarrow
# loads it on the first artifact write).
_FIRST_IMPORTS = ("prefect.flow_engine", "prefect.task_engine", "prefect.utilities.visualization",
                  "fastapi.encoders", "pandas")


def _warm_up() -> None:
    """What the sweep imports before its first replay anyway, imported while the Prefect API server comes up
    (a separate process, which the flow would otherwise wait for): :data:`_FIRST_IMPORTS`. Best effort:
    what fails here fails again where it is used, with that stage's message."""
    import importlib

    for name in _FIRST_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _child_command(config_path: str, runs_root: str, run_dir: str | None, seed: int | None, from_stage: str | None,
                   warm_start: str | None, cluster: str | None, calibration: str | None) -> list[str]:
    """The same ``spica sweep`` for the child that runs the flow (``supervisor.py``)."""
    options = {"--runs-root": runs_root, "--run-dir": run_dir, "--seed": seed, "--from-stage": from_stage,
               "--warm-start": warm_start, "--cluster": cluster, "--calibration": calibration}
    return [sys.executable, "-m", "spica_cli.main", "sweep", config_path,
            *(part for flag, value in options.items() if value is not None for part in (flag, str(value)))]


def _quiet_unraisable() -> None:
    """A stop's KeyboardInterrupt raised where Python cannot raise (a gc callback, ``__del__``) is not printed as
    "Exception ignored"; the supervisor ends a child that carries on regardless."""
    hook = sys.unraisablehook

    def quiet(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            hook(unraisable)

    sys.unraisablehook = quiet


def sweep_command(config_path: str, runs_root: str, run_dir: str | None, seed: int | None = None,
                  from_stage: str | None = None, warm_start: str | None = None, cluster: str | None = None,
                  calibration: str | None = None) -> int:
    """Check what fails fast (the config, the cluster, a held run folder), then supervise a child that runs the
    flow (``supervisor.py``); in that child, run it."""
    import os

    from spica_cli.supervisor import CHILD_ENV, read_api_url, supervise, wait_for_api
    from spica_core.run import lock
    from spica_core.run.identity import locate

    located = locate(config_path, runs_root, run_dir, seed, cluster, calibration)
    if os.environ.get(CHILD_ENV) is None:
        if located.config.sweep.cluster:
            from spica_core.evaluate.cluster_connect import check_reachable

            check_reachable(located.config.sweep.cluster)
        folder = lock.acquire(located.folder)  # (the child takes the lock for the run)
        lock.release(folder)
        return supervise(_child_command(config_path, runs_root, run_dir, seed, from_stage, warm_start, cluster,
                                        calibration), folder)

    from spica_core.search.optimizer import optimizer_for

    _quiet_unraisable()
    lock.acquire(located.folder, pid=os.getppid())  # this process keeps the lock (naming `spica sweep`, its parent)
    # A rapid sweep's studies live in the optimizer process: started now, it imports jax and Vizier and traces
    # GP-UCB-PE while the flow runs its first stages; the flow finds it running (search/optimizer.py).
    optimizer_for(located.config)
    url = read_api_url()  # (Prefect reads its settings once, at import)
    from flows.sweep import sweep
    from tasks.notices import listening

    _warm_up()
    if url is not None:
        wait_for_api(url)
    with listening(print_set_aside):  # an artifact moved aside and recomputed: one line each
        summary = sweep(config_path=config_path, runs_root=runs_root,  # type: ignore[arg-type]
                        run_dir=run_dir, seed=seed, from_stage=from_stage, warm_start=warm_start,
                        cluster=cluster, calibration=calibration, show_progress=True)
    print(render_summary(summary))
    return EXIT_OK if summary.ranking else EXIT_NO_RESULT
