"""Shared offline fixtures: a tiny random Qwen2 model + BPE tokenizer, and CPU-safe trainer settings.

Nothing here touches the Hub. Run the suite with OMP_NUM_THREADS=1: the tiny model's ops are ~100x slower with
several threads on a small machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/ is not a package: on sys.path, `helpers` (the shared test code) and sibling test modules import the same way
# under any pytest import mode (the worker scripts in tests/helpers/ put tests/ there themselves)
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent / "studies"))  # the studies' tests (tests/studies/), which
# tests/test_docs_commands.py delegates a study's documented command to

from helpers.tiny_model import CPU_TRAINING_ARGS, build_tiny_model  # noqa: E402

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """Directory with a tiny random `Qwen2ForCausalLM` and its tokenizer (ChatML template), built once."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def tiny_model(tiny_model_dir):
    """A fresh copy of the tiny model (float32) for tests that train it."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)


@pytest.fixture
def cpu_training_args(tmp_path):
    """Keyword arguments for a TRL config that runs on CPU, writing under this test's tmp_path."""
    return dict(CPU_TRAINING_ARGS, output_dir=str(tmp_path / "out"))
