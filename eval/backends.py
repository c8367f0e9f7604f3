"""Generation backends (batched `transformers` generate, vLLM) and what both need: prompts and stop tokens.

Stops: a chat model ends its answer with the template's end-of-turn token (`<|im_end|>`, `<|eot_id|>`,
`<end_of_turn>`), which is not always the tokenizer's eos (Qwen2.5-Math base: eos `<|endoftext|>`, turns end
with `<|im_end|>`). Both backends stop at every id of `stop_token_ids`: eos of the tokenizer and of the model's
generation config, plus the end-of-turn token read off the chat template itself.
"""

from __future__ import annotations

import logging

from eval.cli import UsageError
from eval.modeling import load_model_and_tokenizer, load_tokenizer, materialize_for_vllm

logger = logging.getLogger("eval.generate")

__all__ = ["HFBackend", "VLLMBackend", "end_of_turn_id", "prompt_ids", "stop_token_ids"]

_PROBE = "ORDERGRAD_PROBE_ANSWER"


def end_of_turn_id(tok) -> int | None:
    """The special token the chat template writes right after an assistant message (None without one)."""
    if not getattr(tok, "chat_template", None):
        return None
    chat = [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": _PROBE}]
    try:
        text = tok.apply_chat_template(chat, tokenize=False)
    except Exception as err:  # templates may reject this conversation; eos then remains the only stop
        logger.warning("could not render the chat template to find its end-of-turn token (%s)", err)
        return None
    after = text.split(_PROBE, 1)[1] if _PROBE in text else ""
    ids = tok(after, add_special_tokens=False)["input_ids"] if after else []
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    return ids[0] if ids and ids[0] in special else None


def stop_token_ids(tok, generation_eos=None) -> list[int]:
    """Ids that end a completion: tokenizer eos, the model's generation-config eos (int or list), end of turn."""
    extra = generation_eos if isinstance(generation_eos, (list, tuple)) else [generation_eos]
    ids = [tok.eos_token_id, *extra, end_of_turn_id(tok)]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


def prompt_ids(tok, problem: dict, use_chat_template: bool) -> list[int]:
    """Token ids of a problem's prompt: the chat template, or (`--use_chat_template false`) plain text in which
    a system message is a prefix separated by a blank line."""
    messages = problem["prompt"]
    if use_chat_template:
        if not getattr(tok, "chat_template", None):
            raise UsageError("the tokenizer has no chat template; pass --use_chat_template false to send plain text "
                         "(a --system_prompt then becomes a prefix of the user message)")
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]
    return tok("\n\n".join(m["content"] for m in messages))["input_ids"]


class HFBackend:
    """Batched `transformers` generate; rows are chat-templated token ids, left-padded."""

    def __init__(self, source, args):
        from transformers import GenerationConfig

        self.model, self.tok = load_model_and_tokenizer(source, args.dtype)
        self.stop = stop_token_ids(self.tok, self.model.generation_config.eos_token_id)
        sampling = args.temperature > 0
        # A fresh config: model-specific defaults (top_k=50, repetition penalty, ...) must not leak into the
        # distribution, so both backends sample from exactly temperature/top_p/top_k.
        self.gen_config = GenerationConfig(
            do_sample=sampling,
            temperature=args.temperature if sampling else None,
            top_p=args.top_p if sampling else None,
            top_k=args.top_k if sampling else None,
            repetition_penalty=1.0,
            max_new_tokens=args.max_new_tokens,
            eos_token_id=self.stop,
            pad_token_id=self.tok.pad_token_id,
        )
        self.model.generation_config = self.gen_config
        self.batch_size = args.batch_size

    def generate(self, prompts: list[list[int]], seeds: list[int]):
        """Yields (start index, [(text, num_tokens, finish_reason), ...]) per batch."""
        import torch

        device, stop = self.model.device, set(self.stop)
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start : start + self.batch_size]
            enc = self.tok.pad({"input_ids": batch}, return_tensors="pt", padding=True).to(device)
            torch.manual_seed(seeds[start])
            with torch.inference_mode():
                out = self.model.generate(**enc, generation_config=self.gen_config)
            gen = out[:, enc["input_ids"].shape[1] :].tolist()  # (B, T)
            results = []
            for row in gen:
                end = next((i for i, t in enumerate(row) if t in stop), None)
                count = len(row) if end is None else end + 1  # the stop token counts, padding after it not
                text = self.tok.decode(row[:count], skip_special_tokens=True)
                results.append((text, count, "length" if end is None else "stop"))
            yield start, results


class VLLMBackend:
    """vLLM offline inference; every request carries its own seed, so samples do not depend on batching."""

    def __init__(self, source, args, output_dir):
        from vllm import LLM

        path = materialize_for_vllm(source, output_dir)
        self.tok = load_tokenizer(source)
        self.llm = LLM(
            model=path,
            tokenizer=source.tokenizer if source.adapter is None else path,
            dtype="auto" if args.dtype == "auto" else args.dtype,
            seed=args.seed,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            enable_prefix_caching=True,  # the n samples of a problem share its prompt
        )
        # vLLM stops at eos (tokenizer and generation config); the end-of-turn token must be named
        self.stop = stop_token_ids(self.tok)
        self.args = args

    def generate(self, prompts: list[list[int]], seeds: list[int]):
        from vllm import SamplingParams

        a = self.args
        for start in range(0, len(prompts), a.vllm_chunk):
            ids = prompts[start : start + a.vllm_chunk]
            params = [
                SamplingParams(
                    n=1, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k if a.top_k > 0 else -1,
                    max_tokens=a.max_new_tokens, seed=s, stop_token_ids=self.stop,
                )
                for s in seeds[start : start + a.vllm_chunk]
            ]
            outs = self.llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False)
            yield start, [
                (o.outputs[0].text, len(o.outputs[0].token_ids), o.outputs[0].finish_reason) for o in outs
            ]
