"""Every row of `DYNAMIC_SAMPLING` through the trainer, so a new mode is tested by being registered: the config takes
it and its help lists it; a mode trains exactly the groups its rule keeps, in round order, and draws further rounds
only when it refills and a group was left out; a mode that leaves nothing out is no dynamic sampling at all. A row
added here (DAPO's equal-reward rule) runs without an edit to the trainer or the config. CurveRL's window takes one
push per trained batch, every round weighed against the window as it stood before the batch; p_hat is computed once
per round."""

from __future__ import annotations

import itertools

import pytest
import torch
from test_dynamic_sampling import build, distinct_rewards

from ordergrad_trl import OrderGradConfig
from ordergrad_trl.core import plan as plan_module
from ordergrad_trl.core.prompt_weights import PromptWeightSpec, inner, success_rates
from ordergrad_trl.training import dynamic_sampling
from ordergrad_trl.training.dynamic_sampling import DYNAMIC_SAMPLING, SamplingMode, dynamic_sampling_help

# prompts 0 and 1 of one generation batch (2 groups of 4): 0 is empty under every rule, 1 varies
INPUTS = [{"prompt": f"Question {i}: what is {i} plus 1?"} for i in range(2) for _ in range(4)]


def equal_rewards(batch):
    """DAPO's rule: a group whose scorable rewards are all equal is left out (whatever the advantages)."""
    groups = int(batch.group.max()) + 1
    low = torch.full((groups,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, batch.group, batch.rewards.double().nan_to_num(torch.inf), "amin")
    high = torch.full((groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, batch.group, batch.rewards.double().nan_to_num(-torch.inf), "amax")
    return (low >= high).to(batch.empty.device)


EXAMPLE = SamplingMode("equal_rewards", "the rewards", True, "DAPO's rule: leave out groups of equal rewards",
                       equal_rewards)


@pytest.fixture(params=[*DYNAMIC_SAMPLING, EXAMPLE.name])
def mode(request):
    """Each registered mode, and the example row, registered for the test only."""
    if request.param != EXAMPLE.name:
        yield request.param
        return
    with dynamic_sampling._ROWS.registered(EXAMPLE.name, EXAMPLE):
        yield request.param


def test_the_config_takes_every_mode_and_its_help_lists_it(mode, tmp_path):
    config = OrderGradConfig(output_dir=str(tmp_path), ordergrad_dynamic_sampling=mode, use_cpu=True, bf16=False,
                             report_to="none")  # fmt: skip
    assert config.ordergrad_dynamic_sampling == mode and f"'{mode}' (" in dynamic_sampling_help()


def test_each_mode_trains_the_groups_its_rule_keeps(mode, tiny_model_dir, tiny_tokenizer, tmp_path):
    row = DYNAMIC_SAMPLING[mode]
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(lambda i, s: i % 2 == 1), mode=mode,
                    ordergrad_dynamic_sampling_max_rounds=20)  # fmt: skip
    records, score = [], trainer._ordergrad_score
    trainer._ordergrad_score = lambda inputs: (out := score(inputs), records.append(out[1]))[0]
    trainer.model.train()
    output = trainer._generate_and_score_completions(INPUTS)
    if row.leaves_out is None:  # trains every group: the trainer runs without dynamic sampling
        assert trainer.ordergrad_dynamic_sampling is None and len(records) == 1
        assert not trainer._metrics["train"]["ordergrad/dynamic_sampling/rounds"]
        return
    left_out = [row.leaves_out(r).tolist() for r in records]
    assert left_out[0] == [True, False]  # prompt 0's rewards are all 1.0: left out by every rule here
    kept = sum(not out for rounds in left_out for out in rounds)
    trained = trainer._metrics["train"]["ordergrad/dynamic_sampling/groups_trained"]
    assert trained == [float(min(2, kept))]
    assert (len(records) > 1) == row.refills  # round 0 left a group out: a refilling mode draws more
    weight = output.get("tool_mask", torch.ones_like(output["completion_mask"]))[:, 0]
    assert int((weight > 0).sum()) == 4 * min(2, kept)  # the rows of the trained groups, and only those


def test_curverls_window_takes_one_push_per_trained_batch(tiny_model_dir, tiny_tokenizer, tmp_path, monkeypatch):
    """Refill generates several rounds per batch: all are weighed against the window as it was before the batch
    (not against the batch's own earlier rounds), and the batch joins it once, with every round's rates."""
    counter = itertools.count()

    def reward(prompts, completion_ids, **kwargs):  # prompts 3k: 0/1 alternating (p_hat 1/2); the others all 0
        return [float(next(counter) % 2) if int(p.split()[1].rstrip(":")) % 3 == 0 else 0.0 for p in prompts]

    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, reward, mode="refill", ordergrad_prompt_weight="curverl",
                    ordergrad_prompt_weight_window=4, ordergrad_dynamic_sampling_max_rounds=20)  # fmt: skip
    references, rates = [], []
    weights = PromptWeightSpec.weights
    monkeypatch.setattr(PromptWeightSpec, "weights", lambda self, p_hat, bins, reference=None: (
        references.append(reference), weights(self, p_hat, bins, reference))[1])
    monkeypatch.setattr(plan_module, "success_rates", lambda r, spec: (
        rates.append(success_rates(r, spec)), rates[-1])[1])
    window = trainer.ordergrad_prompt_window
    trainer.model.train()
    inputs = [{"prompt": f"Question {i}: what is {i} plus 1?"} for i in (1, 2) for _ in range(4)]  # both empty
    for batch in range(2):
        before = window.state_dict()
        references.clear(), rates.clear()
        trainer._generate_and_score_completions(inputs)
        assert len(references) == len(rates) > 1  # several rounds, one p_hat per round
        held = [p for rates_of_batch in before["batches"] for p in rates_of_batch] or None  # the window's reference
        held = None if held is None else torch.tensor(held, dtype=torch.float64)
        for reference in references:  # every round against the window before the batch
            assert (reference is None and held is None) or torch.equal(reference, held)
        assert window.pushed == batch + 1  # one push per batch
        assert window.batches[-1] == inner(torch.cat(rates)).tolist()  # with every round's rates
