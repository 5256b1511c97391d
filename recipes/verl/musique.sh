#!/usr/bin/env bash
# musique on verl: recipes/verl/musique.sh METHOD [HYDRA_OVERRIDE ...]   (METHOD: grpo | vpo | multi_rlvr | max_at_k)
# Thin wrapper: every default and override is documented in run.sh and README.md.
exec "$(dirname "$0")/run.sh" musique "$@"
