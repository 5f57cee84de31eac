"""The loop back from the user's GPUs, end to end: a sweep's benchmark plan run by the real AIPerf against a local
server, its export fed to `spica calibrate`, the calibration applied by `spica show` (no replay) and by a
calibrated `spica sweep` (which re-uses every replay); silicon-format CSV rows; bad input named by file and line."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.calibrate import silicon_csv
from spica_core.emit import FinishedRun
from spica_core.evaluate import load_calibration
from spica_core.search import rank_trials
from tests.conftest import EXAMPLES
from tests.dynamo_fixture import run_plan

ROW_ID = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    assert spica(["sweep", str(EXAMPLES / "quickstart.yaml"), "--runs-root", str(root)]) == 0
    [folder] = [p for p in root.iterdir() if (p / "config.parquet").is_file()]
    return folder


def _export(folder: Path, plan_script: Path, ttft: float, itl: float) -> Path:
    """The export a plan's AIPerf run leaves: its spica-plan.json (written by the plan itself) and a
    profile_export_aiperf.json with these means and the plan's own dataset, request count and concurrency."""
    text = plan_script.read_text()
    plan = json.loads(text.split("<<'SPICA_PLAN'\n", 1)[1].split("\nSPICA_PLAN", 1)[0])
    folder.mkdir(parents=True)
    (folder / "spica-plan.json").write_text(json.dumps(plan, indent=2))
    phase = {"kind": "profiling", "requests": plan["requests"], **({"concurrency": plan["concurrency"]}
                                                                     if plan["concurrency"] else {})}
    (folder / "profile_export_aiperf.json").write_text(json.dumps({
        "time_to_first_token": {"unit": "ms", "avg": ttft}, "inter_token_latency": {"unit": "ms", "avg": itl},
        "input_config": {"datasets": [{"path": str(plan_script.parent / plan["workload"])}], "phases": [phase]}},
        indent=2))
    return folder


@pytest.mark.slow
def test_the_real_aiperf_measures_a_plan_and_spica_calibrate_holds_what_it_measured(run: Path, tmp_path: Path,
                                                                                  capfd: Any) -> None:
    results = tmp_path / "results"
    run_plan(run / "benchmarks" / "rank-1.sh", tmp_path, results, speedup=10)
    [export] = list(results.glob("*/profile_export_aiperf.json"))
    measured = json.loads(export.read_text())
    capfd.readouterr()
    out = tmp_path / "cal.json"
    assert spica(["calibrate", str(results), "--out", str(out), "--run", str(run)]) == 0
    assert "1 measurement(s) in 1 group(s)" in capfd.readouterr().out
    [group] = json.loads(out.read_text())["groups"].values()
    [row] = group["rows"]
    assert row["measured"] == {"ttft_ms": pytest.approx(measured["time_to_first_token"]["avg"]),
                               "itl_ms": pytest.approx(measured["inter_token_latency"]["avg"])}
    top = FinishedRun.open(run).records[0]
    assert row["predicted"] == {"ttft_ms": pytest.approx(top.metrics["mean_ttft_ms"]),
                                "itl_ms": pytest.approx(top.metrics["mean_itl_ms"])}
    assert group["ttft_ms"]["method"] == "shrunk" and group["ttft_ms"]["rows"] == 1


@pytest.mark.slow
def test_show_ranks_a_finished_run_again_under_a_calibration_without_replaying(run: Path, tmp_path: Path,
                                                                              capfd: Any) -> None:
    top = FinishedRun.open(run).records[0]
    plans = run / "benchmarks"
    for rank in (1, 2, 3):   # this cluster's TTFT is 4 × the prediction: several candidates now miss the SLA
        r = FinishedRun.open(run).records[rank - 1]
        _export(tmp_path / "m" / f"r{rank}", plans / f"rank-{rank}.sh", 4 * r.metrics["mean_ttft_ms"],
                r.metrics["mean_itl_ms"])
    cal = tmp_path / "cal.json"
    assert spica(["calibrate", str(tmp_path / "m"), "--out", str(cal), "--run", str(run)]) == 0
    before = {p.name: p.read_bytes() for p in run.glob("*.parquet")}
    capfd.readouterr()
    assert spica(["show", str(run), "--calibration", str(cal), "--json"]) == 0
    shown = json.loads(capfd.readouterr().out)
    assert {p.name: p.read_bytes() for p in run.glob("*.parquet")} == before      # nothing written, nothing replayed
    calibration = load_calibration(cal)
    ranked = rank_trials(FinishedRun.open(run).calibrated(calibration).trials, FinishedRun.open(run).config)
    assert [(c["config"]["deployment_mode"], c["trial"]) for c in shown["candidates"]] == [
        (r.mode, r.trial) for r in ranked]
    first = shown["candidates"][0]
    assert first["calibration"]["group"] == f"model=Qwen/Qwen3-32B;system=h200_sxm;backend=vllm"
    assert first["calibration"]["rows"] == 3
    by_trial = {(c["config"]["deployment_mode"], c["trial"]): c for c in shown["candidates"]}
    was = by_trial[top.candidate.mode, top.trial]
    c = calibration.corrections("Qwen/Qwen3-32B", "h200_sxm", "vllm")["ttft_ms"]
    shrink = json.loads(cal.read_text())["groups"][first["calibration"]["group"]]["ttft_ms"]
    assert shrink["method"] == "shrunk" and 1.5 < c < 4          # three rows at 4 ×, shrunk towards the shipped
    assert was["metrics"]["mean_ttft_ms"] == pytest.approx(c * top.metrics["mean_ttft_ms"])
    assert was["uncalibrated_metrics"]["mean_ttft_ms"] == pytest.approx(top.metrics["mean_ttft_ms"])
    # the ranking follows the calibrated numbers: those that still meet the SLA first, then by score
    meets = [c["meets_sla"] for c in shown["candidates"]]
    assert meets == sorted(meets, reverse=True) and sum(meets) < sum(
        r.meets_sla for r in FinishedRun.open(run).records)
    assert spica(["show", str(run), "--calibration", str(cal)]) == 0
    text = capfd.readouterr().out
    assert f"calibration: {cal.resolve()}" in text and "(3 measured)" in text


@pytest.mark.slow
def test_a_calibrated_sweep_re_uses_every_replay_of_the_uncalibrated_run(run: Path, tmp_path: Path,
                                                                          capfd: Any) -> None:
    r1 = FinishedRun.open(run).records[0]
    _export(tmp_path / "m" / "r1", run / "benchmarks" / "rank-1.sh", 1.5 * r1.metrics["mean_ttft_ms"],
            1.1 * r1.metrics["mean_itl_ms"])
    cal = tmp_path / "cal.json"
    assert spica(["calibrate", str(tmp_path / "m"), "--out", str(cal), "--run", str(run)]) == 0
    capfd.readouterr()
    assert spica(["sweep", str(EXAMPLES / "quickstart.yaml"), "--runs-root", str(run.parent),
                  "--calibration", str(cal)]) == 0
    out = capfd.readouterr().out
    plain = FinishedRun.open(run)
    [calibrated_dir] = [p for p in run.parent.iterdir() if p != run and (p / "config.parquet").is_file()]
    again = FinishedRun.open(calibrated_dir)
    assert f"re-used {len(plain.trials)} replays of {run}" in out
    assert [t.replay_seconds for t in again.trials] == [t.replay_seconds for t in plain.trials]
    assert [t.uncalibrated for t in again.trials] == [t.metrics for t in plain.trials]
    expected = plain.calibrated(load_calibration(cal))
    assert [(r.candidate.mode, r.trial, r.score) for r in again.records] == [
        (r.candidate.mode, r.trial, pytest.approx(r.score)) for r in expected.records]
    assert json.loads((calibrated_dir / "candidates.json").read_text())["candidates"][0]["calibration"]["rows"] == 1
    assert "## Calibration" in (calibrated_dir / "report.md").read_text()


@pytest.mark.slow
def test_an_export_inside_the_run_folder_finds_its_run_without_being_told(run: Path, tmp_path: Path,
                                                                          capfd: Any) -> None:
    results = run / "benchmarks" / "results"
    r1 = FinishedRun.open(run).records[0]
    try:
        _export(results / "rank-1-measured", run / "benchmarks" / "rank-1.sh", 700.0, 25.0)
        assert spica(["calibrate", str(results), "--out", str(tmp_path / "c.json")]) == 0
        [group] = json.loads((tmp_path / "c.json").read_text())["groups"].values()
        assert group["rows"][0]["predicted"]["ttft_ms"] == pytest.approx(r1.metrics["mean_ttft_ms"])
        elsewhere = _export(tmp_path / "elsewhere", run / "benchmarks" / "rank-1.sh", 700.0, 25.0)
        capfd.readouterr()
        assert spica(["calibrate", str(elsewhere), "--out", str(tmp_path / "d.json")]) == 2
        assert "is not inside a run folder; name the run its plan came from with --run" in capfd.readouterr().err
    finally:
        shutil.rmtree(results, ignore_errors=True)


@pytest.mark.slow
def test_exports_that_do_not_fit_the_run_are_refused_with_their_file_and_line(run: Path, tmp_path: Path,
                                                                              capfd: Any) -> None:
    plan = run / "benchmarks" / "rank-1.sh"

    def refused(name: str, change: Any, *needles: str) -> None:
        folder = _export(tmp_path / name, plan, 900.0, 30.0)
        change(folder)
        capfd.readouterr()
        assert spica(["calibrate", str(folder), "--out", str(tmp_path / f"{name}.json"), "--run", str(run)]) == 2
        err = capfd.readouterr().err
        assert all(n in err for n in needles) and "Traceback" not in err, err
        assert not (tmp_path / f"{name}.json").exists()

    def edit(file: str, fn: Any) -> Any:
        def change(folder: Path) -> None:
            doc = json.loads((folder / file).read_text())
            fn(doc)
            (folder / file).write_text(json.dumps(doc, indent=2))
        return change

    refused("count", edit("profile_export_aiperf.json",
                          lambda d: d["input_config"]["phases"][0].update(requests=7)),
            "profile_export_aiperf.json:", "an export from another workload: its request count is 7")
    refused("negative", edit("profile_export_aiperf.json", lambda d: d["time_to_first_token"].update(avg=-3)),
            "time_to_first_token.avg must be a positive number")
    refused("other-run", edit("spica-plan.json", lambda d: d.update(config_fingerprint="0" * 16)),
            "spica-plan.json:", "another workload")
    refused("no-candidate", edit("spica-plan.json", lambda d: d["candidate"].update(agg_max_num_seqs=7)),
            "matches no evaluated candidate")
    refused("no-plan", lambda folder: (folder / "spica-plan.json").unlink(), "no spica-plan.json beside it")


def test_a_csv_with_an_unknown_column_is_refused_with_its_file_and_line(tmp_path: Path, capfd: Any) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("id,model_path,system,backend,mode,isl,osl,silicon_ttft_ms,silicon_tpot_ms,colour\n")
    assert spica(["calibrate", str(path), "--out", str(tmp_path / "c.json")]) == 2
    err = capfd.readouterr().err
    assert f"{path}:1: unknown column(s) colour" in err and "Traceback" not in err


@pytest.mark.slow
def test_silicon_rows_are_replayed_through_the_evaluate_path_and_unreplayable_ones_are_named(
        tmp_path: Path, capfd: Any) -> None:
    with open(silicon_csv(), newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        [row] = [r for r in reader if r["id"] == ROW_ID]
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerow(row)
        writer.writerow({**row, "id": "unknown-model", "model_path": "nobody/NoSuchModel-1B"})
    out = tmp_path / "cal.json"
    assert spica(["calibrate", str(path), "--out", str(out)]) == 0
    err = capfd.readouterr().err
    assert f"{path}:3: skipped, Spica cannot replay it: model nobody/NoSuchModel-1B" in err
    [(key, group)] = json.loads(out.read_text())["groups"].items()
    assert key == "model=Qwen/Qwen3-32B;system=h100_sxm;backend=vllm"
    [measured] = group["rows"]
    assert measured["source"] == f"{path}:2" and measured["measured"] == {
        "ttft_ms": pytest.approx(float(row["silicon_ttft_ms"])), "itl_ms": pytest.approx(float(row["silicon_tpot_ms"]))}
    # the prediction is what `spica evaluate` prints for the row's config
    from spica_core.calibrate import make_config, plan_row
    from spica_core.calibrate.silicon import parse_row
    from spica_core.space import bundled_models
    import yaml

    plan = plan_row(parse_row(row), bundled_models())
    config = tmp_path / "row.yaml"
    config.write_text(yaml.safe_dump(make_config(plan)))
    capfd.readouterr()
    assert spica(["evaluate", str(config), "--json"]) == 0
    evaluated = json.loads(capfd.readouterr().out)
    assert measured["predicted"]["ttft_ms"] == pytest.approx(evaluated["metrics"]["mean_ttft_ms"])
    # and `spica evaluate --calibration` moves it to what was measured, shrunk (one row)
    assert spica(["evaluate", str(config), "--json", "--calibration", str(out)]) == 0
    corrected = json.loads(capfd.readouterr().out)
    c = group["ttft_ms"]["correction"]
    assert corrected["metrics"]["mean_ttft_ms"] == pytest.approx(c * evaluated["metrics"]["mean_ttft_ms"])
    assert corrected["calibration"]["group"] == key
