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
    inputs = branches_fingerprint(config)
    if run_dir.fresh("branches", inputs):
        return LegalSpace.from_rows(config, run_dir.rows("branches"))
    space = legal_space(config)
    run_dir.write("branches", space.rows(), inputs)
    return space


@stage("KV filter", retries=2)
def kv_filter_task(space: LegalSpace, run_dir: RunDir) -> BranchSet:
    """KV feasibility of every distinct (backend, shape), then the branches the study searches.

    ``shapes.parquet`` is written before the branches are built, so when nothing is viable the
    run folder still shows which shape failed and why.
    """
    inputs = CATALOG["shapes"].fingerprint(branches=branches_fingerprint(space.config))
    if run_dir.fresh("shapes", inputs):
        return kv_filter(space, records_from_rows(run_dir.rows("shapes")))
    records = estimate_shapes(space)
    run_dir.write("shapes", [r.row() for r in ordered_records(records, space.config.search_space.backend)], inputs)
    return kv_filter(space, records)
