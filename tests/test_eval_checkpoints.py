"""eval/ on checkpoints saved by OrderGradTrainer: a full checkpoint and a LoRA adapter (merged) load and evaluate."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from test_eval_pipeline import tiny_args

from ordergrad_trl.evaluation.args import PathArgs, ScoreArgs
from ordergrad_trl.evaluation.generate import generate
from ordergrad_trl.evaluation.modeling import load_model_and_tokenizer, resolve_model
from ordergrad_trl.evaluation.score import score


def _train_and_save(tiny_model_dir, tmp_path, peft_config=None) -> Path:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ordergrad_trl import OrderGradConfig, OrderGradTrainer

    def reward(completion_ids, **kw):  # five levels: groups are almost never constant, so the update is not zero
        return [float(sum(ids) % 5) for ids in completion_ids]

    args = OrderGradConfig(
        output_dir=str(tmp_path / "train"), bf16=False, use_cpu=True, report_to="none", gradient_checkpointing=False,
        disable_tqdm=True, dataloader_num_workers=0, seed=0, per_device_train_batch_size=8, num_generations=4,
        ordergrad_k=2, ordergrad_objective="TopM:1", max_completion_length=6, max_steps=1, learning_rate=0.5,
        save_strategy="steps", save_steps=1, logging_steps=1,
    )
    trainer = OrderGradTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward_funcs=reward, args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"What is {i} plus {i}?" for i in range(8)]}),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), peft_config=peft_config,
    )
    trainer.train()
    assert trainer.state.log_history[0]["ordergrad/adv_abs_mean"] > 0  # the weights really moved
    return tmp_path / "train" / "checkpoint-1"


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_full_checkpoint_from_our_trainer_evaluates(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt = _train_and_save(tiny_model_dir, tmp_path)
    source = resolve_model(str(ckpt))
    assert source.adapter is None and source.base == str(ckpt)
    model, _ = load_model_and_tokenizer(source)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = [5, 17, 42, 99]
    assert not torch.allclose(_logits(model, ids), _logits(base, ids))  # the trained weights, not the base
    stats = generate(tiny_args(ckpt, limit=2, num_samples=2, max_new_tokens=4), PathArgs(str(tmp_path / "ev")))
    assert stats["arithmetic"]["samples"] == 4
    assert score(ScoreArgs(reward_workers=1), PathArgs(str(tmp_path / "ev")))["arithmetic"]["scored"] == 4


def test_lora_checkpoint_from_our_trainer_is_merged_and_evaluates(tiny_model_dir, tmp_path):
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    ckpt = _train_and_save(tiny_model_dir, tmp_path, peft_config=lora)
    assert (ckpt / "adapter_config.json").is_file()
    source = resolve_model(str(ckpt))
    assert source.adapter == str(ckpt) and Path(source.base) == Path(tiny_model_dir)
    merged, _ = load_model_and_tokenizer(source)
    assert not any("lora" in n for n, _ in merged.named_parameters())  # merged: plain model, base speed
    ids = [5, 17, 42, 99]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    base_logits = _logits(base, ids)
    unmerged = PeftModel.from_pretrained(base, str(ckpt)).eval()
    assert torch.allclose(_logits(merged, ids), _logits(unmerged, ids), atol=1e-5)
    assert not torch.allclose(_logits(merged, ids), base_logits)  # the adapter is really applied
    out = tmp_path / "ev"
    assert generate(tiny_args(ckpt, limit=2, num_samples=2, max_new_tokens=4), PathArgs(str(out)))["arithmetic"][
        "samples"] == 4
    assert json.loads((out / "provenance.json").read_text())["model"]["adapter"] == str(ckpt)
