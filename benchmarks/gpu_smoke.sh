#!/usr/bin/env bash
# GPU smoke test: a few training steps of a Qwen config with vLLM colocate generation, then a tiny evaluation of
# the trained checkpoint with eval/'s vLLM backend. One line per part, "PASS <part>" or "FAIL <part>", and a
# non-zero exit status if any part failed. Cannot run in CI (no GPU there); on one GPU it takes a few minutes
# plus the first download of the model (~3 GB).
#
#   pip install -e ".[vllm]"          # a vLLM in trl 1.16's range (0.22.0 to 0.31.0)
#   bash benchmarks/gpu_smoke.sh [OUT_DIR]
#
# Environment overrides: MODEL (default Qwen/Qwen2.5-Math-1.5B, or a local path), CONFIG (default the CVaR
# colocate config), STEPS (3), OUT (gpu_smoke_out). Each part's full output is in $OUT/<part>.log.
set -u
cd "$(dirname "$0")/.."

OUT=${1:-${OUT:-gpu_smoke_out}}
MODEL=${MODEL:-Qwen/Qwen2.5-Math-1.5B}
CONFIG=${CONFIG:-recipes/configs/qwen2.5_math_1.5b_cvar_colocate.yaml}
STEPS=${STEPS:-3}
mkdir -p "$OUT"
failed=0

# part NAME COMMAND...: run COMMAND with its output in $OUT/NAME.log and print one PASS/FAIL line
part() {
    local name=$1 start=$SECONDS
    shift
    if "$@" >"$OUT/$name.log" 2>&1; then
        echo "PASS $name ($((SECONDS - start)) s)"
    else
        echo "FAIL $name (exit $?, $((SECONDS - start)) s; see $OUT/$name.log)"
        failed=1
    fi
}

# 1. A CUDA GPU, and a vLLM that the installed TRL supports (OrderGradConfig refuses others with use_vllm).
check_env() {
    python - <<'EOF'
import torch
from packaging.version import Version
from ordergrad_trl.training.config import installed_vllm_version, trl_vllm_range

assert torch.cuda.is_available(), "no CUDA GPU visible"
found = installed_vllm_version()
assert found is not None, 'vllm is not installed: pip install -e ".[vllm]"'
assert Version(Version(found).base_version) in trl_vllm_range(), f"vllm {found} outside {trl_vllm_range()}"
print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}, vllm {found}")
EOF
}

# 2. STEPS optimizer steps of the Qwen config on one GPU, vLLM colocated; short completions, no checkpoints.
train() {
    accelerate launch --num_processes 1 --num_machines 1 --mixed_precision bf16 --dynamo_backend no \
        recipes/math_cvar.py --config "$CONFIG" --model_name_or_path "$MODEL" --max_steps "$STEPS" \
        --max_completion_length 512 --max_eval_samples 16 --eval_before_training false --eval_strategy no \
        --save_strategy no --log_completions false --report_to none --output_dir "$OUT/train" &&
        grep -q "eval reward:" "$OUT/train.log" && grep -q "'grad_norm'" "$OUT/train.log" &&
        test -f "$OUT/train/config.json"
}

# 3. The trained checkpoint (the base model if training failed) on 8 MATH-500 problems x 4 samples with vLLM.
evaluate() {
    local model="$OUT/train"
    test -f "$model/config.json" || model=$MODEL
    python -m eval.run --model "$model" --backend vllm --datasets math500 --limit 8 --num_samples 4 \
        --max_new_tokens 512 --ks 1 4 --gpu_memory_utilization 0.5 --output_dir "$OUT/eval" &&
        test -f "$OUT/eval/report.json"
}

part env check_env
part train train
part eval evaluate
exit $failed
