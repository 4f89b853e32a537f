#!/usr/bin/env bash
# On the GPU host: GPU tests, a memcheck run, and the benchmarks, in one go.
# Logs go under $OUT (default ./out), and so does the results store the benches and
# micro-benchmarks record into ($OUT/data, unless ROADGATE_DATA_DIR names another); a
# short table is printed last. Runs name the code by its content hash (jobs/code_identity.py),
# so a copied tree without .git is identified exactly.
#
#   benchmarks/gpu_suite.sh [MODEL_GGUF]      # default /tmp/model/smollm2.gguf
#   SUITE_SKIP="tests memcheck" benchmarks/gpu_suite.sh   # run only the rest
#   SUITE_ONLY="decode-step bench-nano-bench" ...         # run only these steps
#   SUITE_TESTS=tests/gpu/test_kernels.py ...             # the tests step's paths (default tests/gpu)
# Everything under $OUT (logs, stores, JSON) ends up in one archive, $OUT/suite.tgz: the
# device machine sends back only a few files. A store elsewhere (ROADGATE_DATA_DIR) is copied
# into it as store/: what the benches recorded comes back with the logs, wherever it was.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export ROADGATE_TEST_MODEL=${1:-/tmp/model/smollm2.gguf} ROADGATE_REPORT_DIR=$OUT PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD ROADGATE_DATA_DIR=${ROADGATE_DATA_DIR:-$OUT/data}
SKIP=${SUITE_SKIP:-}
summary=()
step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember the last line
  local name=$1; shift
  case " $SKIP " in *" $name "*) return;; esac
  [ -z "${SUITE_ONLY:-}" ] || case " $SUITE_ONLY " in *" $name "*) ;; *) return;; esac
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$OUT/$name.log")")")
}

step tests python3 -m pytest -q -rs -m gpu ${SUITE_TESTS:-tests/gpu} -p no:cacheprovider -s   # -rs: each skip with its reason
# Token ids (dummy weights have no tokenizer): a 6,000-token prompt runs the 8,192-row prefill
# graph (gemm_tma's tiles, the tall attention tiles), the short ones the decode kernels.
step memcheck compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('$ROADGATE_TEST_MODEL', backend='cuda', kv_cache_tokens=16384, max_num_seqs=8)
prompts = [[(31 * j) % 20000 + 30 for j in range(6000)]] + [[(7 * j + n) % 20000 + 30 for j in range(40 + n)] for n in range(5)]
outs = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', [len(o.token_ids) for o in outs])"
step kernels python3 benchmarks/kernel_bench.py
step decode-step python3 benchmarks/decode_step.py --profile
step decode-step-b1 python3 benchmarks/decode_step.py --batch 1 --context 256
step host-profile python3 benchmarks/host_profile.py --workload fixed-256x128x128
step launch-cost python3 benchmarks/launch_cost.py
step prefill python3 benchmarks/prefill.py --preflight   # its TTFT holds host time: stored with the host quiet before and watched throughout
step step-trace python3 benchmarks/step_trace.py
# HF runs beside ours where the targets are ratios to it, in both its configurations on
# fixed-256 (eager, and its fast path: static cache + torch.compile; eager stays the
# agreement reference); nano-bench's target is absolute (and HF needs minutes for it).
bench() {  # bench WORKLOAD ENGINE_ARGS...
  local w=$1; shift
  step "bench-$w" python3 -m jobs.cli bench --workload "$w" --model "$ROADGATE_TEST_MODEL" \
      --engine ours --backend cuda "$@" --preflight --json "$OUT/bench-$w.json"
}
bench latency-b1 --engine hf --device cuda
bench fixed-256x128x128 --engine hf-static --engine hf --device cuda
bench nano-bench
bench batch-longtail
# nano-bench on another architecture: its workload states the model (no --model).
step bench-nano-bench-llama-1b python3 -m jobs.cli bench --workload nano-bench-llama-1b --engine ours \
    --backend cuda --preflight --json "$OUT/bench-nano-bench-llama-1b.json"
step ncu-decode ncu --section SpeedOfLight --section Occupancy --section LaunchStats -k regex:attn_decode_bf16 -c 1 \
    python3 benchmarks/kernel_bench.py --only attention

echo; echo "== logs in $OUT/suite.tgz"
for w in latency-b1 fixed-256x128x128 nano-bench batch-longtail nano-bench-llama-1b; do [ -f "$OUT/bench-$w.log" ] && tail -n 3 "$OUT/bench-$w.log"; done
grep -h "ERROR SUMMARY" "$OUT/memcheck.log" 2>/dev/null
printf '%s\n' "${summary[@]}"
if [ -d "$ROADGATE_DATA_DIR" ] && [ "$(cd "$ROADGATE_DATA_DIR" && pwd)" != "$(cd "$OUT" && pwd)/data" ]; then
  cp -r "$ROADGATE_DATA_DIR" "$OUT/store"
fi
tar czf /tmp/suite.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/suite.tgz "$OUT/"
