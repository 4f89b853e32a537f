#!/usr/bin/env bash
# Session 47, carrying .whl and the GGUF's first quarter (.model/part-00), on whichever card
# comes. Call 6 (s47b.sh) failed the new tie test in 4-5 of its 6 cases each round, while a CPU
# emulation of the kernel's cut and draw agrees with the reference row for row: sample_ties.py
# prints, for the rows where the kernel and the reference part, what each computed. Then, on an
# H200 only, s46a.sh's H200 branch (the suite's dummy-weight steps that feed roadmap rows).
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
timeout 200 python3 docs/performance-evidence/2026-12-07-s47-issue20/sample_ties.py > $L/sample-ties.log 2>&1
echo "sample_ties rc=$?"; grep -E "rows differ|Error" $L/sample-ties.log; grep -m 12 -E "^  " $L/sample-ties.log
if grep -q H200 $L/gpu.txt; then bash docs/performance-evidence/2026-12-07-s46-issue20/s46a.sh; else pack_out; fi
