"""Build a tiny random Qwen2 causal LM and a small byte-level BPE tokenizer, fully offline.

Shared by `conftest.py` (pytest fixture), the torchrun worker and `benchmarks/`: the Hub is unreachable in CI,
so every test model is made here from a fixed seed. The tokenizer has a ChatML chat template (Qwen style) so
conversational datasets work too.
"""

from __future__ import annotations

from pathlib import Path

# Trainer settings every CPU test needs: TRL defaults to bf16 and gradient checkpointing, and would report to
# any installed tracker. Tests pass these explicitly; the library never flips them.
CPU_TRAINING_ARGS = dict(
    bf16=False,
    use_cpu=True,
    report_to="none",
    gradient_checkpointing=False,
    save_strategy="no",
    logging_steps=1,
    disable_tqdm=True,
    dataloader_num_workers=0,
    seed=0,
)

EOS, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# Qwen2-style ChatML; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "What is {a} plus {b}? The answer is {c}.",
    "Compute {a} times {b} and give the result: {c}",
    "The quick brown fox jumps over the lazy dog {a} times.",
    "Question {a}: how many apples are left if you eat {b}? Answer: {c}",
    "Let x = {a}. Then x + {b} = {c}, so the final answer is \\boxed{{{c}}}.",
]


def _corpus(n: int = 400) -> list[str]:
    lines = []
    for i in range(n):
        a, b = i % 37, (7 * i) % 23
        lines.append(_CORPUS[i % len(_CORPUS)].format(a=a, b=b, c=a + b))
    return lines


def build_tokenizer(vocab_size: int = 320):
    """Byte-level BPE trained on a small synthetic corpus, wrapped as a `PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=EOS, bos_token=None, padding_side="left"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer, seed: int = 0, hidden_size: int = 16, num_layers: int = 2):
    """Random `Qwen2ForCausalLM` sized for CPU tests (about 20k parameters)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Save a tiny model + tokenizer under `path` (loadable with `from_pretrained(path)`); returns the path."""
    path = Path(path)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
