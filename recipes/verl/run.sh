#!/usr/bin/env bash
# Train one vpo task with one method on verl 0.9.1 (paper hyperparameters, SPEC section 7).
#
# Usage: recipes/verl/run.sh TASK METHOD [HYDRA_OVERRIDE ...]
#   TASK    maze | musique | eureqa | toolcall | code
#   METHOD  grpo | vpo | multi_rlvr | max_at_k  (also: maxrl, random_weight)
#   Extra arguments are appended to verl's command line and win over everything here.
#   Every default below can be overridden by the environment variable named with it;
#   recipes/verl/README.md lists them. DRY_RUN=1 prints the verl arguments, one per line,
#   and exits without exporting data or starting anything.
#
# Before any model loads it stops, in one line, on: a text task without real data (--source),
# fewer train rows than TRAIN_BATCH_SIZE (zero steps), an estimator that is not registered.
# Not yet run on a GPU; its Hydra
# overrides are checked against verl's config by tests/integrations/test_verl_integration.py.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 2 ]] || usage
TASK=$1; METHOD=$2; shift 2

# ---- per-task defaults (model and epochs: SPEC sections 6-7) ---------------------------
# d_big: a 7-8B model, whose FSDP training state (~16 bytes a parameter) plus vLLM's share does
# not fit 80 GB per GPU on 4 GPUs without offloading (README "Memory").
case "$TASK" in
  maze)     d_model=Qwen/Qwen3-4B;                d_epochs=2;  d_prompt=1024; d_resp=1024; d_tp=1; d_big=0 ;;
  musique)  d_model=Qwen/Qwen3-1.7B;              d_epochs=1;  d_prompt=4096; d_resp=1024; d_tp=1; d_big=0 ;;
  eureqa)   d_model=Qwen/Qwen3-8B;                d_epochs=6;  d_prompt=2048; d_resp=1024; d_tp=2; d_big=1 ;;
  toolcall) d_model=Qwen/Qwen3-1.7B;              d_epochs=20; d_prompt=2048; d_resp=1024; d_tp=1; d_big=0 ;;
  code)     d_model=Qwen/Qwen2.5-Coder-7B-Instruct; d_epochs=1; d_prompt=2048; d_resp=2048; d_tp=2; d_big=1 ;;
  *) echo "run.sh: unknown TASK '$TASK' (maze, musique, eureqa, toolcall, code)" >&2; exit 2 ;;
esac

# ---- per-method defaults ----------------------------------------------------------------
# adv_estimator: verl's own grpo, or a name registered by the vpo.integrations.verl_plugin entry point.
case "$METHOD" in
  vpo)           d_m=3; d_est=vpo ;;
  multi_rlvr)    d_m=3; d_est=multi_rlvr ;;
  grpo)          d_m=1; d_est=grpo ;;
  max_at_k)      d_m=1; d_est=max_at_k ;;
  maxrl)         d_m=1; d_est=maxrl ;;
  random_weight) d_m=1; d_est=random_weight ;;
  *) echo "run.sh: unknown METHOD '$METHOD' (grpo, vpo, multi_rlvr, max_at_k, maxrl, random_weight)" >&2; exit 2 ;;
esac

M=${M:-$d_m}                                   # answers per rollout (paper: 3 for multi-answer methods)
MODEL=${MODEL:-$d_model}
EPOCHS=${EPOCHS:-$d_epochs}
ADV_ESTIMATOR=${ADV_ESTIMATOR:-$d_est}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-$d_prompt}
if [[ -z "${MAX_RESPONSE_LENGTH:-}" ]]; then   # multi-answer chains get about 2x the budget (SPEC section 3)
  if (( M > 1 )); then MAX_RESPONSE_LENGTH=$(( 2 * d_resp )); else MAX_RESPONSE_LENGTH=$d_resp; fi
fi
ROLLOUT_N=${ROLLOUT_N:-8}                      # G rollouts per prompt
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-128}      # prompts per step
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-64} # prompts per PPO mini-batch
LR=${LR:-1e-6}
KL_COEF=${KL_COEF:-0.001}
CLIP_RATIO=${CLIP_RATIO:-0.2}
TEMPERATURE=${TEMPERATURE:-1.0}
NUM_WEIGHTS=${NUM_WEIGHTS:-100}                # K Dirichlet weights per prompt (vpo, logged set_score)
ALPHA=${ALPHA:-1.0}
SAMPLER=${SAMPLER:-iid}                        # iid (paper) | sobol
SEED=${SEED:-0}                                # keys the weights: keyed_rng(SEED, extra_info.index)
N_GPUS=${N_GPUS:-4}
NNODES=${NNODES:-1}
ROLLOUT_TP=${ROLLOUT_TP:-$d_tp}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6}
if (( d_big && N_GPUS * NNODES < 8 )); then d_offload=True; else d_offload=False; fi
PARAM_OFFLOAD=${PARAM_OFFLOAD:-$d_offload}     # actor + reference FSDP params on CPU between phases
OPTIMIZER_OFFLOAD=${OPTIMIZER_OFFLOAD:-$d_offload}
VAL_N=${VAL_N:-8}                              # validation samples per prompt: verl reports best@N / mean@N
ATTN_IMPLEMENTATION=${ATTN_IMPLEMENTATION:-auto}  # auto: flash_attention_2 if flash_attn imports, else sdpa
ENTRY=${ENTRY:-vpo.integrations.verl_main}     # verl's main_ppo + per-step vpo reward metrics
PPO_MAX_TOKEN_LEN_PER_GPU=${PPO_MAX_TOKEN_LEN_PER_GPU:-$(( 2 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) ))}
DATA_DIR=${DATA_DIR:-data/verl/$TASK-m$M}
EXPORT_ARGS=${EXPORT_ARGS:-}                   # extra `vpo data export` flags (e.g. --source for musique)
PROJECT=${PROJECT:-vpo}
EXPERIMENT=${EXPERIMENT:-$TASK-$METHOD}
CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT/$EXPERIMENT}
SAVE_FREQ=${SAVE_FREQ:-50}
TEST_FREQ=${TEST_FREQ:-25}
LOGGER=${LOGGER:-"['console']"}
ENABLE_THINKING=${ENABLE_THINKING:-False}      # Qwen3 chat template without thinking (paper)
PYTHON=${PYTHON:-python}

# verl asks transformers for flash_attention_2 unless told otherwise; verl[vllm] does not install
# flash-attn. A broken build (torch/CUDA mismatch) fails this import too, so it gets sdpa.
case "$ATTN_IMPLEMENTATION" in
  auto) if "$PYTHON" -c 'import flash_attn' >/dev/null 2>&1; then ATTN=flash_attention_2; else ATTN=sdpa; fi ;;
  sdpa|flash_attention_2|eager) ATTN=$ATTN_IMPLEMENTATION ;;
  *) echo "run.sh: ATTN_IMPLEMENTATION='$ATTN_IMPLEMENTATION' is not auto, sdpa, flash_attention_2 or eager" >&2; exit 2 ;;
esac

args=(
  "data.train_files=$DATA_DIR/train.parquet"
  "data.val_files=$DATA_DIR/test.parquet"
  "data.prompt_key=prompt"
  "data.train_batch_size=$TRAIN_BATCH_SIZE"
  "data.max_prompt_length=$MAX_PROMPT_LENGTH"
  "data.max_response_length=$MAX_RESPONSE_LENGTH"
  "data.truncation=left"
  "data.filter_overlong_prompts=True"
  "+data.apply_chat_template_kwargs.enable_thinking=$ENABLE_THINKING"
  "actor_rollout_ref.model.path=$MODEL"
  "actor_rollout_ref.model.use_remove_padding=True"
  "actor_rollout_ref.model.enable_gradient_checkpointing=True"
  "+actor_rollout_ref.model.override_config.attn_implementation=$ATTN"
  "actor_rollout_ref.actor.fsdp_config.param_offload=$PARAM_OFFLOAD"
  "actor_rollout_ref.actor.fsdp_config.optimizer_offload=$OPTIMIZER_OFFLOAD"
  "actor_rollout_ref.ref.fsdp_config.param_offload=$PARAM_OFFLOAD"
  "actor_rollout_ref.actor.optim.lr=$LR"
  "actor_rollout_ref.actor.optim.weight_decay=0.01"
  "actor_rollout_ref.actor.optim.lr_scheduler_type=constant"
  "actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE"
  "actor_rollout_ref.actor.use_dynamic_bsz=True"
  "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$PPO_MAX_TOKEN_LEN_PER_GPU"
  "actor_rollout_ref.actor.clip_ratio=$CLIP_RATIO"
  "actor_rollout_ref.actor.loss_agg_mode=token-mean"
  "actor_rollout_ref.actor.entropy_coeff=0"
  "actor_rollout_ref.actor.use_kl_loss=True"
  "actor_rollout_ref.actor.kl_loss_coef=$KL_COEF"
  "actor_rollout_ref.actor.kl_loss_type=low_var_kl"
  "actor_rollout_ref.rollout.name=vllm"
  "actor_rollout_ref.rollout.n=$ROLLOUT_N"
  "actor_rollout_ref.rollout.temperature=$TEMPERATURE"
  "actor_rollout_ref.rollout.top_p=1.0"
  "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
  "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEMORY_UTILIZATION"
  "actor_rollout_ref.rollout.val_kwargs.temperature=0.7"
  "actor_rollout_ref.rollout.val_kwargs.top_p=1.0"
  "actor_rollout_ref.rollout.val_kwargs.do_sample=True"
  "actor_rollout_ref.rollout.val_kwargs.n=$VAL_N"
  "algorithm.adv_estimator=$ADV_ESTIMATOR"
  "algorithm.use_kl_in_reward=False"
  "reward.custom_reward_function.path=pkg://vpo.integrations.verl"
  "reward.custom_reward_function.name=compute_score"
  "+reward.custom_reward_function.reward_kwargs.method=$METHOD"
  "+reward.custom_reward_function.reward_kwargs.m=$M"
  "+reward.custom_reward_function.reward_kwargs.num_weights=$NUM_WEIGHTS"
  "+reward.custom_reward_function.reward_kwargs.alpha=$ALPHA"
  "+reward.custom_reward_function.reward_kwargs.sampler=$SAMPLER"
  "+reward.custom_reward_function.reward_kwargs.seed=$SEED"
  "trainer.total_epochs=$EPOCHS"
  "trainer.n_gpus_per_node=$N_GPUS"
  "trainer.nnodes=$NNODES"
  "trainer.project_name=$PROJECT"
  "trainer.experiment_name=$EXPERIMENT"
  "trainer.default_local_dir=$CKPT_DIR"
  "trainer.save_freq=$SAVE_FREQ"
  "trainer.test_freq=$TEST_FREQ"
  "trainer.logger=$LOGGER"
  "trainer.val_before_train=True"
)
args+=("$@")

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  printf '%s\n' "${args[@]}"
  exit 0
fi

# 1. data: export on first use; a text task without --source stops here (vpo's shipped sample is not data)
if [[ ! -f "$DATA_DIR/train.parquet" || ! -f "$DATA_DIR/test.parquet" ]]; then
  # shellcheck disable=SC2086  # EXPORT_ARGS is a list of flags
  "$PYTHON" -m vpo data export "$TASK" --format verl --answers "$M" --out "$DATA_DIR" --require-source $EXPORT_ARGS
fi
# 2. the data must fill at least one step; prints verl's step count and checkpoint folders
"$PYTHON" -m vpo.integrations.verl_recipe plan "$DATA_DIR" --task "$TASK" --train-batch-size "$TRAIN_BATCH_SIZE" \
  --epochs "$EPOCHS" --save-freq "$SAVE_FREQ" --test-freq "$TEST_FREQ" --ckpt-dir "$CKPT_DIR"

# 3. the estimators come from the verl.plugins entry point: fail now, not on the first step.
if [[ "$ADV_ESTIMATOR" != grpo ]]; then
  "$PYTHON" - "$ADV_ESTIMATOR" <<'EOF'
import sys
import verl  # noqa: F401  (loads the verl.plugins entry points)
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
name = sys.argv[1]
if name not in ADV_ESTIMATOR_REGISTRY:
    sys.exit(f"advantage estimator {name!r} is not registered: is vpo pip-installed in this environment "
             "(pip install -e .) and VERL_USE_EXTERNAL_PLUGINS not 'none'?")
EOF
fi

echo "run.sh: attention $ATTN, param offload $PARAM_OFFLOAD, optimizer offload $OPTIMIZER_OFFLOAD, vLLM memory $GPU_MEMORY_UTILIZATION"
exec "$PYTHON" -m "$ENTRY" "${args[@]}"
