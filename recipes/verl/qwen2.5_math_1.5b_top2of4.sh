#!/usr/bin/env bash
# OrderGrad in verl: Qwen2.5-Math-1.5B on MATH, Top-2@4 (the mean of the best 2 of 4 answers) over n=8 rollouts
# per prompt, scored by math-verify. One node of 8 GPUs, vLLM rollouts, FSDP training.
#
# NOT YET RUN ON A GPU: the overrides compose and pass verl 0.9.1's own config validation (tests/test_verl_docs.py,
# on CPU), but no training run has been made with this script. docs/verl.md explains each setting.
#
#   python recipes/verl/prepare_math.py --out_dir ~/data/ordergrad_math
#   bash recipes/verl/qwen2.5_math_1.5b_top2of4.sh [more Hydra overrides]
#
# Environment: DATA_DIR (default ~/data/ordergrad_math), MODEL (Qwen/Qwen2.5-Math-1.5B), N_GPUS (8).
set -euo pipefail

DATA_DIR=${DATA_DIR:-$HOME/data/ordergrad_math}
MODEL=${MODEL:-Qwen/Qwen2.5-Math-1.5B}
N_GPUS=${N_GPUS:-8}

# On-policy, so that K * the leave-one-out advantage is an unbiased policy gradient of the objective: one optimizer
# step per batch (ppo_mini_batch_size = train_batch_size, one epoch), no KL term, and a loss that sums each
# response's tokens and divides by a constant (seq-mean-token-sum-norm with a fixed loss_scale_factor, the
# response budget; unset, verl divides by each micro-batch's padded length, which varies with dynamic batching).
# Qwen2.5-Math-1.5B has a 4096-token context: 1024 prompt + 3072 response tokens.
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=ordergrad \
    +algorithm.ordergrad_objective=TopM:2 \
    +algorithm.ordergrad_k=4 \
    algorithm.use_kl_in_reward=false \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=128 \
    data.max_prompt_length=1024 \
    data.max_response_length=3072 \
    data.filter_overlong_prompts=true \
    data.truncation=error \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=true \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \
    actor_rollout_ref.actor.ppo_epochs=1 \
    actor_rollout_ref.actor.use_dynamic_bsz=true \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
    actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm \
    actor_rollout_ref.actor.loss_scale_factor=3072 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true \
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=16384 \
    reward.custom_reward_function.path=pkg://ordergrad_trl.integrations.verl_reward \
    reward.custom_reward_function.name=compute_score \
    trainer.logger='["console"]' \
    trainer.project_name=ordergrad_verl \
    trainer.experiment_name=qwen2.5-math-1.5b-top2of4 \
    trainer.n_gpus_per_node="$N_GPUS" \
    trainer.nnodes=1 \
    trainer.val_before_train=true \
    trainer.test_freq=10 \
    trainer.save_freq=50 \
    trainer.total_epochs=1 \
    "$@"
