#!/usr/bin/env bash
# Session 47's first call, carrying .whl and the GGUF's first quarter (.model/part-00), on
# whichever card comes. On an H200: s46a.sh's H200 branch (the suite's dummy-weight steps that
# feed roadmap rows; the GGUF's first quarter left in /tmp/model for the calls after). On an
# H100: s46c.sh (the collector test with the pause and without it, then every GPU test and
# memcheck on dummy weights: the gemm_tma kernels after 2cbaf08).
S=docs/performance-evidence/2026-12-07-s46-issue20
if nvidia-smi -L | grep -q H200; then exec bash $S/s46a.sh; else exec bash $S/s46c.sh; fi
