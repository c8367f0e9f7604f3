"""Offline stand-ins for the Hub models and datasets TRL's GRPO tests load (`trl-internal-testing/*`).

Models: tiny random models of the same architectures (seeded, hidden size 16, 2 layers; MoE with 4 experts),
with the byte-level BPE tokenizer and ChatML template of `tests/helpers/tiny_model.py`, written into a Hugging Face
cache layout (`models--org--name/snapshots/<rev>/`, `refs/main`) so that with `HF_HUB_OFFLINE=1` and
`HF_HUB_CACHE` pointing there, every loader (`from_pretrained` of models, tokenizers, processors, configs, by id
or from inside TRL) resolves the hub id locally. Architectures that cannot be built here (vision-language
models, which need image processors; `trust_remote_code` models) are left out: their tests fail to load the
model in both the stock and the OrderGrad run and are counted as "not available offline".

Datasets: `zen_dataset(name, config, split, streaming)` mirrors `trl-internal-testing/zen` (the Zen of Python as
prompts) with the same columns for the text configs the GRPO tests use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from helpers.tiny_model import build_tokenizer  # noqa: E402

# Bump when the stand-ins change, so a cache built by an older version is rebuilt.
STAND_IN_VERSION = "1"
REVISION = "0" * 39 + STAND_IN_VERSION

_DENSE = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
              head_dim=8, max_position_embeddings=512)  # fmt: skip
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)

# hub id -> (model_type, head: "causal" | "seqcls", extra config)
MODELS = {
    "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5": ("qwen2", "causal", {}),
    "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5": ("qwen2", "seqcls", {}),
    "trl-internal-testing/tiny-Qwen3ForCausalLM": ("qwen3", "causal", {}),
    "trl-internal-testing/tiny-Qwen3ForSequenceClassification": ("qwen3", "seqcls", {}),
    "trl-internal-testing/tiny-Qwen3MoeForCausalLM": ("qwen3_moe", "causal", {**_MOE, "decoder_sparse_step": 1}),
    "trl-internal-testing/tiny-LlamaForCausalLM-3.2": ("llama", "causal", {}),
    "trl-internal-testing/tiny-LlamaForSequenceClassification-3.2": ("llama", "seqcls", {}),
    "trl-internal-testing/tiny-MistralForCausalLM-0.2": ("mistral", "causal", {}),
    "trl-internal-testing/tiny-Gemma2ForCausalLM": ("gemma2", "causal", {}),
    "trl-internal-testing/tiny-Cohere2ForCausalLM": ("cohere2", "causal", {}),
    "trl-internal-testing/tiny-GptOssForCausalLM": (
        "gpt_oss", "causal", {"num_local_experts": 4, "num_experts_per_tok": 2, "layer_types": None},
    ),
    "trl-internal-testing/tiny-Glm4MoeForCausalLM": (
        "glm4_moe", "causal",
        {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "first_k_dense_replace": 1,
         "n_group": 1, "topk_group": 1},
    ),
}  # fmt: skip


def _build(model_type: str, head: str, extra: dict, tokenizer, dest: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id, "bos_token_id": None}
    kwargs = {**_DENSE, **extra, **special, "vocab_size": len(tokenizer), "tie_word_embeddings": False}
    kwargs = {k: v for k, v in kwargs.items() if v is not None or k == "bos_token_id"}
    if head == "seqcls":
        kwargs["num_labels"] = 1
    config = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    auto = AutoModelForCausalLM if head == "causal" else AutoModelForSequenceClassification
    model = auto.from_config(config)
    if head == "causal":
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def build_hub_cache(root: str | Path, log=print) -> Path:
    """Write every buildable stand-in under `root` in the HF hub cache layout (skips ones already there)."""
    root = Path(root)
    tokenizer = build_tokenizer()
    built = {}
    for repo_id, (model_type, head, extra) in MODELS.items():
        repo_dir = root / f"models--{repo_id.replace('/', '--')}"
        snapshot = repo_dir / "snapshots" / REVISION
        if (snapshot / "config.json").is_file():
            built[repo_id] = "cached"
            continue
        try:
            _build(model_type, head, extra, tokenizer, snapshot)
        except Exception as err:  # an architecture this transformers cannot build tiny: its tests fail in both runs
            built[repo_id] = f"not built: {type(err).__name__}: {err}"[:200]
            continue
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / "main").write_text(REVISION)
        built[repo_id] = "built"
    (root / "stand_ins.json").write_text(json.dumps(built, indent=2))
    for repo_id, state in built.items():
        log(f"  {repo_id}: {state}")
    return root


# trl-internal-testing/zen: prompts from the Zen of Python. 6 train rows instead of the Hub's 17 (every test
# trains one epoch, so this cuts its steps ~3x on 2 CPU cores; no GRPO test depends on the row count).
_ZEN = [
    "Beautiful is better than", "Explicit is better than", "Simple is better than", "Complex is better than",
    "Flat is better than", "Sparse is better than",
]  # fmt: skip
_ZEN_TEST = ["If the implementation is easy to explain,", "Namespaces are one honking great"]


def zen_dataset(name: str, config: str | None = None, split: str | None = None, streaming: bool = False, **kwargs):
    """`datasets.load_dataset` for `trl-internal-testing/zen` text configs, offline; other ids raise."""
    from datasets import Dataset, DatasetDict

    if name != "trl-internal-testing/zen":
        raise FileNotFoundError(f"{name} (config {config!r}) has no offline stand-in in benchmarks/trl_suite")

    def rows(lines):
        if config == "standard_prompt_only":
            return {"prompt": list(lines)}
        if config == "conversational_prompt_only":
            return {"prompt": [[{"role": "user", "content": line}] for line in lines]}
        raise FileNotFoundError(f"trl-internal-testing/zen config {config!r} has no offline stand-in")

    splits = DatasetDict(train=Dataset.from_dict(rows(_ZEN)), test=Dataset.from_dict(rows(_ZEN_TEST)))
    if streaming:
        splits = {k: v.to_iterable_dataset() for k, v in splits.items()}
        if split is None:
            from datasets import IterableDatasetDict

            return IterableDatasetDict(splits)
    return splits if split is None else splits[split]
