"""The measurements ``spica calibrate`` reads, each paired with what Spica predicted for it.

- **AIPerf exports** written by a benchmark plan (``benchmarks/rank-N.sh``): ``profile_export_aiperf.json``
  with the plan's ``spica-plan.json`` beside it. The plan names the candidate; the prediction is the
  run's own recorded replay of it (the run folder the export sits in, or ``--run``), so nothing is replayed.
- **CSV rows** in the columns of aiconfigurator-core's ``systems/silicon_sample.csv``: each row becomes the
  Spica config that replays it (``spica_core.calibrate.silicon``) and is replayed through ``spica evaluate``'s
  own path.

Every problem is a CalibrationInputError naming the file and line: unknown columns, a measurement that
matches no candidate, a latency that is not a positive number, an export from another workload.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spica_core.calibrate.fit import GroupedRow
from spica_core.calibrate.silicon import RowPlan, make_config, pin_problem, plan_row, read_rows
from spica_core.emit import PLAN_FILE, FinishedRun
from spica_core.errors import CalibrationInputError, SpicaError
from spica_core.evaluate import MeasuredRow
from spica_core.store import canonical_json

AIPERF_EXPORT = "profile_export_aiperf.json"
_AIPERF_METRICS = {"ttft_ms": "time_to_first_token", "itl_ms": "inter_token_latency"}
_PREDICTED = {"ttft_ms": "mean_ttft_ms", "itl_ms": "mean_itl_ms"}


def _line(text: str, key: str) -> int:
    """The line of ``"key"`` in a JSON text (1 when it is not there)."""
    at = text.find(f'"{key}"')
    return 1 if at < 0 else text.count("\n", 0, at) + 1


def _read_json(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationInputError(f"{path}:1: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CalibrationInputError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise CalibrationInputError(f"{path}:1: expected a JSON object")
    return doc, text


def export_files(path: Path) -> list[Path]:
    """The AIPerf exports a command-line argument names: the file, the folder holding it, or the folders one
    level down (a plan's whole ``results`` folder)."""
    if path.is_file():
        return [path]
    if (path / AIPERF_EXPORT).is_file():
        return [path / AIPERF_EXPORT]
    found = sorted(path.glob(f"*/{AIPERF_EXPORT}"))
    if not found:
        raise CalibrationInputError(f"{path}:1: holds no {AIPERF_EXPORT} (an AIPerf export of a benchmark plan), "
                                    "nor do its subfolders")
    return found


def _run_folder(export: Path, run: Path | None) -> Path:
    if run is not None:
        return run
    for parent in export.resolve().parents:
        if (parent / "config.parquet").is_file():
            return parent
    raise CalibrationInputError(f"{export}:1: is not inside a run folder; name the run its plan came from with "
                                "--run RUN_DIR")


@dataclass
class Runs:
    """The run folders exports are matched against, each opened once."""

    opened: dict[Path, FinishedRun]

    def get(self, folder: Path) -> FinishedRun:
        key = folder.resolve()
        if key not in self.opened:
            self.opened[key] = FinishedRun.open(folder)
        return self.opened[key]


def aiperf_row(export: Path, runs: Runs, run: Path | None = None) -> GroupedRow:
    """One AIPerf export, matched through its plan to the run's recorded replay of the candidate."""
    doc, text = _read_json(export)
    plan_path = export.parent / PLAN_FILE
    if not plan_path.is_file():
        raise CalibrationInputError(f"{export}:1: no {PLAN_FILE} beside it, so it names no candidate (run the "
                                    "benchmark plan, benchmarks/rank-N.sh, which writes both)")
    plan, plan_text = _read_json(plan_path)
    if doc.get("was_cancelled") is True:
        raise CalibrationInputError(f"{export}:{_line(text, 'was_cancelled')}: the AIPerf run was cancelled")
    measured = {}
    for metric, key in _AIPERF_METRICS.items():
        stat = doc.get(key)
        value = stat.get("avg") if isinstance(stat, dict) else None
        if stat is None:
            raise CalibrationInputError(f"{export}:1: has no {key} (not an AIPerf export of a streaming run?)")
        unit = stat.get("unit", "ms") if isinstance(stat, dict) else "ms"
        if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
                or value <= 0 or unit != "ms"):
            raise CalibrationInputError(f"{export}:{_line(text, key)}: {key}.avg must be a positive number of ms, "
                                        f"got {value!r} {unit}")
        measured[metric] = float(value)
    _same_workload(export, text, doc, plan_path, plan)
    folder = _run_folder(export, run)
    finished = runs.get(folder)
    identity = finished.identity
    for key, have in (("config_fingerprint", identity.config_fingerprint),
                      ("trace_fingerprint", identity.trace_fingerprint)):
        if plan.get(key) != have:
            raise CalibrationInputError(
                f"{plan_path}:{_line(plan_text, key)}: an export from another workload: its plan was written for "
                f"{key} {plan.get(key)}, and run {folder} has {have}")
    sample = canonical_json(plan.get("candidate") or {})
    for trial in finished.trials:
        if trial.is_evaluated_success and trial.candidate is not None \
                and canonical_json(json.loads(canonical_json(trial.candidate.to_sample()))) == sample:
            raw = trial.replay_metrics
            predicted = {m: float(raw[k]) for m, k in _PREDICTED.items() if raw.get(k)}
            row = MeasuredRow(f"{folder.name}/rank-{plan.get('rank')}", f"{export}:1", measured, predicted)
            return GroupedRow(*trial.candidate.group, row)
    raise CalibrationInputError(f"{plan_path}:{_line(plan_text, 'candidate')}: its candidate (rank {plan.get('rank')}, "
                                f"{plan.get('manifest')}) matches no evaluated candidate of run {folder}")


def _same_workload(export: Path, text: str, doc: Mapping[str, Any], plan_path: Path, plan: Mapping[str, Any]) -> None:
    """The export replayed the plan's traffic: its dataset is the plan's workload file and it sent the plan's
    request count (and concurrency)."""
    config = doc.get("input_config") or {}
    datasets = config.get("datasets") or [{}]
    phases = [p for p in config.get("phases") or () if p.get("kind") == "profiling"] or [{}]
    checks = (("dataset file", Path(str(datasets[0].get("path") or "")).name, plan.get("workload"), "path"),
              ("request count", phases[0].get("requests"), plan.get("requests"), "requests"),
              ("concurrency", phases[0].get("concurrency"), plan.get("concurrency"), "concurrency"))
    for what, got, want, key in checks:
        if want is not None and got != want:
            raise CalibrationInputError(f"{export}:{_line(text, key)}: an export from another workload: its "
                                        f"{what} is {got!r}, and its plan ({plan_path.name}) sends {want!r}")


def replay_row(plan: RowPlan) -> dict[str, float]:
    """A CSV row's prediction through ``spica evaluate``'s path (its config, request and evaluation)."""
    from spica_core.config.model import SmartSearchConfig
    from spica_core.evaluate import evaluate_one, pinned_request
    from spica_core.run import load_inputs

    config = load_inputs(SmartSearchConfig.from_dict(make_config(plan))).config
    outcome = evaluate_one(pinned_request(config, Path.cwd(), eval_id=plan.row.id))
    if not outcome.feasible:
        raise SpicaError(f"{outcome.status.value}: {outcome.reason}")
    return {m: float(outcome.metrics[k]) for m, k in _PREDICTED.items()}


def csv_rows(path: Path, on_row: Callable[[str], None] | None = None) -> tuple[list[GroupedRow], list[str]]:
    """The rows of a silicon-format CSV with their predictions, and a note per row Spica cannot replay."""
    from spica_core.space import bundled_models

    bundled = bundled_models()
    rows, skipped = [], []
    for line, row in read_rows(path):
        where = f"{path}:{line}"
        plan = plan_row(row, bundled, legal=pin_problem)
        if isinstance(plan, str):
            skipped.append(f"{where}: skipped, Spica cannot replay it: {plan}")
            continue
        try:
            predicted = replay_row(plan)
        except SpicaError as exc:
            skipped.append(f"{where}: skipped, its replay did not finish: {exc}")
            continue
        measured = {"ttft_ms": row.ttft_ms, "itl_ms": row.tpot_ms}
        rows.append(GroupedRow(plan.model, row.system, row.backend, MeasuredRow(row.id, where, measured, predicted)))
        if on_row is not None:
            on_row(f"{where}: {row.id}: measured TTFT {row.ttft_ms:.4g} ms / predicted {predicted['ttft_ms']:.4g} ms")
    return rows, skipped


def read_measurements(paths: Iterable[str | Path], run: str | Path | None = None,
                      on_row: Callable[[str], None] | None = None) -> tuple[list[GroupedRow], list[str]]:
    """Every measurement the command line names, paired with its prediction, and the notes on skipped rows."""
    runs = Runs({})
    run_dir = Path(run) if run is not None else None
    rows: list[GroupedRow] = []
    notes: list[str] = []
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise CalibrationInputError(f"{path}:1: no such file or folder")
        if path.is_file() and path.suffix.lower() == ".csv":
            found, skipped = csv_rows(path, on_row)
            rows += found
            notes += skipped
        elif path.is_dir() or path.suffix.lower() == ".json":
            rows += [aiperf_row(export, runs, run_dir) for export in export_files(path)]
        else:
            raise CalibrationInputError(f"{path}:1: neither an AIPerf export ({AIPERF_EXPORT}, or a folder holding "
                                        "one) nor a CSV file in the columns of silicon_sample.csv")
    if not rows:
        raise CalibrationInputError("no measurement could be used: " + ("; ".join(notes[:3]) or "none given"))
    return rows, notes


__all__ = ["AIPERF_EXPORT", "aiperf_row", "csv_rows", "export_files", "read_measurements", "replay_row"]
