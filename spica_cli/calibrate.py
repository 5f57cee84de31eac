"""``spica calibrate MEASUREMENTS... --out FILE [--run RUN_DIR]``: measurements on the user's own GPUs → a
calibration file that ``--calibration`` and ``goal.calibration`` apply."""
from __future__ import annotations

import sys

from spica_cli.exits import EXIT_OK


def _fmt_metric(group: object, metric: str) -> str:
    cal = group.metrics.get(metric)  # type: ignore[attr-defined]
    if cal is None:
        return "—"
    how = "own quantiles" if cal.method == "own" else f"shrunk, weight {cal.weight:.2f}"
    return f"×{cal.correction:.3g} ({how}; p10–p90 ×{cal.ratio.p10:.3g}–×{cal.ratio.p90:.3g})"


def calibrate_command(measurements: list[str], out: str, run: str | None) -> int:
    from spica_core.calibrate import fit_calibration, read_measurements
    from spica_core.evaluate import load_bands, write_calibration

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows, notes = read_measurements(measurements, run, on_row=progress)
    for note in notes:
        print(note, file=sys.stderr)
    calibration = fit_calibration(rows, load_bands())
    path = write_calibration(calibration, out)
    lines = [f"calibration: {path} ({len(rows)} measurement(s) in {len(calibration.groups)} group(s)"
             + (f"; {len(notes)} row(s) skipped" if notes else "") + ")"]
    for key, group in calibration.groups.items():
        lines.append(f"  {key}: {len(group.rows)} row(s)")
        lines.append(f"    TTFT {_fmt_metric(group, 'ttft_ms')}")
        lines.append(f"    ITL  {_fmt_metric(group, 'itl_ms')}")
    lines.append("groups not listed keep the shipped predictions and bands; apply it with --calibration "
                 f"{path} (spica evaluate, spica sweep, spica show) or goal.calibration")
    print("\n".join(lines))
    return EXIT_OK
