"""``spica show RUN_DIR [--calibration FILE] [--json]``: the top candidates, or the front, and where the files are
(no Prefect needed). With a calibration, the run's trials are scored again from the requests their replays kept
and ranked anew: nothing is replayed and nothing in the run folder changes."""
from __future__ import annotations

import json
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


def show_command(run_dir: str, calibration: str | None = None, as_json: bool = False) -> int:
    run = FinishedRun.open(run_dir)
    if calibration is not None:
        from spica_core.evaluate import load_calibration

        run = run.calibrated(load_calibration(calibration))
    if not run.records:
        print(f"error: {nothing_feasible(run)}")
        return EXIT_NO_RESULT
    if as_json:
        goal = run.config.goal
        print(json.dumps({"run_dir": str(run.run_dir.path), "run_id": run.identity.run_id,
                          "result_type": "pareto_front" if goal.is_pareto else "ranked_candidates",
                          "calibration": calibration and str(Path(calibration).resolve()),
                          "candidates": [r.to_json() for r in run.records]}, indent=2, sort_keys=True))
        return EXIT_OK
    print("\n".join(_text(run, calibrated=calibration is not None)))
    return EXIT_OK


def _text(run: FinishedRun, calibrated: bool) -> list[str]:
    goal = run.config.goal
    lines = candidate_table(run.records, goal.is_pareto, [o.value for o in goal.objectives], goal.required_attainment)
    lines += ["", *tally_lines(run.tally)]
    if calibrated:
        lines.append("ranked again under the calibration from the replays' own requests (no replay); headroom and "
                     "manifests are the run's own: `spica sweep --calibration` makes them for this ranking")
    else:
        lines += [f"headroom of rank {r.rank}: {r.headroom.text()}" for r in run.records if r.headroom is not None]
        if goal.sla is None:
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
    return lines


def _rank(path: Path) -> int:
    return int(path.stem.split("-")[1].split(".")[0])
