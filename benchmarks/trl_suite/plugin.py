"""pytest plugin that runs TRL's GRPO tests from a TRL checkout offline, with stock GRPO or OrderGrad substituted.

Loaded by `run.py` as `-p benchmarks.trl_suite.plugin`; the tests and TRL's own `tests/conftest.py` are read from
the checkout, nothing of them is copied here.

ORDERGRAD_TRL_SUITE_TRAINER=grpo       stock GRPOTrainer / GRPOConfig (the baseline)
ORDERGRAD_TRL_SUITE_TRAINER=ordergrad  OrderGradTrainer / OrderGradConfig in their place (default)

Before anything imports huggingface_hub, this points HF_HUB_CACHE at a cache of tiny stand-in models under the
hub ids the tests use (`stand_ins.py`, built once into `$ORDERGRAD_CACHE/trl_suite_hub`) and sets
HF_HUB_OFFLINE=1; `load_dataset` in each test module is replaced by the offline `zen` stand-in. On CPU, bf16 is
turned off on every TRL config (TRL's conftest already sets use_cpu; bf16 autocast on CPU only slows the tiny
models down). The checkout's tests may come from a newer TRL than the installed one: helpers they import that the
installed `trl.import_utils` lacks are supplied here (`_MISSING_IMPORT_UTILS`).
"""

from __future__ import annotations

import importlib.util
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

# Availability checks that TRL main's tests/testing_utils.py imports and trl 1.16.0 does not define.
_MISSING_IMPORT_UTILS = {"is_joblib_available": lambda: importlib.util.find_spec("joblib") is not None}


def pytest_configure(config):
    from filelock import FileLock

    import_utils = importlib.import_module("trl.import_utils")
    for name, check in _MISSING_IMPORT_UTILS.items():
        if not hasattr(import_utils, name):
            setattr(import_utils, name, check)
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
def no_bf16_on_cpu(monkeypatch):
    """`bf16=False` on every TRL config when there is no accelerator (TRL configs default to bf16=True)."""
    import torch
    from trl.trainer.base_config import _BaseConfig

    if torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return
    original_post_init = _BaseConfig.__post_init__

    def post_init_without_bf16(self):
        self.bf16 = False
        original_post_init(self)

    monkeypatch.setattr(_BaseConfig, "__post_init__", post_init_without_bf16)
