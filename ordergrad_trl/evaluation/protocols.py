"""Named evaluation protocols (`--protocol NAME` on `generate` / `run`): the one registry of published settings.

Published math scores move with the prompt, temperature, top_p, max tokens and n (open-r1 #224, #269, #622; "A
Sober Look at Progress in LM Reasoning", arXiv 2504.07086), so each preset fixes them all, and every value carries
the source it was read from (`Protocol.sources`); docs/evaluation.md's protocol table is `protocol_table_markdown()`
of this registry. A flag given on the command line (or a keyword of `evaluate`) overrides its preset value; which
were overridden is recorded in the run's provenance and stated in every report's protocol header.

Stop rules: every preset stops at the model's end-of-sequence token, as the engines here do; Qwen2.5-Math's
script also stops at "</s>", "<|im_end|>", "<|endoftext|>", which are the end-of-sequence tokens of the models it
evaluates. No preset needs another stop string, so there is no stop flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ordergrad_trl.core.registry_base import Registry
from ordergrad_trl.tasks.prompts import DEFAULT_USER_TEMPLATE

from .errors import UsageError

__all__ = ["PROTOCOLS", "PRESET_FIELDS", "Protocol", "apply_protocol", "check_protocol", "overrides",
           "protocol_table_markdown"]

# The GenerateArgs fields a preset sets (every one of them, so a preset leaves nothing to the defaults)
PRESET_FIELDS = ("system_prompt", "user_template", "use_chat_template", "temperature", "top_p", "top_k",
                 "max_new_tokens", "num_samples")

STOP_EOS = "the model's end-of-sequence token"


@dataclass(frozen=True)
class Protocol:
    name: str
    title: str  # who reports scores this way
    settings: Mapping[str, object]  # {GenerateArgs field: value}, every PRESET_FIELDS key
    sources: Mapping[str, str]  # {field: where the value is stated}, every PRESET_FIELDS key
    stop: str = STOP_EOS
    note: str = ""  # what the preset does not reproduce (the grader, above all)

    def __post_init__(self):
        for what in ("settings", "sources"):
            missing = set(PRESET_FIELDS) ^ set(getattr(self, what))
            if missing:
                raise ValueError(f"protocol {self.name!r}: {what} must give exactly {', '.join(PRESET_FIELDS)}; "
                                 f"off: {', '.join(sorted(missing))}")


_ROWS: Registry[Protocol] = Registry("protocol", holder=lambda p: f"protocol {p.title!r}")
PROTOCOLS: Mapping[str, Protocol] = _ROWS.view
"""Every named protocol by name, in the order `--protocol`'s help lists them."""


def _register(protocol: Protocol) -> None:
    _ROWS.add(protocol.name, protocol)


_R1 = "DeepSeek-R1 (arXiv 2501.12948), Sec. 3.1 Evaluation Setup, and the deepseek-ai/DeepSeek-R1 README"
_register(Protocol(
    name="deepseek_r1",
    title="DeepSeek-R1's math evaluation (pass@1 from 64 samples)",
    settings={"system_prompt": None, "user_template": DEFAULT_USER_TEMPLATE, "use_chat_template": True,
              "temperature": 0.6, "top_p": 0.95, "top_k": 0, "max_new_tokens": 32768, "num_samples": 64},
    sources={
        "system_prompt": f"{_R1}, Usage Recommendations: no system prompt, every instruction in the user prompt",
        "user_template": f"{_R1}, Usage Recommendations: the directive 'Please reason step by step, and put your "
                         "final answer within \\boxed{}.' for math; its place after the question is ours (the "
                         "README gives the sentence, not its position)",
        "use_chat_template": f"{_R1}: a chat model, prompted through its chat template",
        "temperature": f"{_R1}: sampling temperature 0.6",
        "top_p": f"{_R1}: top-p 0.95",
        "top_k": f"{_R1}: no top-k is stated (0 = off)",
        "max_new_tokens": f"{_R1}: maximum generation length 32,768 tokens",
        "num_samples": f"{_R1} README: 64 responses per query to estimate pass@1 (the paper: k between 4 and 64 by "
                       "test-set size)",
    },
    note="DeepSeek-R1 grades with its own answer checker; here math-verify grades.",
))

_QWEN = "QwenLM/Qwen2.5-Math, evaluation/"
_register(Protocol(
    name="qwen25_math_cot",
    title="Qwen2.5-Math's CoT evaluation (greedy, one sample)",
    settings={"system_prompt": "Please reason step by step, and put your final answer within \\boxed{}.",
              "user_template": "{question}", "use_chat_template": True, "temperature": 0.0, "top_p": 1.0,
              "top_k": 0, "max_new_tokens": 2048, "num_samples": 1},
    sources={
        "system_prompt": f"{_QWEN}utils.py, PROMPT_TEMPLATES['qwen25-math-cot']: this system message",
        "user_template": f"{_QWEN}utils.py, PROMPT_TEMPLATES['qwen25-math-cot']: the question alone as the user turn",
        "use_chat_template": f"{_QWEN}utils.py: 'qwen25-math-cot' is the Qwen chat format (<|im_start|> turns), "
                             "which the Qwen tokenizers' chat template renders",
        "temperature": f"{_QWEN}sh/eval.sh: --temperature 0 (greedy)",
        "top_p": f"{_QWEN}sh/eval.sh: --top_p 1",
        "top_k": f"{_QWEN}math_eval.py: no top-k (0 = off)",
        "max_new_tokens": f"{_QWEN}math_eval.py: --max_tokens_per_call default 2048 (eval.sh does not set it)",
        "num_samples": f"{_QWEN}sh/eval.sh: --n_sampling 1",
    },
    note="Qwen2.5-Math grades with its own parser and grader (evaluation/grader.py); here math-verify grades.",
))

_SE = "openai/simple-evals"
_SE_TEMPLATE = ("Solve the following math problem step by step. The last line of your response should be of the form "
                "Answer: $ANSWER (without quotes) where $ANSWER is the answer to the problem.\n\n{question}\n\n"
                "Remember to put your answer on its own line after \"Answer:\", and you do not need to use a "
                "\\boxed command.")
_register(Protocol(
    name="simple_evals",
    title="OpenAI simple-evals' MATH evaluation",
    settings={"system_prompt": None, "user_template": _SE_TEMPLATE, "use_chat_template": True,
              "temperature": 0.5, "top_p": 1.0, "top_k": 0, "max_new_tokens": 1024, "num_samples": 16},
    sources={
        "system_prompt": f"{_SE}, sampler/chat_completion_sampler.py: system_message None by default (simple_evals.py "
                         "gives some models one)",
        "user_template": f"{_SE}, math_eval.py QUERY_TEMPLATE (its {{Question}} placeholder is our {{question}})",
        "use_chat_template": f"{_SE}: the template is one user message of a chat completion",
        "temperature": f"{_SE}, sampler/chat_completion_sampler.py: temperature 0.5 by default",
        "top_p": f"{_SE}, sampler/chat_completion_sampler.py: top_p not set (the API's default, 1)",
        "top_k": f"{_SE}: no top-k (0 = off)",
        "max_new_tokens": f"{_SE}, sampler/chat_completion_sampler.py: max_tokens 1024 by default (simple_evals.py "
                          "passes 2048 for some models)",
        "num_samples": f"{_SE}, math_eval.py: MathEval n_repeats = 16 by default",
    },
    note="simple-evals reads the 'Answer:' line and asks an LLM whether it equals the gold; here math-verify "
         "grades the whole completion, which finds a bare answer on the last line, but the two graders differ.",
))

_LE = "huggingface/lighteval"
_LE_TEMPLATE = ("Solve the following math problem efficiently and clearly.  The last line of your response should be "
                "of the following format: 'Therefore, the final answer is: $\\boxed{ANSWER}$. I hope it is correct' "
                "(without quotes) where ANSWER is just the final number or expression that solves the problem. Think "
                "step by step before answering.\n\n{question}")
_register(Protocol(
    name="lighteval_math_500",
    title="lighteval's math_500 task, as open-r1 runs it",
    settings={"system_prompt": None, "user_template": _LE_TEMPLATE, "use_chat_template": True,
              "temperature": 0.6, "top_p": 0.95, "top_k": 0, "max_new_tokens": 32768, "num_samples": 1},
    sources={
        "system_prompt": f"{_LE}: the math_500 task has no system prompt",
        "user_template": f"{_LE}, src/lighteval/tasks/default_prompts.py, math_500 (the boxed template; later "
                         "lighteval versions moved the task to tasks/tasks/math_500.py with an 'ANSWER:' template)",
        "use_chat_template": "huggingface/open-r1 README: lighteval ... --use-chat-template",
        "temperature": "huggingface/open-r1 README: generation_parameters temperature 0.6 (the task itself sets none)",
        "top_p": "huggingface/open-r1 README: generation_parameters top_p 0.95 (the task itself sets none)",
        "top_k": f"{_LE}: no top-k (0 = off)",
        "max_new_tokens": f"{_LE}, math_500 LightevalTaskConfig: generation_size 32768",
        "num_samples": f"{_LE}, math_500 metric pass@k with k = 1, n = 1",
    },
    note="lighteval grades math_500 with math-verify (its extractive-match metric), as here, though its extraction "
         "settings may differ.",
))


def check_protocol(name: str | None, where: str = "") -> Protocol | None:
    """The registered protocol `name` (None for None); UsageError listing the names otherwise."""
    if name is None:
        return None
    if name not in PROTOCOLS:
        raise UsageError(f"{where}--protocol must be one of {', '.join(PROTOCOLS)}, got {name!r}")
    return PROTOCOLS[name]


def apply_protocol(args, given: Iterable[str] | None = None, where: str = ""):
    """`args` (GenerateArgs) with its protocol's preset values in every preset field not in `given` (the flags
    the user gave: they override the preset). `given=None`: every field whose value differs from its default
    counts as given (for GenerateArgs built in Python). No protocol: `args` unchanged."""
    protocol = check_protocol(getattr(args, "protocol", None), where)
    if protocol is None:
        return args
    if given is None:
        defaults = {f.name: f.default for f in dataclasses.fields(args)}
        given = {k for k in PRESET_FIELDS if getattr(args, k) != defaults[k]}
    given = set(given)
    return dataclasses.replace(args, **{k: v for k, v in protocol.settings.items() if k not in given})


def overrides(name: str | None, settings: Mapping[str, object]) -> dict[str, list]:
    """{field: [preset value, value used]} for each preset field `settings` gives another value than protocol
    `name` (empty without a protocol): what a report's header says was changed from the preset."""
    protocol = PROTOCOLS.get(name) if name else None
    if protocol is None:
        return {}
    return {k: [v, settings[k]] for k, v in protocol.settings.items() if k in settings and settings[k] != v}


def protocol_table_markdown() -> str:
    """docs/evaluation.md's table: per protocol, each value and its source."""
    lines = []
    for p in PROTOCOLS.values():
        lines += [f"**`{p.name}`**: {p.title}. Stops at {p.stop}. {p.note}", "", "| field | value | source |",
                  "|---|---|---|"]
        for k in PRESET_FIELDS:
            value = p.settings[k]
            shown = "(none)" if value is None else repr(value).replace("|", "\\|")
            lines.append(f"| `{k}` | `{shown}` | {p.sources[k]} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
