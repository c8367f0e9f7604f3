"""Which weights to evaluate: a Hub id, a local checkpoint (e.g. a trainer's `checkpoint-N`), or a PEFT adapter.

An adapter directory is recognised by its `adapter_config.json`: the base named there (`base_model_name_or_path`)
is loaded and the adapter merged into it (`merge_and_unload`), so generation runs at the base model's speed. vLLM
needs a plain checkpoint, so for it the merged model is written once to `<output_dir>/merged_model`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ModelSource", "load_model_and_tokenizer", "materialize_for_vllm", "resolve_model"]


@dataclass(frozen=True)
class ModelSource:
    model: str  # what the user asked for (Hub id or path)
    base: str  # weights to load: the model itself, or the adapter's base
    adapter: str | None  # PEFT adapter directory, if any
    tokenizer: str  # where the tokenizer (and its chat template) comes from

    def describe(self) -> dict:
        return {"model": self.model, "base": self.base, "adapter": self.adapter}


def _has_tokenizer(path: Path) -> bool:
    return (path / "tokenizer_config.json").is_file()


def resolve_model(model: str | None) -> ModelSource:
    """ModelSource for `model`; None means the project's default (SmolLM2-135M-Instruct, offline if needed)."""
    if model is None or model == "":
        from ordergrad_trl.tasks.models import resolve_default_model

        model = resolve_default_model()
    path = Path(model).expanduser()
    if path.is_dir() and (path / "adapter_config.json").is_file():
        config = json.loads((path / "adapter_config.json").read_text())
        base = config.get("base_model_name_or_path")
        if not base:
            raise ValueError(f"{path}/adapter_config.json has no base_model_name_or_path; cannot load the base model")
        # the trainer saves the tokenizer beside the adapter; it may carry a chat template the base lacks
        return ModelSource(str(model), str(base), str(path), str(path) if _has_tokenizer(path) else str(base))
    if not path.exists() and (str(model).startswith((".", "/", "~")) or os.sep * 2 in str(model)):
        from eval.cli import MissingPathError

        raise MissingPathError(f"--model {model}: path not found (relative to {Path.cwd()})")
    return ModelSource(str(model), str(model), None, str(model))


def load_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source.tokenizer)
    tok.padding_side = "left"  # batched generation continues from the right end of every prompt
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model_and_tokenizer(source: ModelSource, dtype: str = "auto", device: str | None = None):
    """(model in eval mode on `device`, tokenizer); adapters are merged into their base."""
    import torch
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ValueError(f"dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(source.base, dtype=torch_dtype)
    if source.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source.adapter).merge_and_unload()
    return model.to(device).eval(), load_tokenizer(source)


def materialize_for_vllm(source: ModelSource, output_dir: str | os.PathLike) -> str:
    """A path vLLM can load: the model itself, or (adapters) the merged model saved under `output_dir`."""
    if source.adapter is None:
        return source.base
    dest = Path(output_dir) / "merged_model"
    marker = dest / "ordergrad_merged_from.json"
    if marker.is_file() and json.loads(marker.read_text()) == source.describe():
        return str(dest)
    model, tok = load_model_and_tokenizer(source, dtype="bfloat16", device="cpu")
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    marker.write_text(json.dumps(source.describe()))
    logger.info("merged adapter %s into %s -> %s", source.adapter, source.base, dest)
    return str(dest)
