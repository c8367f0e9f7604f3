"""Named protocols (`--protocol`): each preset equals the values its sources state (typed here again, from the
sources, not from the registry), a flag given overrides the preset, an unknown name is refused in one line listing
the names, docs/evaluation.md's table is the registry's, and every report states its whole protocol in a header
(including runs without --protocol, and the grader's version that the score stage records)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.compare_runs import scored_run
from helpers.eval_runs import cli_error

from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs, ReportArgs
from ordergrad_trl.evaluation.cli import parse_stage_args
from ordergrad_trl.evaluation.protocols import PRESET_FIELDS, PROTOCOLS, apply_protocol, protocol_table_markdown
from ordergrad_trl.evaluation.report import report
from ordergrad_trl.evaluation.run import _split_options

REPO = Path(__file__).resolve().parents[1]
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."

# (temperature, top_p, max_new_tokens, n, system prompt, user template) as the sources state them
CITED = {
    # arXiv 2501.12948 Sec. 3.1 and the DeepSeek-R1 README: 0.6, 0.95, 32,768 tokens, 64 responses per query
    "deepseek_r1": (0.6, 0.95, 32768, 64, None, "{question}\n" + BOXED),
    # Qwen2.5-Math evaluation/sh/eval.sh (--temperature 0 --top_p 1 --n_sampling 1), math_eval.py's 2048 default,
    # utils.py 'qwen25-math-cot' (the directive as system message, the question alone as user turn)
    "qwen25_math_cot": (0.0, 1.0, 2048, 1, BOXED, "{question}"),
    # simple-evals ChatCompletionSampler defaults (0.5, 1024 tokens), MathEval n_repeats 16, math_eval.py template
    "simple_evals": (0.5, 1.0, 1024, 16, None,
                     "Solve the following math problem step by step. The last line of your response should be of "
                     "the form Answer: $ANSWER (without quotes) where $ANSWER is the answer to the problem.\n\n"
                     "{question}\n\nRemember to put your answer on its own line after \"Answer:\", and you do not "
                     "need to use a \\boxed command."),
    # lighteval math_500 (generation_size 32768, pass@1 with n = 1, default_prompts.math_500) as open-r1 runs it
    "lighteval_math_500": (0.6, 0.95, 32768, 1, None,
                           "Solve the following math problem efficiently and clearly.  The last line of your response "
                           "should be of the following format: 'Therefore, the final answer is: $\\boxed{ANSWER}$. I "
                           "hope it is correct' (without quotes) where ANSWER is just the final number or expression "
                           "that solves the problem. Think step by step before answering.\n\n{question}"),
}


@pytest.mark.parametrize("name", list(CITED))
def test_each_preset_equals_its_cited_values(name):
    temperature, top_p, max_new, n, system, user = CITED[name]
    s = PROTOCOLS[name].settings
    assert (s["temperature"], s["top_p"], s["max_new_tokens"], s["num_samples"], s["system_prompt"],
            s["user_template"]) == (temperature, top_p, max_new, n, system, user)
    assert s["top_k"] == 0 and s["use_chat_template"] is True
    assert set(PROTOCOLS[name].sources) == set(PRESET_FIELDS)


def test_the_registry_is_the_one_the_brief_asked_for():
    assert set(CITED) == set(PROTOCOLS)


def test_flags_given_override_the_preset():
    gen, _ = parse_stage_args("generate", ["--protocol", "deepseek_r1", "--max_new_tokens", "1024", "--temperature",
                                           "1.0"], "ordergrad-eval generate")
    # --temperature 1.0 is the flag's default value, given on purpose: it still overrides 0.6
    assert (gen.temperature, gen.top_p, gen.max_new_tokens, gen.num_samples) == (1.0, 0.95, 1024, 64)
    gen, *_ = parse_stage_args("run", ["--protocol=qwen25_math_cot", "--no_use_chat_template"], "ordergrad-eval run")
    assert (gen.temperature, gen.system_prompt, gen.use_chat_template, gen.num_samples) == (0.0, BOXED, False, 1)
    gen, _ = _split_options({"protocol": "simple_evals", "top_p": 0.9, "output_dir": "x"}, (GenerateArgs, PathArgs))
    assert (gen.temperature, gen.top_p, gen.num_samples) == (0.5, 0.9, 16)
    # GenerateArgs built in Python: what differs from the defaults counts as given
    gen = apply_protocol(GenerateArgs(protocol="lighteval_math_500", num_samples=4))
    assert (gen.temperature, gen.max_new_tokens, gen.num_samples) == (0.6, 32768, 4)
    assert apply_protocol(GenerateArgs()) == GenerateArgs()  # no protocol: untouched


def test_config_keys_override_the_preset_too(tmp_path):
    config = tmp_path / "eval.yaml"
    config.write_text("protocol: deepseek_r1\ntop_p: 0.5\n")
    gen, _ = parse_stage_args("generate", ["--config", str(config)], "ordergrad-eval generate")
    assert (gen.temperature, gen.top_p) == (0.6, 0.5)


def test_an_unknown_protocol_is_refused_in_one_line(capsys):
    err = cli_error(capsys, ["generate", "--protocol", "deepseek"])
    assert err.endswith(f"--protocol must be one of {', '.join(PROTOCOLS)}, got 'deepseek'")


def test_docs_table_is_the_registry():
    doc = (REPO / "docs" / "evaluation.md").read_text()
    assert protocol_table_markdown() in doc, "regenerate: print(protocols.protocol_table_markdown())"


def test_every_report_states_its_protocol(tmp_path):
    out = scored_run(tmp_path / "run", {"p0": [1, 0], "p1": [1, 1]}, protocol="qwen25_math_cot", seeds=(0, 3))
    result = report(ReportArgs(bootstrap_samples=50, plot=False), PathArgs(str(out)))
    header = result["protocol"]
    assert header["protocol"] == "qwen25_math_cot" and header["seeds"] == [0, 3]
    assert (header["temperature"], header["top_p"], header["max_new_tokens"], header["n"]) == (1.0, 1.0, 1024,
                                                                                               {"toy": 2})
    assert header["grader"] == "math-verify" and header["grader_versions"] == ["0.9.0"]
    assert "Chen et al. 2021" in header["pass@k_estimator"]
    assert "end-of-sequence" in header["stop"] and "no stop strings" in header["stop"]
    md = (out / "report.md").read_text()
    assert "Protocol: `qwen25_math_cot`" in md and "Grader: math-verify 0.9.0" in md and "seed 0, 3" in md
    assert f"Stops at {header['stop']}." in md
    assert json.loads((out / "report.json").read_text())["protocol"] == header


def test_a_run_records_its_protocol_overrides_seed_and_grader(tmp_path):
    import importlib.metadata

    from ordergrad_trl.evaluation import evaluate

    out = tmp_path / "run"
    result = evaluate(backend="reference", datasets=["arithmetic"], limit=2, protocol="deepseek_r1", num_samples=2,
                      seed=5, reward_workers=1, output_dir=out, bootstrap_samples=50, plot=False)
    header = result["protocol"]
    assert header["protocol"] == "deepseek_r1" and header["overrides"] == {"num_samples": [64, 2]}
    assert (header["temperature"], header["top_p"], header["max_new_tokens"]) == (0.6, 0.95, 32768)
    assert header["seeds"] == [5]
    assert header["grader_versions"] == [importlib.metadata.version("math-verify")]
    assert "(overridden: num_samples 64 -> 2)" in (out / "report.md").read_text()
