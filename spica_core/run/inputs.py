"""A run's two inputs, the config and its trace, read and checked together before anything runs.

``spica validate`` and every stage that reads the trace go through :func:`load_inputs`, so a sweep
never starts on a config or trace that validate would refuse. The checks that need the model (its
context length) live here rather than in the config model, which stays free of engine facts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spica_core.config.model import SmartSearchConfig
from spica_core.config.trace import TraceSummary, check_trace
from spica_core.errors import CalibrationFileError, ConfigError, Issue, SpicaError
from spica_core.space.kv import max_seq_len
from spica_core.space.precision import check_quantization
from spica_core.evaluate import Calibration, load_bands, load_calibration, load_serving


@dataclass(frozen=True)
class Inputs:
    config: SmartSearchConfig       # with the ``--seed``, ``--cluster`` and ``--calibration`` overrides applied
    trace_file: Path | None         # resolved against the config file's folder
    trace: TraceSummary | None      # None for a synthetic workload
    calibration: Calibration | None = None   # goal.calibration, read and checked


def with_overrides(config: SmartSearchConfig, seed: int | None = None, cluster: str | None = None,
                   calibration: str | Path | None = None) -> SmartSearchConfig:
    """The command line's (or the flow form's) overrides, checked like the file's own fields: ``seed`` replaces
    ``sweep.seed`` (another seed is another run), ``cluster`` ``sweep.cluster`` (where the evaluations run, not
    part of the run's identity), ``calibration`` ``goal.calibration`` (made absolute: it was given relative to
    the working directory)."""
    overrides = {k: v for k, v in (("seed", seed), ("cluster", cluster)) if v is not None}
    if not overrides and calibration is None:
        return config
    data = config.model_dump(mode="json")
    goal = data["goal"] if calibration is None else {**data["goal"], "calibration": str(Path(calibration).resolve())}
    flags = [*overrides, *(["calibration"] if calibration is not None else [])]
    return SmartSearchConfig.from_dict({**data, "goal": goal, "sweep": {**data["sweep"], **overrides}},
                                       source="--" + " --".join(flags))


def read_calibration(config: SmartSearchConfig, base: Path) -> Calibration | None:
    """``goal.calibration``, read; a missing or broken file is a ConfigError naming the field."""
    path = config.calibration_file(base)
    if path is None:
        return None
    try:
        return load_calibration(path)
    except CalibrationFileError as exc:
        raise ConfigError("config", [Issue("goal.calibration", str(exc), config.goal.calibration, True)]) from None


def check_skus(config: SmartSearchConfig, source: str) -> None:
    """Every GPU type the config names (the SKU lists, ``gpu_inventory``, ``gpu_hour_usd``) is one
    aiconfigurator-core knows: a typo would search, cap or price nothing."""
    from spica_core.space import known_systems

    known = set(known_systems())
    ss = config.search_space
    named = [(f"search_space.{field}[{i}]", sku, sku) for field in ("hardware_sku", "prefill_hardware_sku",
                                                                     "decode_hardware_sku")
             for i, sku in enumerate(getattr(ss, field) or [])]
    named += [(f"search_space.gpu_inventory.{sku}", sku, n) for sku, n in (ss.gpu_inventory or {}).items()]
    named += [(f"goal.gpu_hour_usd.{sku}", sku, p) for sku, p in (config.goal.gpu_hour_usd or {}).items()]
    issues = [Issue(path, f"{sku!r} is not an aiconfigurator-core system; known: {', '.join(sorted(known))}", value,
                    True) for path, sku, value in named if sku not in known]
    if issues:
        raise ConfigError(source, issues)


def over_context_note(config: SmartSearchConfig, trace_file: Path | None) -> str | None:
    """What became of a trace's requests over the context (``workload.over_context`` drop or fail), for people."""
    w, ss = config.workload, config.search_space
    if trace_file is None or w.over_context == "refuse":
        return None
    try:
        trace = check_trace(trace_file, max_seq_len=max_seq_len(ss.model_name, ss.context_length),
                            over_context=w.over_context)
    except (OSError, SpicaError) as exc:
        return f"requests over the context could not be counted: {exc}"
    if not trace.over_context_requests:
        return "no request exceeds the context"
    what = ("left out of the replay, so the metrics are over the rest" if w.over_context == "drop" else
            "kept as requests the server rejects at once: they count in num_requests and miss the SLA")
    return f"over the context: {trace.over_context_text()}, {what} (workload.over_context: {w.over_context})"


def load_inputs(source: str | Path | SmartSearchConfig, seed: int | None = None, cluster: str | None = None,
                calibration: str | Path | None = None) -> Inputs:
    """``source`` is a config file, or a config given inline (the Prefect form): its relative paths resolve
    against the working directory, a file's against its own folder. Raises ConfigError or TraceError
    naming the field, or the file and line."""
    if isinstance(source, SmartSearchConfig):
        path, base = Path("<inline config>"), Path.cwd()
        source.check_files(base)
        config = with_overrides(source, seed, cluster, calibration)
    else:
        path = Path(source)
        base = path.parent
        config = with_overrides(SmartSearchConfig.from_yaml(path), seed, cluster, calibration)
    space, workload = config.search_space, config.workload
    check_skus(config, str(path))
    check_quantization(config, str(path))
    load_bands()  # a missing or corrupt band or serving file stops here, before anything runs
    load_serving()
    calibrated = read_calibration(config, base)
    longest = max_seq_len(space.model_name, space.context_length)
    trace_file = config.trace_file(base)
    if trace_file is not None:
        return Inputs(config, trace_file, check_trace(trace_file, max_seq_len=longest,
                                                      over_context=workload.over_context), calibrated)
    isl, osl = workload.isl or 0, workload.osl or 0
    if isl + osl > longest:
        source = "context_length" if space.context_length is not None else f"{space.model_name}'s max context"
        raise ConfigError(str(path), [Issue("workload.isl", f"isl + osl = {isl + osl:,} tokens exceeds the context "
                                            f"length {longest:,} ({source}); a server with this context "
                                            "cannot hold the request (workload.over_context applies to traces; "
                                            "every synthetic request has this length)", isl, True)])
    return Inputs(config, None, None, calibrated)
