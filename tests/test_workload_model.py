"""A workload that states its model (a goal on one architecture): bench and the nightly run it on
that model, a bench asking for another is refused, and the run records the model that ran."""
from __future__ import annotations

import pytest
import yaml

from jobs import nightly
from jobs.cli import main
from jobs.errors import WorkloadError
from jobs.store.models import Run
from jobs.workloads import get_workload, load_workloads
from tests.host_support import steady_host
from tests.store_support import TINY_WORKLOAD
from tests.test_preflight import FakeHost
from tests.test_workloads import requests_digest
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)


def test_the_shipped_llama_workload_is_nano_bench_on_the_llama_shape():
    llama, nano = get_workload("nano-bench-llama-1b"), get_workload("nano-bench")
    assert (llama.model, nano.model) == ("dummy:llama-3.2-1b", None)
    assert requests_digest("nano-bench-llama-1b") == requests_digest("nano-bench")   # the same requests


def test_the_stated_model_is_the_default_and_no_other_is_taken():
    llama, nano = get_workload("nano-bench-llama-1b"), get_workload("nano-bench")
    assert llama.model_for(None, "smollm2-135m-instruct") == "dummy:llama-3.2-1b"
    assert llama.model_for("dummy:llama-3.2-1b", "smollm2-135m-instruct") == "dummy:llama-3.2-1b"
    assert nano.model_for(None, "smollm2-135m-instruct") == "smollm2-135m-instruct"
    assert nano.model_for("dummy:llama-3.2-1b", "smollm2-135m-instruct") == "dummy:llama-3.2-1b"
    with pytest.raises(WorkloadError, match="workload 'nano-bench-llama-1b' is stated for model "
                                            "'dummy:llama-3.2-1b'; model 'smollm2-135m-instruct' contradicts it"):
        llama.model_for("smollm2-135m-instruct", "smollm2-135m-instruct")


@pytest.mark.parametrize("model", [3, "", "  ", ["dummy:llama-3.2-1b"]])
def test_a_bad_model_field_is_one_line_naming_it(tmp_path, model):
    spec = yaml.safe_load(TINY_WORKLOAD)
    spec["workloads"]["tiny"]["model"] = model
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(WorkloadError) as error:
        load_workloads(path)
    assert str(error.value) == f"workload 'tiny': field 'model' must be a model name (as --model takes it), " \
                               f"got {model!r}"


def test_bench_refuses_another_model_for_it_in_one_line_and_runs_nothing(default_store, capsys):
    argv = ["bench", "--workload", "nano-bench-llama-1b", "--engine", "ours", "--model", "dummy:smollm2-135m"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["roadgate bench: error: workload 'nano-bench-llama-1b' is stated for model "
                   "'dummy:llama-3.2-1b'; model 'dummy:smollm2-135m' contradicts it"]
    with default_store.session() as session:
        assert session.query(Run).count() == 0


@pytest.fixture
def pinned_workloads(tmp_path, tiny_model, monkeypatch):  # noqa: F811
    """The tiny workload twice: as it is, and stating the tiny model as its own."""
    spec = yaml.safe_load(TINY_WORKLOAD)
    spec["workloads"]["tiny-pinned"] = {**spec["workloads"]["tiny"], "model": str(tiny_model)}
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("ROADGATE_WORKLOADS_FILE", str(path))
    return tiny_model


def test_bench_runs_it_on_its_model_when_none_is_named(default_store, pinned_workloads):
    assert main(["bench", "--workload", "tiny-pinned", "--engine", "ours", "--backend", "torch"]) == 0
    with default_store.session() as session:
        (run,) = session.query(Run).all()
        assert (run.workload, run.config["model"]) == ("tiny-pinned", str(pinned_workloads))


def test_the_nightly_runs_it_on_its_model_not_the_nightlys(default_store, pinned_workloads, tmp_path, monkeypatch):
    monkeypatch.setenv("ROADGATE_GPU_COUNT", "0")   # a host without GPUs: its one slot is leased
    config = nightly.resolve_config({"engines": ["ours"], "workloads": ["tiny-pinned"]}, gpu_present=lambda: False)
    assert config.model != str(pinned_workloads)
    cell = nightly.run_bench_cell({"engine": "ours", "workload": "tiny-pinned"}, config, tmp_path / "staging",
                                  host_inputs=steady_host(0.0), preflight_inputs=FakeHost().inputs())
    (run_id,) = nightly.land_bench_results([cell], config, None, "nightly_benchmark", "r1", default_store)
    with default_store.session() as session:
        run = session.get(Run, run_id)
        assert run.config["model"] == str(pinned_workloads)
