"""Stages 2 and 3: enumerate branches (``branches.parquet``) and KV filter (``shapes.parquet``)."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from spica_core.run.catalog import RunDir
from spica_core.space.branches import BranchSet, LegalSpace, estimate_shapes, kv_filter, legal_space, ordered_records, shapes_table
from spica_core.config.model import SmartSearchConfig


@task(name="enumerate branches", cache_policy=NO_CACHE)
def enumerate_branches_task(config: SmartSearchConfig, run_dir: RunDir) -> LegalSpace:
    """Replay and perf-DB viability and legal parallel configs per mode × backend.

    Writes ``branches.parquet`` (mode, backend, parallel config, supported, reason). Raises the
    user-facing errors (unknown model / SKU, a pin legal for no backend) before any estimate.
    """
    space = legal_space(config)
    run_dir.write("branches", space.table())
    return space


@task(name="KV filter", cache_policy=NO_CACHE)
def kv_filter_task(space: LegalSpace, run_dir: RunDir) -> BranchSet:
    """KV feasibility of every distinct (backend, shape), then the branches the study searches.

    ``shapes.parquet`` is written before the branches are built, so when nothing is viable the
    run folder still shows which shape failed and why.
    """
    records = estimate_shapes(space)
    run_dir.write("shapes", shapes_table(ordered_records(records, space.config.search_space.backend)))
    return kv_filter(space, records)
