"""The run report: ``report.md`` and ``report.html`` in the run folder, with PNG plots in ``report/``.

:func:`render_markdown` is pure (it reads the trace, never writes); :func:`write_report` draws the
plots with matplotlib's Agg canvas (a :class:`~matplotlib.figure.Figure` without pyplot: no global
state, safe in threads) and writes every file atomically.

The report shows the goal and SLA, the workload (the trace's request rate over time), the plots
(front or score against GPUs, best score so far per branch, scores by backend × strategy), the
winner next to the runner-up and what it gives up, AI Configurator's analytic estimate next to the
replay for static agg candidates, the outcome tally with its reasons, links to the files and the
provenance.

This module holds the inputs, assembles the Markdown and HTML and writes the files; each group of sections
has its own ``report_*`` module, the plots are in ``report_plots.py`` and the shared formatting in
``report_format.py``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spica_core.config.model import SmartSearchConfig
from spica_core.emit.rechecks import ConfidenceCheck
from spica_core.emit.records import CandidateRecord, Provenance
from spica_core.emit.report_aic import _aic_section
from spica_core.emit.report_calibration import _calibration_section
from spica_core.emit.report_format import _Goal
from spica_core.emit.report_goal import _goal_section
from spica_core.emit.report_plots import PLOT_NAMES, draw_plots
from spica_core.emit.report_results import _results_section
from spica_core.emit.report_tally import _files_section, _provenance_section, _tally_section
from spica_core.emit.report_winner import _winner_section
from spica_core.emit.report_workload import _workload_section
from spica_core.search.trials import Tally, Trial
from spica_core.store import write_file

if TYPE_CHECKING:
    from spica_core.emit.aic_estimate import AICEstimate


REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "report"


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


# ---------------------------------------------------------------- markdown


def render_markdown(inputs: ReportInputs, plots: Mapping[str, str]) -> str:
    """The whole report as Markdown; ``plots`` maps a plot name (see PLOT_NAMES) to its relative PNG path."""
    goal = _Goal(inputs)
    lines: list[str] = ["# Spica sweep report", ""]
    ss = inputs.config.search_space
    lines.append(f"{ss.model_name} on {ss.hardware_text()}, GPU budget {ss.gpu_budget}; "
                 f"modes {', '.join(ss.deployment_mode)}; backends {', '.join(ss.backend)}.")
    lines.append("")
    lines += _goal_section(inputs, goal)
    lines += _workload_section(inputs, plots)
    lines += _results_section(inputs, goal, plots)
    lines += _calibration_section(inputs)
    lines += _winner_section(inputs, goal)
    lines += _aic_section(inputs)
    lines += _tally_section(inputs)
    lines += _files_section(inputs)
    lines += _provenance_section(inputs.provenance)
    return "\n".join(lines).rstrip() + "\n"


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


# ---------------------------------------------------------------- files


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


__all__ = ["ReportFiles", "ReportInputs", "render_html", "render_markdown", "write_report"]
