#!/usr/bin/env bash
# Session 48, after calls 9-13 (the H100 checks), with ~490 s of device time left, carrying .whl
# and .model/part-00: where an H200 comes, s46a.sh's H200 branch (the suite's dummy-weight steps
# that feed roadmap rows: decode-step, decode-step-b1, prefill, step-trace; ~200 s on an H100 in
# session 42). Where an H100 comes, nothing: those checks have run, and the rows are the H200's.
if nvidia-smi -L | grep -q H200; then
  exec bash docs/performance-evidence/2026-12-07-s46-issue20/s46a.sh
fi
nvidia-smi -L
