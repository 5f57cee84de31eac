"""What one worker role's command line is written from, and what every engine's writer shares: the context
length flag and the precision flags (FP8 is the only precision the engines quantize to at load time)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from spica_core.deployment import Candidate, EngineKnobs
from spica_core.space.parallel import Shape


class Problems(Protocol):
    """Where a writer records a field the command line cannot express (the manifest is then refused)."""

    def add(self, field_name: str, why: str) -> None: ...


@dataclass
class Launch:
    """One worker role of a candidate, as its engine's command line needs it."""

    candidate: Candidate
    role: str                  # agg, prefill or decode
    shape: Shape
    knobs: EngineKnobs
    offloads: bool             # KVBM host offload on this role
    publishes_events: bool     # KV events for the KV router from this role
    notes: list[str]           # approximations, recorded next to the manifest
    problems: Problems

    @property
    def model(self) -> str:
        return self.candidate.context.model_name

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def context_args(self, flag: str) -> list[str]:
        length = self.candidate.context.context_length
        return [flag, str(length)] if length is not None else []

    def note_checkpoint(self) -> None:
        """A precision the engine reads only from a quantized checkpoint: say which checkpoint to point at."""
        p = self.candidate.precision
        self.note(f"quantization {p.quantization}: {self.candidate.backend} does not quantize to it at load time; "
                  f"point the model at a {p.quantization} checkpoint of {self.model}")

    def precision_args(self, fp8_kv_dtype: str) -> list[str]:
        """``--quantization fp8`` (a bf16 checkpoint quantized at load) and ``--kv-cache-dtype`` (vLLM, SGLang)."""
        p = self.candidate.precision
        args: list[str] = []
        if not p.native and p.quantization in ONLINE_FP8:
            args += ["--quantization", "fp8"]
        elif not p.native:   # the engine reads any other precision from a quantized checkpoint, never from a flag
            self.note_checkpoint()
        if p.kv_cache_dtype == "fp8":
            args += ["--kv-cache-dtype", fp8_kv_dtype]
        return args


ONLINE_FP8 = ("fp8", "fp8_block", "fp8_static")


__all__ = ["Launch", "ONLINE_FP8", "Problems"]
