"""Which backend and which GPUs: `--backend auto`, and the `CUDA_VISIBLE_DEVICES` of each data-parallel worker.

GPU mapping: the workers share the parent's visible GPUs, `CUDA_VISIBLE_DEVICES` included. With
`CUDA_VISIBLE_DEVICES=4,5,6,7`, dp=2, tp=2, rank 0 sees GPUs 4,5 and rank 1 sees 6,7. dp x tp larger than the
visible GPUs is a usage error raised before anything loads. Without a GPU the workers run on the CPU (hf).
"""

from __future__ import annotations

import importlib.util
import os

from .errors import UsageError

__all__ = ["gpu_count", "resolve_backend", "visible_devices", "worker_devices"]


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a broken CUDA setup must not stop CPU evaluation
        return 0


def visible_devices() -> list[str]:
    """This process's GPUs as the ids CUDA knows them by: `CUDA_VISIBLE_DEVICES` entries, else 0..count-1."""
    count = gpu_count()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return [str(i) for i in range(count)]
    return [d.strip() for d in env.split(",") if d.strip()][:count]  # CUDA ignores entries after a bad one


def worker_devices(dp: int, tp: int, devices: list[str]) -> list[str | None]:
    """`CUDA_VISIBLE_DEVICES` of each rank: consecutive groups of tp visible GPUs (None on a CPU-only machine, where
    dp is bounded by the CPU cores this process may use: each worker loads the model)."""
    if not devices:
        from ordergrad_trl.tasks.reward_settings import usable_cpus

        if dp > usable_cpus():
            raise UsageError(
                f"--data_parallel_size {dp}: no GPU is visible, and this machine gives this process {usable_cpus()} "
                f"CPU core(s); each worker process loads the model, so use at most {usable_cpus()}"
            )
        return [None] * dp
    if dp * tp > len(devices):
        raise UsageError(
            f"--data_parallel_size {dp} x --tensor_parallel_size {tp} = {dp * tp} GPUs, but {len(devices)} are "
            f"visible ({','.join(devices)}); lower one of them or make more GPUs visible (CUDA_VISIBLE_DEVICES)"
        )
    return [",".join(devices[r * tp : (r + 1) * tp]) for r in range(dp)]


def resolve_backend(backend: str) -> str:
    if backend != "auto":
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise UsageError("--backend vllm, but vllm is not installed (pip install vllm); or use --backend hf")
        return backend
    return "vllm" if importlib.util.find_spec("vllm") is not None and gpu_count() > 0 else "hf"
