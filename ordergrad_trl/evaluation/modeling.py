"""Which weights to evaluate, their fingerprint, and loading them: the tokenizer once, an adapter merged once.

`--model` is a Hub id, a local checkpoint such as a trainer's `checkpoint-N`, or a PEFT adapter directory.
An adapter directory is recognised by its `adapter_config.json`: the base named there (`base_model_name_or_path`)
is loaded and the adapter merged into it (`merge_and_unload`), so generation runs at the base model's speed. vLLM
and data-parallel workers need a plain checkpoint, so for them the merged model is written once to
`<output_dir>/merged_model`.

The fingerprint of a local directory is a SHA-256 over the files that define the model (`is_model_file`: weights,
configs, tokenizer and chat template; not notes, optimizer or trainer state), and one per file, so a refused
resume names the file that changed. Hashing a multi-GB checkpoint takes seconds, so a
file whose size and modification time match the run's earlier record reuses its recorded hash. A Hub id is
recorded by name only: pass a local snapshot to pin the exact weights.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import MissingPathError, UsageError
from .layout import MERGED_DIR

logger = logging.getLogger(__name__)

__all__ = ["MODEL_FILES", "ModelSource", "fingerprint", "fingerprint_changes", "is_model_file", "load_model",
           "load_model_and_tokenizer", "load_tokenizer", "materialize_merged", "resolve_model", "weights_problem"]

# The files that define a model: weights, configs (generation config included), tokenizer and chat template.
# Not notes, READMEs, logs, optimizer / scheduler / RNG state or trainer bookkeeping: adding such a file to a
# checkpoint must not refuse a resume.
MODEL_FILES = frozenset({
    "config.json", "generation_config.json", "adapter_config.json", "preprocessor_config.json",
    "processor_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "chat_template.json", "chat_template.jinja",
    "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
})
_MODEL_SUFFIXES = (".safetensors", ".gguf", ".tiktoken", ".safetensors.index.json", ".bin.index.json")
_NOT_MODEL = ("training_args.bin",)  # training bookkeeping saved beside the weights


def is_model_file(name: str) -> bool:
    """Whether a file of a model directory is part of the model (and so of its fingerprint)."""
    if name in MODEL_FILES or name.endswith(_MODEL_SUFFIXES):
        return True
    return name.endswith(".bin") and name not in _NOT_MODEL  # pytorch_model*.bin, adapter_model.bin


@dataclass(frozen=True)
class ModelSource:
    model: str  # what the user asked for (Hub id or path)
    base: str  # weights to load: the model itself, or the adapter's base
    adapter: str | None  # PEFT adapter directory, if any
    tokenizer: str  # where the tokenizer (and its chat template) comes from

    def describe(self) -> dict:
        return {"model": self.model, "base": self.base, "adapter": self.adapter}


def weights_problem(path: Path) -> str | None:
    """Why the model folder `path` cannot load (None if it can, as far as its files tell): no weight file at all,
    or a `.safetensors` file cut short or with a broken header (read without loading a tensor)."""
    weights = [p for p in sorted(path.iterdir()) if p.is_file() and is_model_file(p.name) and (
        p.name.endswith((".safetensors", ".gguf", ".safetensors.index.json", ".bin.index.json"))
        or p.name.endswith(".bin"))]
    if not weights:
        return ("holds no weights (no *.safetensors, pytorch_model*.bin or *.gguf file); pass the folder the "
                "trainer saved the model into")
    for p in weights:
        if p.name.endswith(".index.json"):  # a sharded checkpoint: every shard its index names must be there
            try:
                shards = sorted(set(json.loads(p.read_bytes())["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                return f"{p.name} is not a readable weight index ({type(err).__name__}: {err}); save the model again"
            missing = [name for name in shards if not (path / str(name)).is_file()]
            if missing:
                return f"{p.name} names {len(missing)} shard(s) the folder lacks ({', '.join(missing[:3])})"
            continue
        if not p.name.endswith(".safetensors"):
            continue
        size = p.stat().st_size
        try:
            with open(p, "rb") as f:
                head = f.read(8)
                length = int.from_bytes(head, "little") if len(head) == 8 else -1
                if length < 2 or 8 + length > size:
                    raise ValueError("its header is cut short")
                header = json.loads(f.read(length))
            ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            return f"{p.name} is not a readable safetensors file ({err}); the file is damaged, save or copy it again"
        if ends and 8 + length + max(ends) > size:
            return (f"{p.name} is cut short ({size} bytes, its header needs {8 + length + max(ends)}); the file is "
                    "damaged or still being copied: save or copy it again")
    return None


def _has_tokenizer(path: Path) -> bool:
    return (path / "tokenizer_config.json").is_file()


def resolve_model(model: str | None) -> ModelSource:
    """ModelSource for `model`; None means the project's default (SmolLM2-135M-Instruct, offline if needed)."""
    if model is None or model == "":
        from ordergrad_trl.tasks.models import resolve_default_model

        model = resolve_default_model()
    path = Path(model).expanduser()
    if path.is_dir() and (path / "adapter_config.json").is_file():
        try:
            config = json.loads((path / "adapter_config.json").read_bytes())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UsageError(f"--model {model}: {path}/adapter_config.json is not valid JSON ({err})") from None
        base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
        if not base:
            raise UsageError(f"--model {model}: {path}/adapter_config.json has no base_model_name_or_path; cannot "
                             "load the base model")
        problem = weights_problem(path)
        if problem:
            raise UsageError(f"--model {model}: the adapter {problem}")
        # the trainer saves the tokenizer beside the adapter; it may carry a chat template the base lacks
        return ModelSource(str(model), str(base), str(path), str(path) if _has_tokenizer(path) else str(base))
    text = str(model)
    if not path.exists() and (text.startswith((".", "/", "~")) or text.endswith(("/", os.sep)) or "//" in text):
        raise MissingPathError(f"--model {model}: path not found (relative to {Path.cwd()})")
    if path.is_file():
        raise UsageError(f"--model {model}: a file; pass a checkpoint directory (with config.json) or a Hub id")
    if path.is_dir() and not (path / "config.json").is_file():
        raise UsageError(f"--model {model}: the directory holds no config.json (nor adapter_config.json), so it is "
                         "not a checkpoint; pass the directory the trainer saved (e.g. its checkpoint-N)")
    if path.is_dir():
        problem = weights_problem(path)
        if problem:
            raise UsageError(f"--model {model}: {problem}")
    return ModelSource(text, text, None, text)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _dir_files(directory: Path, cache: dict) -> dict[str, dict]:
    """{file name: {size, mtime_ns, sha256}} of the files that define a model directory."""
    out = {}
    for p in sorted(directory.iterdir()):
        if not p.is_file() or not is_model_file(p.name):
            continue
        stat = p.stat()
        old = cache.get(p.name) or {}
        same = old.get("size") == stat.st_size and old.get("mtime_ns") == stat.st_mtime_ns
        out[p.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                       "sha256": old["sha256"] if same and "sha256" in old else _sha256(p)}
    return out


def fingerprint(source: ModelSource, previous: dict | None = None) -> dict:
    """{"base": ..., "adapter": ...}: for each local directory its files and one `sha256` over their names and
    contents; None for a Hub id. `previous` (an earlier fingerprint) lends hashes of unchanged files."""
    previous = previous or {}
    out = {}
    for role, where in (("base", source.base), ("adapter", source.adapter)):
        path = Path(where).expanduser() if where else None
        if path is None or not path.is_dir():
            out[role] = None
            continue
        files = _dir_files(path, ((previous.get(role) or {}).get("files")) or {})
        total = hashlib.sha256("".join(f"{name}\0{f['sha256']}\n" for name, f in files.items()).encode())
        out[role] = {"sha256": total.hexdigest(), "files": files}
    return out


def fingerprint_changes(old: dict | None, new: dict | None) -> list[str]:
    """What differs between two `fingerprint`s, file by file (`base model.safetensors changed`); only files that
    define the model count, also in a record written when more files did."""
    out = []
    for role in ("base", "adapter"):
        o, n = (old or {}).get(role), (new or {}).get(role)
        if not (isinstance(o, dict) and isinstance(n, dict)):
            if (o or {}).get("sha256") != (n or {}).get("sha256"):
                out.append(f"{role} {'now a Hub id' if n is None else 'now a local directory'}")
            continue
        of = {k: v.get("sha256") for k, v in (o.get("files") or {}).items() if is_model_file(k)}
        nf = {k: v.get("sha256") for k, v in (n.get("files") or {}).items() if is_model_file(k)}
        for name in sorted(of.keys() | nf.keys()):
            if name not in nf:
                out.append(f"{role} file {name} removed")
            elif name not in of:
                out.append(f"{role} file {name} added")
            elif of[name] != nf[name]:
                out.append(f"{role} file {name} changed")
    return out


def load_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(source.tokenizer)
    except (OSError, ValueError) as err:  # not on the Hub / offline, no tokenizer files, a broken config
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise UsageError(f"--model {source.model}: cannot load its tokenizer from {source.tokenizer} ({first})") \
            from None
    tok.padding_side = "left"  # batched generation continues from the right end of every prompt
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(source: ModelSource, dtype: str = "auto", device: str | None = None):
    """The model in eval mode on `device`; an adapter is merged into its base."""
    import torch
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise UsageError(f"--dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(source.base, dtype=torch_dtype)
    if source.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source.adapter).merge_and_unload()
    return model.to(device).eval()


def load_model_and_tokenizer(source: ModelSource, dtype: str = "auto", device: str | None = None):
    """(model, tokenizer): `load_model` and `load_tokenizer` in one call."""
    return load_model(source, dtype, device), load_tokenizer(source)


def _read_marker(marker: Path):
    """The merge's marker, None when cut short or corrupt (written last: a crash mid-write), so the merge is redone."""
    try:
        return json.loads(marker.read_bytes())
    except (OSError, ValueError):
        return None


def materialize_merged(source: ModelSource, output_dir: str | os.PathLike, tok, dtype: str,
                       fp: dict | None = None) -> ModelSource:
    """A plain checkpoint of `source` for other processes: the source itself, or (an adapter) its merge in `dtype`,
    saved once with `tok` to `<output_dir>/merged_model` and reused while adapter and base (`fp`, their
    `fingerprint`) are unchanged."""
    if source.adapter is None:
        return source
    dest = Path(output_dir) / MERGED_DIR
    marker = dest / "ordergrad_merged_from.json"
    stamp = {**source.describe(), "dtype": dtype, "fingerprint": {
        k: v and v["sha256"] for k, v in (fp or fingerprint(source)).items()}}
    if not (marker.is_file() and _read_marker(marker) == stamp):
        model = load_model(source, dtype=dtype, device="cpu")
        try:
            model.save_pretrained(dest)
            tok.save_pretrained(dest)
        except OSError as err:  # the marker is written last, so a rerun merges again
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise UsageError(f"{dest}: {err.strerror} while saving the adapter merged into its base; free space "
                                 "(or pass another --output_dir) and rerun the same command") from None
            raise
        marker.write_text(json.dumps(stamp))
        logger.info("merged adapter %s into %s -> %s", source.adapter, source.base, dest)
    return ModelSource(str(dest), str(dest), None, str(dest))
