"""Keep vLLM's CPU linear layers on their `weight` parameter, so TRL's colocate weight sync reaches them.

After loading, vLLM's CPU backend (0.31) repacks each linear layer's weight for oneDNN (or AMX / zentorch) where the
CPU supports it (AVX-512 BF16 here) and replaces `layer.weight` by an empty tensor: TRL's `sync_weights` then fails
(`AttributeError: 'Parameter' object has no attribute 'weight_loader'`), and the LM head, which keeps its weight but
computes with a packed copy, would silently not follow. On AVX2-only CPUs vLLM already falls back to
`torch.nn.functional.linear` on `weight`; this makes every CPU do that. It patches this process only: colocate
mode runs vLLM's model in the trainer's process.

Usage: `import vllm_cpu_shim; vllm_cpu_shim.keep_vllm_cpu_weights()`; for an unmodified script, `sitecustomize(dir)`
writes a `sitecustomize.py` that applies it at interpreter start-up in processes with `dir` on PYTHONPATH (running the
script through runpy instead breaks vLLM's compile cache, which checks the source of `__main__`).
"""

from __future__ import annotations

from pathlib import Path

from helpers.startup_hook import write_startup_hook

import torch


def keep_vllm_cpu_weights() -> None:
    from vllm.model_executor.layers import utils

    def dispatch(layer, remove_weight: bool) -> None:  # vLLM's own fallback branch, on every CPU
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    utils.dispatch_cpu_unquantized_gemm = dispatch


def sitecustomize(directory: Path) -> Path:
    """Write `directory/sitecustomize.py` applying `keep_vllm_cpu_weights` (`startup_hook`); returns `directory`."""
    return write_startup_hook(directory, "vllm_cpu_shim", "keep_vllm_cpu_weights")
