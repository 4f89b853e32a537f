#!/usr/bin/env bash
# Session 45, call 9 (run inline as this command, kept here as the record): where 64 x 1,000's
# and 1 x 8,000's GPU time goes with the packed SiLU epilogue and the tiles chosen per step.
# prefill.py warms ours up on the measured shapes and empties its prefix cache before every
# repetition; --profile takes torch.profiler's kernel table of one more repetition.
source benchmarks/device_env.sh; export ROADGATE_TEST_MODEL=dummy:smollm2-135m; echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; timeout 200 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes 64x1000 1x8000 > $L/prefill-profile.log 2>&1; echo rc=$?; grep -E "^prefill |ms of GPU|^  " $L/prefill-profile.log | head -40
