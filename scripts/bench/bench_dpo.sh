#!/usr/bin/env bash
# DPO training speed, trlx against TRL's DPOTrainer: scripts/bench/bench_trainers.sh
# with TRAINERS=dpo (same environment: THREADS, STEPS, REPEATS, SEQ=long for
# ~1000-token rows, MODES, BUILD_DIR, NO_BUILD). Peak memory where the logits
# matter: scripts/bench/bench_dpo_memory.sh.
TRAINERS=dpo exec "$(dirname "$0")/bench_trainers.sh" "$@"
