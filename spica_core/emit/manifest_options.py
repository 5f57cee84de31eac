"""What a manifest needs that a candidate does not carry: :class:`ManifestOptions` and the default images.

The images default to the ai-dynamo 1.6.1 runtime of the candidate's backend in NVIDIA's registry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spica_core.config.goal import OptimizationGoal


DYNAMO_VERSION = "1.6.1"
IMAGE_REGISTRY = "nvcr.io/nvidia/ai-dynamo"
RUNTIME_REPOS = {"vllm": "vllm-runtime", "sglang": "sglang-runtime", "trtllm": "tensorrtllm-runtime"}
PLANNER_REPO = "dynamo-planner"
# Engines the ai-dynamo 1.6.1 runtime images ship; the perf DB may be older (spica.dev/perf-db-version).
IMAGE_ENGINES = {"vllm": "vllm 0.31.0", "sglang": "sglang 0.5.21", "trtllm": "tensorrt-llm 1.3.0rc29"}

# The node label NVIDIA's GPU feature discovery sets to the GPU's product name (NVML's name, spaces as '-').
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# Its usual value per aiconfigurator-core system. Clusters differ (a memory size or form factor in the name, a
# "-SHARED" suffix under time-slicing): check `kubectl get nodes -L nvidia.com/gpu.product` and override with
# ManifestOptions.gpu_product_labels (`spica emit --gpu-product-label SKU=VALUE`).
GPU_PRODUCTS = {
    "a100_pcie": "NVIDIA-A100-PCIE-40GB", "a100_sxm": "NVIDIA-A100-SXM4-80GB", "a30": "NVIDIA-A30",
    "b200_sxm": "NVIDIA-B200", "b300_sxm": "NVIDIA-B300-SXM6-AC", "gb200": "NVIDIA-GB200", "gb300": "NVIDIA-GB300",
    "h100_pcie": "NVIDIA-H100-PCIe", "h100_sxm": "NVIDIA-H100-80GB-HBM3", "h200_sxm": "NVIDIA-H200",
    "l4": "NVIDIA-L4", "l40s": "NVIDIA-L40S", "rtx_pro_6000_server": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
}


@dataclass(frozen=True)
class ManifestOptions:
    """Deployment parameters a candidate does not carry.

    ``image`` None = ``nvcr.io/nvidia/ai-dynamo/<backend>-runtime:1.6.1``; ``planner_image`` None =
    the ``dynamo-planner`` image of the same registry and tag. ``optimization_target`` (with ``ttft_ms`` /
    ``itl_ms`` for ``sla``) is the planner target the sweep goal maps to (``planner_target``): required for a
    candidate that scales, because the replay scored it under that target — see :meth:`for_goal`.
    ``gpu_product_labels`` overrides :data:`GPU_PRODUCTS`, the value each worker's node selector asks of the
    ``nvidia.com/gpu.product`` label, per GPU type.
    """

    image: str | None = None
    namespace: str | None = None
    model_cache_pvc: str | None = "model-cache"
    name: str | None = None
    planner_image: str | None = None
    hf_token_secret: str | None = "hf-token-secret"
    dynamo_version: str = DYNAMO_VERSION        # runtimeVersionOverride when an image tag is not semver
    optimization_target: str | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    shared_memory_size: str | None = "64Gi"     # /dev/shm of workers that span more than one GPU
    gpu_product_labels: tuple[tuple[str, str], ...] = ()   # (GPU type, label value) overrides

    def gpu_product(self, sku: str) -> str | None:
        """The ``nvidia.com/gpu.product`` value of a GPU type's nodes (None: not known)."""
        return dict(self.gpu_product_labels).get(sku) or GPU_PRODUCTS.get(sku)

    @classmethod
    def for_goal(cls, goal: OptimizationGoal, **kwargs: Any) -> ManifestOptions:
        """Options carrying the planner target (and SLA) the sweep's goal gave the replayed planner."""
        from spica_core.config.policies import planner_target

        sla = goal.sla
        return cls(optimization_target=planner_target(goal), ttft_ms=sla.ttft_ms if sla else None,
                   itl_ms=sla.itl_ms if sla else None, **kwargs)


def default_image(backend: str, version: str = DYNAMO_VERSION) -> str:
    return f"{IMAGE_REGISTRY}/{RUNTIME_REPOS[backend]}:{version}"


__all__ = ["ManifestOptions", "default_image", "DYNAMO_VERSION", "IMAGE_ENGINES", "GPU_PRODUCT_LABEL", "GPU_PRODUCTS"]
