"""A measured row of aiconfigurator-core's ``systems/silicon_sample.csv`` → the Spica config that replays it.

The product has this because two things replay measured rows: ``spica calibrate`` reads the user's own
measurements (CSV rows in silicon_sample.csv's columns) and replays each one to compare Spica's prediction
with what their cluster measured, and the accuracy benchmark (``bench/bench_accuracy.py``) does the same for
aiconfigurator-core's published rows. Nothing here runs a replay. Every decision a row goes through (which
Spica model id, which precision pin, which parallel pin, why it is skipped) is a function of the row alone,
so the tests can check it without the runtime.

Protocol (docs/accuracy.md, "How rows were replayed"): closed loop at the row's concurrency c
(``workload.concurrency``); InferenceX rows: 10 × c measured requests, ISL and OSL each uniform integers in
[⌊0.8·L⌋, L] (``workload.length_spread: 0.2``, unshared prompts; prefix caching off anyway); AI Configurator's
own gap-analysis rows: the benchmark AIC generates, 20 × c requests of fixed lengths (``length_spread: 0``).
Batching from vLLM's defaults (8,192 batched tokens, ``max_num_seqs = max(256, c)``), round-robin routing,
planner off.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from spica_core.errors import CalibrationInputError, excerpt
from spica_core.space import WEIGHT_BITS   # the product's ordering of precisions

REQUESTS_PER_CONCURRENCY = 10            # InferenceX: 10 × c measured requests
LENGTH_SPREAD = 0.2                      # InferenceX: uniform in [⌊0.8 L⌋, L] (workload.length_spread)
AIC_BENCH_REQUESTS_PER_CONCURRENCY = 20  # AIC's generated benchmark: aiperf --num-requests 20c
AIC_BENCH_LENGTH_SPREAD = 0.0            # ... with --isl-stddev 0 --osl-stddev 0: fixed lengths
AIC_GAP_ANALYSIS = "aic-auto-gap-analysis"
MAX_NUM_BATCHED_TOKENS = 8192            # vLLM's default on ≥ 70 GiB GPUs
MIN_MAX_NUM_SEQS = 256                   # AISimulate's pin max(256, c)


def silicon_csv() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).resolve().parent / "systems" / "silicon_sample.csv"


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class SiliconRow:
    """One measured row of aiconfigurator-core's silicon_sample.csv (the fields Spica reads)."""

    id: str
    source: str
    model_path: str
    system: str
    backend: str
    backend_version: str
    precision: str
    gemm_quant_mode: str
    moe_quant_mode: str
    mode: str
    isl: int
    osl: int
    concurrency: int | None
    batch_size: int | None
    tp: int | None
    pp: int | None
    attention_dp: int | None
    moe_tp: int | None
    moe_ep: int | None
    prefill: dict[str, int | None]
    decode: dict[str, int | None]
    ttft_ms: float
    tpot_ms: float


def _int(v: str | None) -> int | None:
    if v is None or str(v).strip() in ("", "nan", "None"):
        return None
    return int(float(v))


def _float(v: str | None) -> float:
    try:
        return float(v) if v not in (None, "") else math.nan
    except ValueError:
        return math.nan


_ROLE_FIELDS = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def parse_row(raw: Mapping[str, str]) -> SiliconRow:
    def role(prefix: str) -> dict[str, int | None]:
        return {k: _int(raw.get(f"{prefix}_{k}")) for k in _ROLE_FIELDS}

    return SiliconRow(
        id=raw["id"], source=raw.get("silicon_data_source", "") or "", model_path=raw["model_path"],
        system=raw["system"], backend=raw["backend"], backend_version=raw.get("backend_version", "") or "",
        precision=(raw.get("precision") or "bf16").strip() or "bf16",
        gemm_quant_mode=(raw.get("gemm_quant_mode") or "").strip(), moe_quant_mode=(raw.get("moe_quant_mode") or "").strip(),
        mode=raw["mode"], isl=int(float(raw["isl"])), osl=int(float(raw["osl"])),
        concurrency=client_concurrency(raw), batch_size=_int(raw.get("batch_size")), tp=_int(raw.get("tp_size")), pp=_int(raw.get("pp_size")),
        attention_dp=_int(raw.get("attention_dp_size")), moe_tp=_int(raw.get("moe_tp_size")),
        moe_ep=_int(raw.get("moe_ep_size")), prefill=role("prefill"), decode=role("decode"),
        ttft_ms=_float(raw.get("silicon_ttft_ms")), tpot_ms=_float(raw.get("silicon_tpot_ms")))


def load_rows(path: str | Path | None = None) -> list[SiliconRow]:
    with open(path or silicon_csv(), newline="") as f:
        return [parse_row(r) for r in csv.DictReader(f)]


REQUIRED_COLUMNS = ("id", "model_path", "system", "backend", "mode", "isl", "osl", "silicon_ttft_ms",
                    "silicon_tpot_ms")


def read_rows(path: str | Path) -> list[tuple[int, SiliconRow]]:
    """The user's measured rows, each with its 1-based line number in the file (the header is line 1).

    The file is a CSV in the columns of aiconfigurator-core's silicon_sample.csv: it must have the required
    columns, may have any other of that file's columns and no column of its own; every row's isl and osl are
    integers and its silicon_ttft_ms and silicon_tpot_ms positive numbers. Anything else raises
    :class:`CalibrationInputError` naming the file and line (``FILE:LINE: what is wrong``). A row that spans
    several lines (a quoted field with a newline) is numbered by its first line.
    """
    out: list[tuple[int, SiliconRow]] = []
    with open(path, newline="", encoding="utf-8-sig") as f:   # -sig: a spreadsheet's byte-order mark
        reader = csv.reader(f)
        try:
            header = next(reader, None) or []
            _check_header(path, header)
            end = reader.line_num
            for values in reader:
                line, end = end + 1, reader.line_num
                if not values:          # a blank line (csv.DictReader skips it too)
                    continue
                raw: dict[str, Any] = {k: (values[i] if i < len(values) else None) for i, k in enumerate(header)}
                _check_row(path, line, raw)
                out.append((line, parse_row(raw)))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise CalibrationInputError(f"{path}:{reader.line_num or 1}: not a UTF-8 CSV file ({exc})") from None
    return out


def _check_header(path: str | Path, header: Sequence[str]) -> None:
    with open(silicon_csv(), newline="") as f:
        allowed = set(next(csv.reader(f)))
    problems = []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        problems.append(f"missing required column(s) {', '.join(missing)}")
    unknown = [c for c in header if c not in allowed]
    if unknown:
        named = ", ".join(c if c.strip() else repr(c) for c in unknown)
        problems.append(f"unknown column(s) {named}; allowed: {', '.join(sorted(allowed))}")
    if problems:
        raise CalibrationInputError(f"{path}:1: " + "; ".join(problems))


def _check_row(path: str | Path, line: int, raw: Mapping[str, str | None]) -> None:
    for col in ("isl", "osl"):
        v = (raw.get(col) or "").strip()
        try:
            ok = float(v).is_integer()   # "1024" or "1024.0" (parse_row reads int(float(v)))
        except ValueError:
            ok = False
        if not ok:
            raise CalibrationInputError(f"{path}:{line}: {col} must be an integer, got {excerpt(v)}")
    for col in ("silicon_ttft_ms", "silicon_tpot_ms"):
        v = (raw.get(col) or "").strip()
        try:
            ok = math.isfinite(float(v)) and float(v) > 0
        except ValueError:
            ok = False
        if not ok:
            raise CalibrationInputError(f"{path}:{line}: {col} must be a positive number of ms, got {excerpt(v)}")


def client_concurrency(raw: Mapping[str, str]) -> int | None:
    """The client's max concurrency c: the source's ``silicon_concurrency=`` (``batch_size`` is per attention-DP
    rank on DP rows, e.g. c=512 = batch_size 128 × ADP 4), else ``_c<N>_`` in the id, else batch_size × ADP
    (agg) or decode_batch_size × decode workers × decode ADP (disagg)."""
    m = re.search(r"silicon_concurrency=(\d+)", raw.get("silicon_data_source", "") or "")
    if m:
        return int(m.group(1))
    m = re.search(r"_c(\d+)_", raw.get("id", ""))
    if m:
        return int(m.group(1))
    b = _int(raw.get("batch_size"))
    if b is not None:
        return b * (_int(raw.get("attention_dp_size")) or 1)
    db = _int(raw.get("decode_batch_size"))
    if db is not None:
        return db * (_int(raw.get("decode_num_workers")) or 1) * (_int(raw.get("decode_attention_dp_size")) or 1)
    return None


def measured_date(row: SiliconRow) -> str | None:
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.source)
    return m.group(1) if m else None


@dataclass(frozen=True)
class Protocol:
    """How the client drove a row: requests per unit of concurrency and the spread of ISL/OSL."""

    requests_per_concurrency: int
    length_spread: float


def protocol_for(row: SiliconRow) -> Protocol:
    """InferenceX's client (uniform lengths in [⌊0.8 L⌋, L], 10 × c) for every row, except AIC's own gap-analysis
    rows (``aic-auto-gap-analysis`` in the source), which come from the benchmark AIC generates: aiperf with
    20 × c requests and ISL/OSL standard deviation 0. Their SGLang and TRT-LLM TTFTs grow like c prefills, the
    signature of requests that start and finish in lock-step, which only fixed lengths produce."""
    if AIC_GAP_ANALYSIS in row.source:
        return Protocol(AIC_BENCH_REQUESTS_PER_CONCURRENCY, AIC_BENCH_LENGTH_SPREAD)
    return Protocol(REQUESTS_PER_CONCURRENCY, LENGTH_SPREAD)


def source_kind(row: SiliconRow) -> str:
    s = row.source
    if s.startswith("db-dump/"):
        return "inferencex-db-dump"
    if "2026-04-06.csv" in s or "2026-03-25.csv" in s:
        return "dated-csv"
    if "gap-analysis" in s:
        return "aic-gap-analysis"
    return "other"


INFERENCEX_SOURCES = ("inferencex-db-dump", "dated-csv")


# InferenceX's single-node SGLang recipes that set --scheduler-recv-interval (SemiAnalysisAI/InferenceX,
# benchmarks/*.sh, main branch history): (recipe family, row precision, SKU) → the dates from which each rule
# held, oldest first. A rule is an interval, or "c16" (CONC ≥ 16: 30, else 10), "c4" (CONC > 4: 30, else 10) or
# "tp" (TP 8: the c16 rule; TP 4: 10). Every other NVIDIA SGLang recipe (DeepSeek-R1 FP8 on H200, GLM-5 FP8,
# Qwen3.5 FP8 on H200) leaves SGLang's default, 1, as did the recipes listed here before the flag was added.
RECV_INTERVAL_RECIPES: dict[tuple[str, str, str], tuple[tuple[str, int | str], ...]] = {
    ("dsr1", "fp4", "b200_sxm"): (("2025-09-21", "c16"),),
    ("dsr1", "fp8", "b200_sxm"): (("2025-08-25", 1), ("2025-09-23", "c16"), ("2026-01-13", "tp")),
    ("dsr1", "fp4", "b300_sxm"): (("2026-04-17", "c16"),),
    ("dsr1", "fp8", "b300_sxm"): (("2026-04-17", "tp"),),
    ("qwen3.5", "bf16", "b200_sxm"): (("2026-02-16", 1), ("2026-02-20", "c16")),
    ("qwen3.5", "fp8", "b200_sxm"): (("2026-03-03", "c16"), ("2026-04-30", "c4")),
    ("qwen3.5", "fp4", "b200_sxm"): (("2026-04-08", "c16"), ("2026-05-01", "c4")),
    ("qwen3.5", "bf16", "b300_sxm"): (("2026-04-17", "c16"),),
    ("qwen3.5", "fp4", "b300_sxm"): (("2026-04-17", "c16"),),
    ("qwen3.5", "fp8", "b300_sxm"): (("2026-04-17", 10),),
    ("glm5", "fp4", "b200_sxm"): (("2026-03-28", 1), ("2026-04-09", 10)),
    ("glm5", "fp4", "b300_sxm"): (("2026-04-17", 10),),
}
_RECIPE_FAMILIES = {"deepseek-ai/DeepSeek-R1": "dsr1", "deepseek-ai/DeepSeek-V3": "dsr1",   # InferenceX runs R1
                    "Qwen/Qwen3.5-397B-A17B": "qwen3.5", "zhipuai/GLM-5": "glm5", "zai-org/GLM-5": "glm5"}


def recipe_recv_interval(row: SiliconRow) -> int:
    """The ``--scheduler-recv-interval`` the row's SGLang server ran with: InferenceX's recipe for the row's model,
    precision and SKU as it stood on the measurement day (a row measured before its recipe reached InferenceX's
    main branch takes the recipe as merged), at the row's concurrency and TP; 1 (SGLang's default) for every
    other row, disaggregated ones included (their recipes are multi-node Dynamo ones)."""
    if row.backend != "sglang" or row.mode != "agg" or source_kind(row) not in INFERENCEX_SOURCES:
        return 1
    rules = RECV_INTERVAL_RECIPES.get((_RECIPE_FAMILIES.get(row.model_path, ""), row.precision, row.system))
    if not rules:
        return 1
    day = measured_date(row) or rules[-1][0]
    rule = next((r for start, r in reversed(rules) if day >= start), rules[0][1])
    c = int(row.concurrency or 1)
    if rule == "tp":
        rule = "c16" if (row.tp or 1) * (row.attention_dp or 1) == 8 else 10   # SGLang's --tp: the whole instance
    if rule == "c16":
        return 30 if c >= 16 else 10
    if rule == "c4":
        return 30 if c > 4 else 10
    return int(rule)


# InferenceX single-node recipes measured with MTP speculative decoding, told apart from the plain recipe of the
# same model, SKU and precision by the engine version alone: (recipe family, SKU, backend, backend_version) → the
# recipe. From 2026-02-05 (FP8) and 2026-02-06 (FP4) InferenceX ran DeepSeek-R1's B200 TRT-LLM MTP recipes on
# TRT-LLM 1.2.0rc6.post3 and the plain ones on 1.2.0rc6.post2, and no other B200 TRT-LLM recipe of the model used
# post3 through 2026-05-01 (.github/configs/nvidia-master.yaml history, main branch). The recipes
# (benchmarks/dsr1_fp{4,8}_b200_trt_mtp.sh) set ``num_nextn_predict_layers`` 3, or 1 with attention DP.
SPECULATIVE_RECIPES: dict[tuple[str, str, str, str], str] = {
    ("dsr1", "b200_sxm", "trtllm", "1.2.0rc6.post3"): "dsr1-fp4-b200-trt-mtp / dsr1-fp8-b200-trt-mtp",
}
MTP_DEPTH, MTP_DEPTH_ATTENTION_DP = 3, 1


def recipe_nextn(row: SiliconRow) -> int:
    """The MTP depth (``aic_nextn``) the row's recipe served with: 0 (no draft) unless SPECULATIVE_RECIPES names it."""
    if source_kind(row) not in INFERENCEX_SOURCES:
        return 0
    key = (_RECIPE_FAMILIES.get(row.model_path, ""), row.system, row.backend, row.backend_version)
    if key not in SPECULATIVE_RECIPES:
        return 0
    return MTP_DEPTH_ATTENTION_DP if (row.attention_dp or 1) > 1 else MTP_DEPTH


# ---------------------------------------------------------------- model and precision


# Near-spellings of a bundled id that name the same model (the same weights, or an instruct tune of the
# same architecture whose step timing is identical), with the reason recorded on the row.
MODEL_ALIASES: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-3.1-70B": ("meta-llama/Meta-Llama-3.1-70B",
                                 "Llama-3.1-70B is Meta-Llama-3.1-70B (Meta's rename of the same checkpoint)"),
    "meta-llama/Llama-3.1-8B-Instruct": ("meta-llama/Meta-Llama-3.1-8B",
                                         "Llama-3.1-8B-Instruct is the instruct tune of Meta-Llama-3.1-8B "
                                         "(same architecture and weight shapes)"),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("meta-llama/Meta-Llama-3.1-8B",
                                         "NVIDIA's FP8 export of Llama-3.1-8B-Instruct = Meta-Llama-3.1-8B "
                                         "quantized to fp8"),
    "nvidia/Qwen3-32B-NVFP4": ("Qwen/Qwen3-32B", "NVIDIA's NVFP4 export of Qwen3-32B = Qwen/Qwen3-32B quantized "
                               "to nvfp4"),
    "zhipuai/GLM-5": ("zai-org/GLM-5", "zhipuai/GLM-5 is zai-org/GLM-5 (the org's old name)"),
}

# Pre-quantized bundled checkpoints of the same model, chosen when the row ran that precision family.
FAMILY_CHECKPOINTS: dict[tuple[str, str], str] = {
    ("MiniMaxAI/MiniMax-M2.5", "fp4"): "nvidia/MiniMax-M2.5-NVFP4",
    ("moonshotai/Kimi-K2.5", "fp4"): "nvidia/Kimi-K2.5-NVFP4",
    ("Qwen/Qwen3.5-397B-A17B", "fp4"): "nvidia/Qwen3.5-397B-A17B-NVFP4",
    ("zai-org/GLM-5", "fp4"): "nvidia/GLM-5-NVFP4",
    ("zai-org/GLM-5", "fp8"): "zai-org/GLM-5-FP8",
    ("Qwen/Qwen3-235B-A22B-FP8", "fp4"): "nvidia/Qwen3-235B-A22B-NVFP4",
}

_FAMILIES = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "fp8_static": "fp8",
             "nvfp4": "fp4", "w4a16_mxfp4": "fp4", "mxfp4": "fp4", "w4a8_mxfp4_mxfp8": "fp4",
             "int4_wo": "int4", "w4afp8": "int4"}


def family(mode: str) -> str:
    return _FAMILIES.get(mode, mode)


def spica_quant(mode: str) -> str:
    return "bf16" if mode in ("", "bfloat16") else mode


@dataclass(frozen=True)
class Checkpoint:
    """What a bundled checkpoint runs natively: Spica's quantization name and its dense/expert modes."""

    name: str
    quantization: str      # Spica name, experts first for a mixed MoE checkpoint (precision.checkpoint_quantization)
    gemm: str
    moe: str
    is_moe: bool


def checkpoint_of(model: str) -> Checkpoint:
    from spica_core.space.facts import model_facts

    f = model_facts(model)
    gemm, moe = spica_quant(f.gemm_quant_mode), spica_quant(f.moe_quant_mode)
    q = moe if (f.is_moe and moe != gemm) else gemm
    return Checkpoint(model, q, gemm, moe, bool(f.is_moe))


@dataclass(frozen=True)
class PrecisionChoice:
    model: str                      # the Spica model id
    quantization: str | None        # the pin (None = the checkpoint's own precision)
    note: str                       # why (goes to the row's notes)


def choose_precision(row: SiliconRow, bundled: Sequence[str], checkpoint: Any = checkpoint_of,
                     quantization_available: bool = True) -> PrecisionChoice | str:
    """The Spica model id and quantization pin for a row, or the reason it cannot be expressed.

    1. the model: a bundled id as written, else a near-spelling of the same model (MODEL_ALIASES);
    2. a row that ran a precision family for which a bundled pre-quantized checkpoint of the same model
       exists (FAMILY_CHECKPOINTS) uses it;
    3. the row's modes equal the checkpoint's own → no pin; a pre-quantized checkpoint whose own scheme is
       in the row's family (e.g. block-FP8 weights, row labelled fp8) → no pin, noted: the engine serves the
       checkpoint's weights, it cannot re-quantize them;
    4. a bf16 checkpoint whose row ran one quant mode on GEMMs and experts → ``quantization`` pin;
    5. anything else is inexpressible.
    """
    notes: list[str] = []
    name = row.model_path
    if name not in bundled:
        if name not in MODEL_ALIASES:
            return f"model {name} is not an aiconfigurator-core bundled id and has no same-model bundled spelling"
        name, why = MODEL_ALIASES[name]
        notes.append(why)
    gemm = spica_quant(row.gemm_quant_mode or "bf16")
    moe = spica_quant(row.moe_quant_mode or gemm)
    fam = family(gemm) if family(gemm) == family(moe) else None
    if fam is not None and (name, fam) in FAMILY_CHECKPOINTS and FAMILY_CHECKPOINTS[(name, fam)] in bundled:
        alt = FAMILY_CHECKPOINTS[(name, fam)]
        notes.append(f"{fam} row served from {alt}, the bundled {fam} checkpoint of {name}")
        name = alt
    ck = checkpoint(name)
    row_modes = (gemm, moe) if ck.is_moe else (gemm, gemm)
    own_modes = (ck.gemm, ck.moe) if ck.is_moe else (ck.gemm, ck.gemm)
    if row_modes == own_modes or (ck.is_moe and gemm == moe == ck.quantization):
        return PrecisionChoice(name, None, "; ".join(notes))
    if ck.quantization != "bf16":
        own_family = family(ck.quantization)
        if family(gemm) == family(moe if ck.is_moe else gemm) == own_family:
            notes.append(f"row labelled gemm {gemm}/moe {moe}; {name} is a pre-quantized {ck.gemm}/{ck.moe} "
                         "checkpoint of the same family, served at its own precision (no pin)")
            return PrecisionChoice(name, None, "; ".join(notes))
        if (gemm == (moe if ck.is_moe else gemm) and gemm in WEIGHT_BITS
                and WEIGHT_BITS[gemm] < WEIGHT_BITS.get(ck.quantization, 0)):
            notes.append(f"quantization pinned to {gemm}: {name} served from a {gemm} checkpoint of the same "
                         f"architecture (its own is {ck.quantization})")
            return PrecisionChoice(name, gemm, "; ".join(notes))
        return (f"precision: row gemm {gemm}/moe {moe} on pre-quantized {ck.gemm}/{ck.moe} checkpoint {name} "
                "(a pre-quantized checkpoint runs at its own precision or from one of fewer weight bits)")
    if ck.is_moe and gemm != moe:
        return (f"precision: gemm {gemm} and moe {moe} differ from each other and from the checkpoint's "
                f"{ck.quantization} (one quantization pin covers both)")
    if not quantization_available:
        return f"precision: needs search_space.quantization {gemm} (not available in this Spica)"
    notes.append(f"quantization pinned to {gemm} (checkpoint {ck.quantization})")
    return PrecisionChoice(name, gemm, "; ".join(notes))


# ---------------------------------------------------------------- shape and load


@dataclass
class RowPlan:
    """A covered row: everything its Spica config needs."""

    row: SiliconRow
    model: str
    quantization: str | None
    mode: str
    parallel: dict[str, Any]
    concurrency: int
    notes: str = ""
    warmup_requests: int = 0
    gpus: int = 0

    @property
    def kv_cache_dtype(self) -> str:
        """fp8 KV for FP8/FP4 rows (the low-precision recipes serve an fp8 KV cache), else bf16."""
        return kv_dtype_for(self.row)

    @property
    def measured_requests(self) -> int:
        return protocol_for(self.row).requests_per_concurrency * self.concurrency

    @property
    def total_requests(self) -> int:
        return self.measured_requests + self.warmup_requests


def kv_dtype_for(row: SiliconRow) -> str:
    gemm = spica_quant(row.gemm_quant_mode or "bf16")
    moe = spica_quant(row.moe_quant_mode or gemm)
    return "fp8" if family(gemm) in ("fp8", "fp4") and family(moe) in ("fp8", "fp4") else "bf16"


def _role_shape(tp: int | None, dp: int | None, moe_tp: int | None, moe_ep: int | None, is_moe: bool) -> dict[str, int]:
    tp, dp = int(tp or 1), int(dp or 1)
    shape = {"tp": tp, "attention_dp": dp}
    if is_moe:
        shape["moe_tp"] = int(moe_tp or 1)
        shape["moe_ep"] = int(moe_ep or 1)
    return shape


def agg_replicas(row: SiliconRow) -> int:
    """k agg replicas when c is a multiple k > 1 of batch_size × ADP (29 AIC gap-analysis rows): each replica
    then carries the batch the row names (the same reading as bench/peer_aisim.py)."""
    per = (row.batch_size or 0) * (row.attention_dp or 1)
    if per > 0 and row.concurrency and row.concurrency > per and row.concurrency % per == 0:
        return row.concurrency // per
    return 1


def parallel_pin(row: SiliconRow, is_moe: bool) -> dict[str, Any] | str:
    """The row's ``parallel_configs`` entry, or why it has none."""
    if row.mode == "agg":
        if row.tp is None:
            return "shape: no tp_size"
        if (row.pp or 1) != 1:
            return "shape: pipeline parallel (pp > 1) is not expressible"
        return {**_role_shape(row.tp, row.attention_dp, row.moe_tp, row.moe_ep, is_moe), "replicas": agg_replicas(row)}
    if row.mode != "disagg":
        return f"mode {row.mode!r} unknown"
    p, d = row.prefill, row.decode
    if not p.get("num_workers") or not d.get("num_workers"):
        return "disagg: no prefill/decode worker counts"
    if (p.get("pp_size") or 1) != 1 or (d.get("pp_size") or 1) != 1:
        return "shape: pipeline parallel (pp > 1) is not expressible"
    return {"prefill": {**_role_shape(p["tp_size"], p["attention_dp_size"], p["moe_tp_size"], p["moe_ep_size"], is_moe),
                        "replicas": int(p["num_workers"])},
            "decode": {**_role_shape(d["tp_size"], d["attention_dp_size"], d["moe_tp_size"], d["moe_ep_size"], is_moe),
                       "replicas": int(d["num_workers"])}}


def used_gpus(parallel: Mapping[str, Any]) -> int:
    def one(s: Mapping[str, Any]) -> int:
        return int(s["tp"]) * int(s.get("attention_dp", 1)) * int(s.get("replicas", 1))

    return one(parallel["prefill"]) + one(parallel["decode"]) if "prefill" in parallel else one(parallel)


def warmup_for(row: SiliconRow) -> int:
    """Requests the replay runs before the measured 10 × c and drops from the metrics (workload.warmup_requests).

    On silicon the warm-up (InferenceX: 2 × c copies of one prompt, since 2026-01-21) is a separate,
    discarded run, after which the measured run starts from an idle server with c requests at once. The
    replay has nothing to warm (no compilation, prefix caching off), so reproducing the row needs no
    warm-up requests: the measured run is the whole replay, its simultaneous start included.
    """
    return 0


def plan_row(row: SiliconRow, bundled: Sequence[str], checkpoint: Any = checkpoint_of,
             legal: Any = None, quantization_available: bool = True) -> RowPlan | str:
    """A covered row's plan, or the reason it is skipped. ``legal(plan) -> reason | None`` checks the pin."""
    if not (row.ttft_ms > 0 and row.tpot_ms > 0):
        return "measured TTFT/TPOT missing or not positive"
    if row.concurrency is None or row.concurrency < 1:
        return "no batch_size or silicon_concurrency (client concurrency)"
    if row.isl < 1 or row.osl < 2:
        return "isl < 1 or osl < 2 (TPOT needs two output tokens)"
    choice = choose_precision(row, bundled, checkpoint, quantization_available)
    if isinstance(choice, str):
        return choice
    ck = checkpoint(choice.model)
    pin = parallel_pin(row, ck.is_moe)
    if isinstance(pin, str):
        return pin
    plan = RowPlan(row=row, model=choice.model, quantization=choice.quantization, mode=row.mode, parallel=pin,
                   concurrency=int(row.concurrency), notes=choice.note, warmup_requests=warmup_for(row),
                   gpus=used_gpus(pin))
    if legal is not None:
        reason = legal(plan)
        if reason:
            return reason
    return plan


# ---------------------------------------------------------------- traces and configs


SEQS_CHOICES = {"agg": (256, 512, 1024), "decode": (256, 512, 1024), "prefill": (1, 2, 4, 8, 16, 32, 64, 128, 256)}


def per_rank_concurrency(plan: RowPlan, role: str) -> int:
    shape = plan.parallel if role == "agg" else plan.parallel[role]
    ranks = int(shape.get("attention_dp", 1)) * int(shape.get("replicas", 1))
    return -(-plan.concurrency // ranks)


def max_num_seqs(plan: RowPlan, role: str) -> int:
    """max(256, c) per scheduler (attention-DP rank), rounded up to a value Spica allows (capped at its largest);
    a prefill worker takes the largest allowed (256)."""
    choices = SEQS_CHOICES[role]
    if role == "prefill":
        return choices[-1]
    need = max(MIN_MAX_NUM_SEQS, per_rank_concurrency(plan, role))
    return next((c for c in choices if c >= need), choices[-1])


def engine_knobs(plan: RowPlan) -> dict[str, Any]:
    """Batching as the recipe; vLLM's defaults where the row does not say."""
    out: dict[str, Any] = {}
    roles = ("agg",) if plan.mode == "agg" else ("prefill", "decode")
    for role in roles:
        out[f"{role}_max_num_batched_tokens"] = [MAX_NUM_BATCHED_TOKENS]
        out[f"{role}_max_num_seqs"] = [max_num_seqs(plan, role)]
        out[f"{role}_enable_prefix_caching"] = False
    return out


def make_config(plan: RowPlan) -> dict[str, Any]:
    """The Spica config (a mapping ``spica evaluate`` accepts as YAML, self-contained) that replays the row:
    a closed loop at the row's concurrency, its request count and length spread (``protocol_for``) with
    unshared prompts."""
    space: dict[str, Any] = {
        "model_name": plan.model, "hardware_sku": plan.row.system, "gpu_budget": max(1, plan.gpus),
        "deployment_mode": [plan.mode], "backend": [plan.row.backend], "parallel_configs": [plan.parallel],
        **engine_knobs(plan),
        "router_mode": ["round_robin"], "overlap_score_credit": [1.0], "prefill_load_scale": [1.0],
        "router_temperature": [0.0], "planner_scaling_policy": ["disabled"],
    }
    if plan.quantization is not None:
        space["quantization"] = plan.quantization
    if plan.kv_cache_dtype != "bf16":
        space["kv_cache_dtype"] = plan.kv_cache_dtype
    if (recv := recipe_recv_interval(plan.row)) > 1:
        space["scheduler_recv_interval"] = recv
    if nextn := recipe_nextn(plan.row):
        space["aic_nextn"] = nextn
    workload: dict[str, Any] = {"isl": plan.row.isl, "osl": plan.row.osl, "concurrency": plan.concurrency,
                                "num_request_ratio": plan.total_requests / plan.concurrency,
                                "length_spread": protocol_for(plan.row).length_spread}
    return {"search_space": space, "workload": workload, "goal": {"target": "throughput"},
            "sweep": {"parallel_evals": 1}}


def pin_problem(plan: RowPlan) -> str | None:
    """Why Spica cannot replay the row's pin, or None: its own stage-1 answer (perf DB, replay support, enumeration
    rules) and the precision's."""
    from spica_core.config.model import SmartSearchConfig
    from spica_core.space import legal_space

    try:
        cfg = SmartSearchConfig.from_dict(make_config(plan))
        space = legal_space(cfg)
    except Exception as exc:  # noqa: BLE001 - a config Spica refuses is a skipped row
        return f"config refused: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    sp = space.spaces[0]
    if sp.dropped_reason:
        return f"not expressible: {sp.dropped_reason}"
    reasons = [r for r in sp.pin_reasons.values() if r]
    if reasons:
        return f"pin not legal: {reasons[0]}"
    if plan.quantization is not None:
        try:
            from spica_core.space import precision_problem

            why = precision_problem(plan.model, plan.row.system, plan.row.backend, sp.version, plan.quantization)
        except Exception as exc:  # noqa: BLE001
            why = f"{type(exc).__name__}: {exc}"
        if why:
            return f"precision: {why}"
    return None



__all__ = [
    "pin_problem",
    "AIC_BENCH_LENGTH_SPREAD", "AIC_BENCH_REQUESTS_PER_CONCURRENCY", "AIC_GAP_ANALYSIS", "agg_replicas", "Checkpoint",
    "checkpoint_of", "choose_precision", "client_concurrency", "engine_knobs", "family", "FAMILY_CHECKPOINTS",
    "kv_dtype_for", "LENGTH_SPREAD", "load_rows", "make_config", "MAX_NUM_BATCHED_TOKENS", "max_num_seqs",
    "measured_date", "MIN_MAX_NUM_SEQS", "MODEL_ALIASES", "parallel_pin", "parse_row", "per_rank_concurrency",
    "plan_row", "PrecisionChoice", "Protocol", "protocol_for", "read_rows", "RECV_INTERVAL_RECIPES", "recipe_nextn",
    "recipe_recv_interval", "REQUESTS_PER_CONCURRENCY", "REQUIRED_COLUMNS", "RowPlan", "SEQS_CHOICES", "SiliconRow",
    "silicon_csv", "source_kind", "SPECULATIVE_RECIPES", "spica_quant", "used_gpus", "warmup_for",
]
