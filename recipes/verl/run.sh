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
# Untested on GPU in the session that wrote it (no device was available); its Hydra
# overrides are checked against verl's config by tests/test_verl_integration.py.
set -euo pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 2 ]] || usage
TASK=$1; METHOD=$2; shift 2

# ---- per-task defaults (model and epochs: SPEC sections 6-7) ---------------------------
case "$TASK" in
  maze)     d_model=Qwen/Qwen3-4B;                d_epochs=2;  d_prompt=1024; d_resp=1024; d_tp=1 ;;
  musique)  d_model=Qwen/Qwen3-1.7B;              d_epochs=1;  d_prompt=4096; d_resp=1024; d_tp=1 ;;
  eureqa)   d_model=Qwen/Qwen3-8B;                d_epochs=6;  d_prompt=2048; d_resp=1024; d_tp=2 ;;
  toolcall) d_model=Qwen/Qwen3-1.7B;              d_epochs=20; d_prompt=2048; d_resp=1024; d_tp=1 ;;
  code)     d_model=Qwen/Qwen2.5-Coder-7B-Instruct; d_epochs=1; d_prompt=2048; d_resp=2048; d_tp=2 ;;
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

PYTHON=${PYTHON:-python}
# The estimators come from the verl.plugins entry point: fail now, not on the first step.
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

if [[ ! -f "$DATA_DIR/train.parquet" || ! -f "$DATA_DIR/test.parquet" ]]; then
  # shellcheck disable=SC2086  # EXPORT_ARGS is a list of flags
  vpo data export "$TASK" --format verl --answers "$M" --out "$DATA_DIR" $EXPORT_ARGS
fi

exec "$PYTHON" -m verl.trainer.main_ppo "${args[@]}"
