"""Token ids around generation: a problem's prompt, and the ids that end a completion.

Stops: a chat model ends its answer with the template's end-of-turn token (`<|im_end|>`, `<|eot_id|>`,
`<end_of_turn>`), which is not always the tokenizer's eos (Qwen2.5-Math base: eos `<|endoftext|>`, turns end
with `<|im_end|>`). Both backends stop at every id of `stop_token_ids`: eos of the tokenizer and of the model's
generation config, plus the end-of-turn token read off the chat template itself.
"""

from __future__ import annotations

import logging

from .errors import UsageError

logger = logging.getLogger(__name__)

__all__ = ["end_of_turn_id", "prompt_ids", "stop_token_ids"]

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
