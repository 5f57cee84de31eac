"""``spica emit RUN_DIR``: write the manifests and their benchmark plans again from a finished run, without
replaying anything."""
from __future__ import annotations

from pathlib import Path

from spica_cli.exits import EXIT_NO_RESULT, EXIT_OK
from spica_cli.show import nothing_feasible
from spica_core.emit import EmitOptions, FinishedRun, write_manifests
from spica_core.emit.bench_plans import PLANS_DIR, write_plans
from spica_core.emit.outputs import MANIFESTS_DIR


def emit_command(run_dir: str, top: int, all_: bool, out: str | None, image: str | None,
                 namespace: str | None, model_cache_pvc: str | None,
                 gpu_product_labels: tuple[tuple[str, str], ...] = ()) -> int:
    run = FinishedRun.open(run_dir)
    if not run.records:
        print(f"error: {nothing_feasible(run)}")
        return EXIT_NO_RESULT
    options = EmitOptions.for_goal(run.config.goal, top, all_, image=image, namespace=namespace,
                                   model_cache_pvc=model_cache_pvc, gpu_product_labels=gpu_product_labels)
    folder = Path(out) if out else run.run_dir.path / MANIFESTS_DIR
    provenance = run.records[0].provenance
    written, refused = write_manifests(folder, run.records, options, provenance)
    plans = write_plans((Path(out) if out else run.run_dir.path) / PLANS_DIR, written, run.records, run.config,
                        run.trace_file, provenance)
    for rank, path in written.items():
        print(f"#{rank}: {path}" + (f"  (benchmark plan: {plans[rank]})" if rank in plans else ""))
    for rank, why in refused.items():
        print(f"#{rank}: no manifest: {why}")
    return EXIT_OK if written else EXIT_NO_RESULT
