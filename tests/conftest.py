"""Shared fixtures: the real SmolLM2-135M-Instruct, loaded once per session."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHAT_PROMPTS = REPO / "jobs" / "data" / "chat_prompts.jsonl"
# ROADGATE_TEST_MODEL points at a GGUF where the PyPI package is not installed (the GPU host).
MODEL = os.environ.get("ROADGATE_TEST_MODEL", "smollm2-135m-instruct")


@pytest.fixture(autouse=True)
def log_handlers_write_to_this_tests_streams():
    """Airflow's dag.test() leaves log handlers on the streams pytest captured for the test that
    ran it; a later test's log record then fails on the closed stream ("--- Logging error ---"
    in its stderr). Such handlers write to this test's stderr instead."""
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]
    for handler in {h for lg in loggers for h in lg.handlers}:
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            handler.stream = sys.stderr   # not setStream: it would flush the closed one


def chat_messages(n: int) -> list[list[dict]]:
    rows = [json.loads(line) for line in CHAT_PROMPTS.read_text().splitlines()[:n]]
    return [r["messages"] for r in rows]


@pytest.fixture(scope="session", autouse=True)
def gpu_lease_dir(tmp_path_factory) -> Path:
    """GPU leases (jobs/gpu_lease.py) in this session's own directory, inherited by the
    processes tests start: the host's is shared with every other user's tasks and test runs."""
    lease_dir = tmp_path_factory.mktemp("gpu-leases")
    os.environ["ROADGATE_GPU_LEASE_DIR"] = str(lease_dir)
    return lease_dir


@pytest.fixture
def simulated_gpus(monkeypatch):
    """simulated_gpus(n): this process on a host of n GPUs (ROADGATE_GPU_COUNT) that has leased
    none yet; what a lease sets (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER) is undone afterwards."""
    def simulate(n: int) -> None:
        monkeypatch.setenv("ROADGATE_GPU_COUNT", str(n))
        for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
            monkeypatch.setenv(name, "")   # recorded as it was, so a lease's value is undone
            monkeypatch.delenv(name)
    return simulate


@pytest.fixture(scope="session")
def model_path() -> Path:
    from engine.model_source import alias_path
    return alias_path(MODEL)


@pytest.fixture(scope="session")
def llm():
    """Our engine on the torch backend, fp32, CPU, default cache."""
    from engine import LLM
    return LLM(MODEL, backend="torch", dtype="float32", seed=0)


@pytest.fixture(scope="session")
def hf(model_path):
    """HF transformers' own load of the same GGUF (fp32, CPU): (model, tokenizer)."""
    transformers = pytest.importorskip("transformers")
    import torch
    tok = transformers.AutoTokenizer.from_pretrained(model_path.parent, gguf_file=model_path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_path.parent, gguf_file=model_path.name, dtype=torch.float32)
    model.eval()
    return model, tok


@pytest.fixture
def default_store(tmp_path, monkeypatch):
    """An empty, migrated store at the embedded default location (SQLite and Parquet
    under tmp_path/data), where jobs record when given no URL."""
    from jobs.store import open_store, upgrade
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("ROADGATE_DB_URL", raising=False)
    monkeypatch.delenv("ROADGATE_PARQUET_ROOT", raising=False)
    store = open_store()
    upgrade(store.engine)
    yield store
    store.engine.dispose()
