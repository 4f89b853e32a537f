# Two entry points on a fresh machine:
#   make demo   set everything up, then run the main job on the embedded defaults
#   make test   set everything up, then run the test suite (GPU tests deselected on CPU)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch lies on CPU machines' disk; a GPU host passes its own spec.
TORCH_SPEC ?= torch==2.13.0
DATA ?= data

.PHONY: setup system-packages demo demo-batch test test-gpu cluster cluster-down
setup: $(VENV)/.installed

# Debian packages: Chromium for the dashboard test, cmake and a C++ compiler for
# llama.cpp (built from source by pip), PostgreSQL's server binaries and redis-server for the
# private servers of the store tests and `make cluster` (cluster/servers.py; no server needs
# to run). Installed when missing if we are root.
SYSTEM_COMMANDS := chromium cmake g++ redis-server
system-packages:
	@missing=""; for c in $(SYSTEM_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$$missing postgresql"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
		echo "setup: apt-get installing$$missing ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "warning: missing$$missing; install them with apt-get (the dashboard test skips without chromium)"; fi

# Five pip steps that take minutes, so each says what it does (pip's progress on a terminal).
$(VENV)/.installed: pyproject.toml | system-packages
	@PYTHON="$(PYTHON)" VENV="$(VENV)" TORCH_SPEC="$(TORCH_SPEC)" .ci/setup-venv.sh
	@touch $@

# Airflow runs the DAGs of dags/ against a SQLite metadata DB under .airflow/.
AIRFLOW := AIRFLOW_HOME=$(CURDIR)/.airflow AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False $(BIN)/airflow

# The nightly waits for a quiet host first (jobs/data/nightly.yaml); on a busy one, e.g.
# make demo NIGHTLY_CONF='{"preflight": {"load_threshold": 64}}'
NIGHTLY_CONF ?= {}
# `dags test` runs no scheduler, so nothing consumes the nightly's results asset event:
# gate_evaluation (evaluate the gates, print their status, render the dashboard) runs after it.
demo: setup
	@echo "demo: the nightly first waits for a quiet host (below 1 busy CPU for 30 s; it says what it measured"
	@echo "      at every poke, and waits up to 6 h). On a busy machine start anyway, stored but never evidence:"
	@echo "      make demo NIGHTLY_CONF='{\"preflight\": {\"load_threshold\": 64}}'"
	$(AIRFLOW) db migrate > /dev/null
	$(AIRFLOW) dags test nightly_benchmark --conf '$(NIGHTLY_CONF)'
	$(AIRFLOW) dags test gate_evaluation

BATCH_CONF ?= {"input_uri": "jobs/data/chat_prompts.jsonl", "output_uri": "$(DATA)/example_batch", "num_shards": 2, "sampling": {"max_tokens": 64}}
demo-batch: setup
	$(AIRFLOW) db migrate > /dev/null
	$(AIRFLOW) dags test batch_generation --conf '$(BATCH_CONF)'
	$(BIN)/roadgate batch show $(DATA)/example_batch

test: setup
	$(BIN)/python -m pytest -q -m "not gpu" $(PYTEST_ARGS)

test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu $(PYTEST_ARGS)

# Airflow 3 with the CeleryExecutor on this machine, as docker/compose.yaml deploys it and from
# its settings (docker/airflow.env): private PostgreSQL and Redis, api-server, scheduler,
# dag-processor, triggerer, a default-queue and a `gpu`-queue worker; state, data and logs in
# .cluster/. CLUSTER_ARGS='--set KEY=VALUE' lays a setting over the file's.
CLUSTER_ARGS ?=
cluster: setup
	$(BIN)/python -m cluster up $(CLUSTER_ARGS)

cluster-down:
	$(BIN)/python -m cluster down
