"""The report's PNG plots, drawn with matplotlib's Agg canvas.

A :class:`~matplotlib.figure.Figure` without pyplot has no global state, so plots are safe to draw in
threads. The plots: the front or the score against GPUs, the best score so far per branch, scores by
backend × strategy, SLA attainment against traffic (headroom) and the trace's request rate.
"""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spica_core.emit.numbers import fmt
from spica_core.emit.report_format import _feasible, _Goal, _seconds, _target_label
from spica_core.emit.report_workload import trace_profile
from spica_core.errors import SpicaError
from spica_core.evaluate.scoring import meets_requirement
from spica_core.search.ranking import dominates
from spica_core.evaluate.evaluation import Status
from spica_core.space.branches import config_strategy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from spica_core.emit.report import ReportInputs


PLOT_NAMES = ("front", "cost", "progress", "by_backend", "headroom", "trace_rate")


FIGSIZE = (6.0, 4.0)
DPI = 110


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


def plot_cost(inputs: ReportInputs) -> bytes | None:
    """With GPU prices: cost per million output tokens against goodput, every feasible trial, and the front of
    those that meet the SLA requirement (no cheaper candidate serves as much within the SLA)."""
    if not inputs.config.goal.gpu_hour_usd:
        return None
    required = inputs.config.goal.required_attainment
    points = [(float(t.metrics.get("goodput_output_throughput_tok_s") or t.metrics.get("output_throughput_tok_s")
                     or 0.0), float(t.metrics["cost_per_mtok"]), meets_requirement(required, t.metrics))
              for t in _feasible(inputs.trials) if t.metrics.get("cost_per_mtok") is not None]
    if not points:
        return None
    served = "goodput" if inputs.config.goal.sla is not None else "throughput"
    meeting = [{served: x, "cost_per_mtok": y} for x, y, ok in points if ok]
    front = [(p[served], p["cost_per_mtok"]) for p in meeting
             if not any(dominates(q, p, (served, "cost_per_mtok")) for q in meeting)]
    fig, ax = _figure()
    ax.scatter([x for x, _, _ in points], [y for _, y, _ in points], s=14, color="#9a9a9a", alpha=0.6,
               label="feasible trials")
    if front:
        ax.plot(*zip(*sorted(front)), "-o", color="#1f77b4", ms=5, label="cost front (meets the SLA requirement)")
    ax.set_xlabel("goodput (tok/s)" if inputs.config.goal.sla is not None else "throughput (tok/s)")
    ax.set_ylabel("cost (USD per million output tokens)")
    ax.set_title("cost against goodput", fontsize=10)
    ax.legend(fontsize=8)
    return _png(fig)


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


def draw_plots(inputs: ReportInputs) -> dict[str, bytes]:
    """Every plot the inputs can fill, as PNG bytes by name (a plot with no data is left out)."""
    out: dict[str, bytes] = {}
    drawers: dict[str, Any] = {"front": lambda: plot_front(inputs), "cost": lambda: plot_cost(inputs),
                               "progress": lambda: plot_progress(inputs),
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


__all__ = ["PLOT_NAMES", "backend_groups", "draw_plots", "progress_series"]
