"""Preflight on a scripted host: fake load, clock, sleep and GPU; nothing reads the real machine or sleeps."""
import fcntl
import json
import os

import pytest

from jobs import cli, preflight
from jobs.preflight import GpuState, Inputs, check


class FakeHost:
    """A host whose load and GPU are functions of fake time; sleeping only advances the clock."""

    def __init__(self, load=lambda t: 0.1, gpu=lambda t: None):
        self.t = 0.0
        self.load_at, self.gpu_at = load, gpu

    def inputs(self) -> Inputs:
        return Inputs(load=lambda: self.load_at(self.t), clock=lambda: self.t, sleep=self.sleep,
                      gpu_query=lambda index: self.gpu_at(self.t))

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.t += seconds


def run_check(host: FakeHost, window_s=10, timeout_s=60, sample_every_s=2, **kw):
    return check(window_s, load_threshold=1.0, timeout_s=timeout_s, sample_every_s=sample_every_s,
                 inputs=host.inputs(), **kw)


def test_quiet_immediately_takes_exactly_one_window():
    outcome = run_check(FakeHost())
    assert (outcome.status, outcome.exit_code, outcome.waited_s) == ("quiet", 0, 10)
    assert [t for t, _ in outcome.samples] == [0, 2, 4, 6, 8, 10]
    assert outcome.gpu["present"] is False and outcome.record_status == "quiet"


def test_a_noisy_sample_restarts_the_window():
    host = FakeHost(load=lambda t: 3.0 if t < 6 or t == 12 else 0.2)
    outcome = run_check(host)
    # quiet from 6, noisy again at 12, quiet from 14 for 10 s
    assert (outcome.status, outcome.waited_s) == ("quiet", 24)
    assert (12, 3.0) in outcome.samples


def test_never_quiet_gives_up_at_the_timeout():
    outcome = run_check(FakeHost(load=lambda t: 2.5), timeout_s=15)
    assert (outcome.status, outcome.exit_code, outcome.record_status) == ("noisy", 4, "noisy")
    assert outcome.waited_s == 15 and outcome.samples[-1] == (15, 2.5)
    assert "never quiet" in outcome.reason


def test_foreign_gpu_process_is_contended_at_once():
    host = FakeHost(gpu=lambda t: GpuState(pids=[os.getpid(), 4242], utilization_pct=0))
    outcome = run_check(host)
    assert (outcome.status, outcome.exit_code, outcome.waited_s) == ("contended", 3, 0)
    assert outcome.gpu["foreign_pids"] == [4242] and outcome.record_status == "noisy"


def test_our_own_gpu_process_is_not_foreign():
    host = FakeHost(gpu=lambda t: GpuState(pids=[os.getpid()], utilization_pct=0))
    assert run_check(host).status == "quiet"


def test_busy_gpu_waits_for_utilization_to_drop():
    host = FakeHost(gpu=lambda t: GpuState(pids=[], utilization_pct=95 if t < 20 else 3))
    outcome = run_check(host)
    assert (outcome.status, outcome.waited_s) == ("quiet", 30)
    assert outcome.gpu == {"index": 0, "present": True, "utilization_pct": 3, "foreign_pids": []}


def test_gpu_busy_until_the_timeout_is_noisy():
    host = FakeHost(gpu=lambda t: GpuState(pids=[], utilization_pct=50))
    assert run_check(host, timeout_s=20, max_gpu_util=10).exit_code == 4


def test_every_outcome_records_the_thresholds_it_was_judged_with():
    quiet = run_check(FakeHost(), max_gpu_util=50)
    assert quiet.thresholds == {"window_s": 10, "load_threshold": 1.0, "max_gpu_util": 50, "sample_every_s": 2}
    assert run_check(FakeHost(load=lambda t: 2.5), timeout_s=4).thresholds["load_threshold"] == 1.0   # noisy
    contended = run_check(FakeHost(gpu=lambda t: GpuState(pids=[4242], utilization_pct=0)))
    assert contended.thresholds["window_s"] == 10
    # Without an explicit GPU ceiling, the default's is the one recorded.
    assert check(**preflight.DEFAULTS, inputs=FakeHost().inputs()).thresholds["max_gpu_util"] == 10


def test_outcome_as_dict_is_json_for_the_run_record():
    stored = json.loads(json.dumps(run_check(FakeHost(), window_s=0).as_dict()))
    assert stored["status"] == "quiet" and stored["exit_code"] == 0 and stored["samples"] == [[0, 0.1]]


@pytest.mark.parametrize("bad", [dict(window_s=-1), dict(sample_every_s=0), dict(timeout_s=-5)])
def test_bad_arguments(bad):
    with pytest.raises(ValueError):
        run_check(FakeHost(), **bad)


@pytest.fixture
def roadgate(monkeypatch, tmp_path, simulated_gpus):
    """`roadgate preflight` on a scripted host of 3 GPUs; returns (main, host) so a test can script the host."""
    monkeypatch.setattr(cli, "COMMANDS", ["jobs.preflight"])
    monkeypatch.setenv("ROADGATE_GPU_LEASE_DIR", str(tmp_path))
    simulated_gpus(3)
    host = FakeHost()
    monkeypatch.setattr(preflight, "machine", host.inputs)
    return cli.main, host


def test_cli_quiet_prints_json_and_exits_0(roadgate, capsys):
    main, _ = roadgate
    assert main(["preflight", "--window-s", "4", "--sample-every-s", "1"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert (outcome["status"], outcome["waited_s"], len(outcome["samples"])) == ("quiet", 4, 5)
    assert outcome["thresholds"] == {"window_s": 4, "load_threshold": 1.0, "max_gpu_util": 10, "sample_every_s": 1}


def test_cli_never_quiet_exits_4(roadgate):
    main, host = roadgate
    host.load_at = lambda t: 8.0
    assert main(["preflight", "--timeout-s", "30", "--load-threshold", "2"]) == 4


def test_cli_foreign_gpu_process_exits_3(roadgate):
    main, host = roadgate
    host.gpu_at = lambda t: GpuState(pids=[4242], utilization_pct=0)
    assert main(["preflight", "--gpu", "1"]) == 3


def test_cli_checks_the_gpu_it_leased_and_a_leased_one_exits_3(roadgate, tmp_path, capsys):
    main, host = roadgate
    checked = []
    host.gpu_at = lambda t: checked.append(os.environ["CUDA_VISIBLE_DEVICES"])   # what CUDA would see; no NVML reading
    with open(tmp_path / "gpu-2.lock", "a+") as task:   # a running task's lease
        fcntl.flock(task, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["preflight", "--gpu", "2"]) == 3
        assert "GPU 2 is leased by" in json.loads(capsys.readouterr().out)["reason"] and checked == []
    assert main(["preflight", "--gpu", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["index"] == 2 and set(checked) == {"2"}


def test_cli_leases_the_lowest_free_gpu(roadgate, capsys):
    main, _ = roadgate
    assert main(["preflight", "--window-s", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["index"] == 0


def test_cli_bad_input_exits_2(roadgate, capsys):
    main, _ = roadgate
    assert main(["preflight", "--sample-every-s", "0"]) == 2
    assert capsys.readouterr().err.startswith("roadgate preflight: error:")
    assert main(["preflight", "--gpu", "3"]) == 2   # the host has GPUs 0-2
    assert "GPU 3 is not one this process can use" in capsys.readouterr().err


def test_cli_help_documents_the_exit_codes(roadgate, capsys):
    main, _ = roadgate
    with pytest.raises(SystemExit):
        main(["preflight", "--help"])
    assert "3 contended" in capsys.readouterr().out
