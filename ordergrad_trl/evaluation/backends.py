"""Generation backends: batched `transformers` generate and vLLM.

Both sample from exactly temperature / top_p / top_k and stop at every id of `tokens.stop_token_ids`.

A backend gets the run's tokenizer and a plain (already merged, if an adapter) `ModelSource`: loading them is the
caller's job, once per run.
"""

from __future__ import annotations

from .modeling import load_model
from .tokens import stop_token_ids

__all__ = ["HFBackend", "VLLMBackend"]


class HFBackend:
    """Batched `transformers` generate; rows are chat-templated token ids, left-padded."""

    def __init__(self, source, tok, args):
        from transformers import GenerationConfig

        self.model, self.tok = load_model(source, args.dtype), tok
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

    def __init__(self, source, tok, args):
        from vllm import LLM
        from vllm.platforms import current_platform

        if source.adapter is not None:
            raise ValueError("VLLMBackend needs a plain checkpoint: merge the adapter first (materialize_merged)")
        self.tok = tok
        self.llm = LLM(
            model=source.base,
            tokenizer=source.tokenizer,
            dtype="auto" if args.dtype == "auto" else args.dtype,
            seed=args.seed,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            enable_prefix_caching=True,  # the n samples of a problem share its prompt
            # vLLM (0.31) rewinds a chunked-prefill request's seeded generator with `set_offset`, which CPU
            # generators lack ("CPU Generator does not use offset"): on CPU every prompt is prefilled whole
            **({"enable_chunked_prefill": False} if current_platform.is_cpu() else {}),
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
