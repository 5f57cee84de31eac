"""Load predictors: the planner's forecasting families and the sub-sweep that picks one."""
from spica_core.predictors.families import (
    FAMILIES,
    ArimaPredictor,
    ConstantPredictor,
    KalmanPredictor,
    LoadPredictor,
    ProphetPredictor,
    entry_fields,
    make_predictor,
)
from spica_core.predictors.loss import log_error, window_loss
from spica_core.predictors.subsweep import (
    FALLBACK_ENTRY,
    REASON_NO_THROUGHPUT,
    REASON_STATIC,
    LoadPredictorResult,
    common_warmup,
    evaluate_entry,
    pick_winner,
    sweep_load_predictor,
    sweep_windows,
)
from spica_core.predictors.windows import Window, build_windows, read_arrivals, windows_from_arrivals

__all__ = [
    "FAMILIES", "LoadPredictor", "ConstantPredictor", "ArimaPredictor", "ProphetPredictor", "KalmanPredictor",
    "make_predictor", "entry_fields",
    "log_error", "window_loss",
    "Window", "build_windows", "read_arrivals", "windows_from_arrivals",
    "LoadPredictorResult", "common_warmup", "evaluate_entry", "pick_winner", "sweep_windows", "sweep_load_predictor",
    "REASON_NO_THROUGHPUT", "REASON_STATIC", "FALLBACK_ENTRY",
]
