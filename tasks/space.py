"""Stages 2 and 3: enumerate branches (``branches.parquet``) and KV filter (``shapes.parquet``).

Both read their artifact back when it is fresh (same input fingerprint), so a resumed run rebuilds
the same branches without enumerating or asking aiconfigurator-core for a single KV estimate.
"""
from __future__ import annotations


from spica_core.config.model import SmartSearchConfig
from spica_core.run.catalog import CATALOG, RunDir
from spica_core.run.identity import engine_versions
from spica_core.space.branches import (
    BranchSet, LegalSpace, estimate_shapes, kv_filter, legal_space, ordered_records, records_from_rows,
)
from tasks.stage import stage


def branches_fingerprint(config: SmartSearchConfig) -> str:
    """What the legal space depends on: the searched config and the engines (AIC's perf DBs above all)."""
    return CATALOG["branches"].fingerprint(search_config=config.normalised(), engines=engine_versions())


@stage("enumerate branches", retries=2)
def enumerate_branches_task(config: SmartSearchConfig, run_dir: RunDir) -> LegalSpace:
    """Replay and perf-DB viability and legal parallel configs per mode × backend.

    Writes ``branches.parquet`` (mode, backend, parallel config, supported, reason). Raises the
    user-facing errors (unknown model / SKU, a pin legal for no backend) before any estimate.
    """
    return run_dir.kept_or_made("branches", branches_fingerprint(config), lambda: legal_space(config),
                                rows=LegalSpace.rows, read=lambda rows: LegalSpace.from_rows(config, rows))


@stage("KV filter", retries=2)
def kv_filter_task(space: LegalSpace, run_dir: RunDir) -> BranchSet:
    """KV feasibility of every distinct (GPU type, backend, precision, shape), then the branches the study searches.

    ``shapes.parquet`` is written before the branches are built, so when nothing is viable the
    run folder still shows which shape failed and why.
    """
    inputs = CATALOG["shapes"].fingerprint(branches=branches_fingerprint(space.config))
    records = run_dir.kept_or_made(
        "shapes", inputs, lambda: estimate_shapes(space), read=records_from_rows,
        rows=lambda made: [r.row() for r in ordered_records(made, space.config.search_space)])
    return kv_filter(space, records)
