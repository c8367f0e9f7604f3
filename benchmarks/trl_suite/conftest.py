"""Runs TRL's vendored GRPO tests offline, with the stock trainer or with OrderGrad substituted.

ORDERGRAD_TRL_SUITE_TRAINER=grpo       stock GRPOTrainer / GRPOConfig (the baseline)
ORDERGRAD_TRL_SUITE_TRAINER=ordergrad  OrderGradTrainer / OrderGradConfig in their place (default)

Before anything imports huggingface_hub, this points HF_HUB_CACHE at a cache of tiny stand-in models under the
hub ids the tests use (`stand_ins.py`, built once into `$ORDERGRAD_CACHE/trl_suite_hub`) and sets
HF_HUB_OFFLINE=1; `load_dataset` in the test module is replaced by the offline `zen` stand-in. The
`force_use_cpu_without_accelerator` fixture is TRL's own (tests/conftest.py at the vendored commit, Apache-2.0).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from pathlib import Path  # noqa: E402

from .stand_ins import STAND_IN_VERSION, build_hub_cache, zen_dataset  # noqa: E402  (stdlib-only at import)

# ordergrad_trl.tasks.models.default_cache_dir(), without importing the package (which imports huggingface_hub)
_CACHE = Path(os.environ.get("ORDERGRAD_CACHE", Path.home() / ".cache" / "ordergrad_trl")).expanduser()
HUB_CACHE = _CACHE / "trl_suite_hub" / STAND_IN_VERSION
os.environ["HF_HUB_CACHE"] = str(HUB_CACHE)

import pytest  # noqa: E402

TRAINER = os.environ.get("ORDERGRAD_TRL_SUITE_TRAINER", "ordergrad")
if TRAINER not in ("grpo", "ordergrad"):
    raise ValueError(f"ORDERGRAD_TRL_SUITE_TRAINER must be 'grpo' or 'ordergrad', got {TRAINER!r}")


def pytest_configure(config):
    from filelock import FileLock

    HUB_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(HUB_CACHE / ".lock")):
        if not (HUB_CACHE / "stand_ins.json").is_file():
            build_hub_cache(HUB_CACHE, log=lambda line: None)


def pytest_report_header(config):
    return f"TRL suite: trainer={TRAINER}, stand-in hub cache {HUB_CACHE}"


@pytest.fixture(autouse=True)
def substitute(request, monkeypatch):
    """Offline `load_dataset`; with `ordergrad`, OrderGrad's trainer and config under the names the tests use."""
    module = request.module
    monkeypatch.setattr(module, "load_dataset", zen_dataset, raising=False)
    if TRAINER == "ordergrad":
        from ordergrad_trl import OrderGradConfig, OrderGradTrainer

        monkeypatch.setattr(module, "GRPOTrainer", OrderGradTrainer, raising=False)
        monkeypatch.setattr(module, "GRPOConfig", OrderGradConfig, raising=False)


@pytest.fixture(autouse=True)
def force_use_cpu_without_accelerator(monkeypatch):
    """TRL's: `use_cpu=True` on every TRL config when there is no accelerator (TRL configs default bf16=True).

    One addition: `bf16=False` too, since bf16 autocast on CPU only slows the tiny models down (2 cores here)."""
    from transformers.testing_utils import torch_device

    if torch_device is not None and torch_device != "cpu":
        return

    from trl.trainer.base_config import _BaseConfig

    original_post_init = _BaseConfig.__post_init__

    def patched_post_init(self):
        self.use_cpu = True
        self.bf16 = False
        original_post_init(self)

    monkeypatch.setattr(_BaseConfig, "__post_init__", patched_post_init)
