"""``spica show RUN_DIR``: the top candidates, or the front, and where the files are (no Prefect needed)."""
from __future__ import annotations

from pathlib import Path

from spica_cli.exits import EXIT_NO_RESULT, EXIT_OK
from spica_cli.sweep import candidate_table, tally_lines
from spica_core.emit import FinishedRun
from spica_core.run.inputs import over_context_note


def nothing_feasible(run: FinishedRun) -> str:
    """Why a run has no candidate, from its tally (what a user fixes next)."""
    tally = run.tally
    if not tally.attempts:
        return f"{run.run_dir.path}: no candidate was evaluated"
    reasons = "; ".join(f"{n} × {reason}" for reason, n in tally.top_reasons()) or "no reason recorded"
    return f"{run.run_dir.path}: no feasible candidate in {tally.attempts} attempts ({reasons})"


def show_command(run_dir: str) -> int:
    run = FinishedRun.open(run_dir)
    if not run.records:
        print(f"error: {nothing_feasible(run)}")
        return EXIT_NO_RESULT
    goal = run.config.goal
    lines = candidate_table(run.records, goal.is_pareto, [o.value for o in goal.objectives], goal.required_attainment)
    lines += ["", *tally_lines(run.tally)]
    lines += [f"headroom of rank {r.rank}: {r.headroom.text()}" for r in run.records if r.headroom is not None]
    if run.config.goal.sla is None:
        lines.append("headroom: no SLA, so no headroom")
    note = over_context_note(run.config, run.trace_file)
    if note:
        lines.append(note)
    lines += ["", f"run folder: {run.run_dir.path}"]
    folder = run.run_dir.path
    for name in ("candidates.json", "candidates.csv", "report.md", "report.html"):
        if (folder / name).is_file():
            lines.append(f"  {name}")
    manifests = sorted((folder / "manifests").glob("rank-*.yaml"), key=lambda p: _rank(p))
    if manifests:
        lines.append("  manifests: " + ", ".join(str(p.relative_to(folder)) for p in manifests))
    print("\n".join(lines))
    return EXIT_OK


def _rank(path: Path) -> int:
    return int(path.stem.split("-")[1].split(".")[0])
