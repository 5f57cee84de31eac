"""The load-predictor sub-sweep stage (``load_predictor.parquet``), read back when fresh."""
from __future__ import annotations

import json


from spica_core.predictors import LoadPredictorResult, sweep_load_predictor
from spica_core.run.catalog import CATALOG

from tasks.stage import stage
from tasks.validate import ValidatedRun


@stage("load-predictor sub-sweep", retries=2, log_prints=True)
def load_predictor_task(run: ValidatedRun) -> LoadPredictorResult:
    """The winner per throughput interval; depends on the searched config and the trace content only."""
    inputs = CATALOG["load_predictor"].fingerprint(search_config=run.search_config.normalised(),
                                                   trace=run.identity.trace_fingerprint)

    def sweep() -> LoadPredictorResult:
        result = sweep_load_predictor(run.search_config, run.trace_file, run.policies.kept)
        if result.best_by_interval:
            winners = {k: v if isinstance(v, str) else json.dumps(v) for k, v in result.best_by_interval.items()}
            print(f"load predictor ({result.reason}): {winners}")
        return result

    return run.run_dir.kept_or_made("load_predictor", inputs, sweep, rows=LoadPredictorResult.rows,
                                    read=LoadPredictorResult.from_rows)
