#!/usr/bin/env bash
# Session 48's first call, carrying .whl and the GGUF's first quarter (.model/part-00), on
# whichever card comes. On an H200: s46a.sh's H200 branch (the suite's dummy-weight steps that
# feed roadmap rows; the GGUF's first quarter left in /tmp/model for the calls after). On an
# H100: s48b.sh (every sampling GPU test twice, after 8e7fcf8 and d9daf1b; then every GPU
# test and memcheck).
if nvidia-smi -L | grep -q H200; then
  exec bash docs/performance-evidence/2026-12-07-s46-issue20/s46a.sh
else
  exec bash docs/performance-evidence/2026-12-08-s48-issue20/s48b.sh
fi
