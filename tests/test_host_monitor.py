"""The host monitor on scripted readings: nothing here reads the real /proc or NVML."""
from __future__ import annotations

import os
import time

import pytest

from jobs import host_monitor, preflight
from jobs.host_monitor import Inputs, Sampler, process_trees
from jobs.preflight import GpuState
from jobs.workloads import get_workload
from tests.host_support import steady_host


class Readings:
    """Scripted /proc readings on 2 CPUs, ((busy, total), our tree's ticks, its pids) in turn, and
    the siblings' trees' ticks at the start and at each sample taken; the test sets the clock."""

    def __init__(self, readings: list[tuple[tuple[int, int] | None, int, set[int]]], gpu: GpuState | None = None,
                 siblings: list[dict[int, int]] | None = None):
        self.readings, self.gpu, self.now = iter(readings), gpu, 0.0
        self.siblings = iter(siblings or [])

    def inputs(self) -> Inputs:
        return Inputs(host_jiffies=self.host_jiffies, tree=lambda: self.tree, gpu_query=lambda: self.gpu,
                      clock=lambda: self.now, cpus=2, siblings=lambda: next(self.siblings, {}))

    def host_jiffies(self) -> tuple[int, int] | None:
        host, own, pids = next(self.readings)
        self.tree = own, pids
        return host


def sample_each_second(readings: Readings, times: int) -> Sampler:
    sampler = Sampler(readings.inputs())
    for _ in range(times):
        readings.now += 1
        sampler.sample()
    return sampler


def test_foreign_cpus_are_the_hosts_busy_time_less_our_trees():
    sampler = sample_each_second(Readings([
        ((1000, 4000), 300, {1}),
        ((1150, 4200), 350, {1}),   # 100 ticks a CPU; 150 busy, 50 of them ours: 1.0 foreign CPU
        ((1151, 4201), 350, {1}),   # under a tick a CPU: tells nothing, folded into the next
        ((1160, 4400), 410, {1}),   # busy 10, ours 60: a reading skew, shown as 0 but summed as -50
        ((1260, 4600), 420, {1}),   # 100 busy, 10 ours: 0.9
    ]), 4)
    assert [(t, cpus) for t, cpus, *_ in sampler.samples] == [(1, 1.0), (3, 0.0), (4, 0.9)]
    summary = sampler.summary()
    # Time-weighted, over the 300 ticks each CPU had: (100 - 50 + 90) / 300.
    assert (summary["foreign_cpus_max"], summary["foreign_cpus_mean"]) == (1.0, pytest.approx(0.467, abs=1e-3))
    assert summary["foreign_gpu_pids"] == [] and summary["gpu_present"] is False
    assert summary["sibling_cpus_mean"] == 0


def test_siblings_cpu_is_recorded_apart_from_foreign_each_counted_from_its_first_sighting():
    sampler = sample_each_second(Readings([
        ((1000, 4000), 300, {1}),
        ((1250, 4200), 350, {1}),   # 250 busy: 50 ours, 100 sibling 7's: 1.0 foreign CPU, 1.0 sibling
        ((1400, 4400), 400, {1}),   # 150 busy: 50 ours, 50 of 7; 8 is new (its 1000 ticks are its past): 0.5, 0.5
        ((1600, 4600), 450, {1}),   # 200 busy: 50 ours, 100 of 8; 7 gone, its CPU since read as foreign: 0.5, 1.0
    ], siblings=[{7: 50}, {7: 150}, {7: 200, 8: 1000}, {8: 1100}]), 3)
    assert [(t, cpus, sibling) for t, cpus, _, _, sibling in sampler.samples] == [(1, 1.0, 1.0), (2, 0.5, 0.5),
                                                                                  (3, 0.5, 1.0)]
    summary = sampler.summary()
    assert (summary["foreign_cpus_mean"], summary["sibling_cpus_mean"]) == (pytest.approx(0.667, abs=1e-3),
                                                                          pytest.approx(0.833, abs=1e-3))


def test_gpu_processes_outside_our_tree_are_foreign_and_utilization_is_recorded():
    gpu = GpuState(pids=[1, 2, 4242], utilization_pct=97.0)
    sampler = sample_each_second(Readings([((0, 0), 0, {1, 2}), ((100, 200), 100, {1, 2})], gpu), 1)
    assert sampler.samples == [(1, 0.0, [4242], 97.0, 0.0)]
    assert sampler.summary()["foreign_gpu_pids"] == [4242] and sampler.summary()["gpu_present"]


def test_no_proc_gives_no_samples():
    sampler = sample_each_second(Readings([(None, 0, {1}), (None, 0, {1})]), 1)
    assert sampler.summary() == {"samples": [], "foreign_cpus_max": None, "foreign_cpus_mean": None,
                                 "sibling_cpus_mean": None, "foreign_gpu_pids": [], "gpu_present": False}


def write_stat(proc, pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0):
    (proc / str(pid)).mkdir()
    # The fields of proc(5) after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority ...
    (proc / str(pid) / "stat").write_text(
        f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 0 10 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0\n")


def test_process_trees_sum_each_roots_descendants_and_the_children_they_reaped(tmp_path):
    write_stat(tmp_path, 1, "init", 0, 5, 5)
    write_stat(tmp_path, 10, "python (bench) x", 1, 100, 20, cutime=7, cstime=3)   # comm with spaces, parens
    write_stat(tmp_path, 11, "worker", 10, 40, 2)
    write_stat(tmp_path, 12, "compile", 11, 8, 1)
    write_stat(tmp_path, 20, "postgres", 1, 900, 90)
    (tmp_path / "self").mkdir()   # not a pid
    assert process_trees([10, 20, 99], tmp_path) == {10: (100 + 20 + 7 + 3 + 40 + 2 + 8 + 1, {10, 11, 12}),
                                                     20: (900 + 90, {20})}   # 99 is gone: nothing of it to count


def test_watch_samples_in_the_background_and_once_more_at_the_end():
    with host_monitor.watch(every_s=0.02, inputs=steady_host(foreign_cpus=1.5)) as sampler:
        time.sleep(0.2)
    summary = sampler.summary()
    assert len(summary["samples"]) >= 3
    assert summary["foreign_cpus_mean"] == pytest.approx(1.5, abs=0.01)
    assert summary["foreign_cpus_max"] == pytest.approx(1.5, abs=0.05)
    # A measurement shorter than one interval still has its sample: the one taken at the end.
    with host_monitor.watch(every_s=60, inputs=steady_host(foreign_cpus=0.5)) as sampler:
        time.sleep(0.05)
    assert len(sampler.samples) == 1 and sampler.summary()["foreign_cpus_mean"] == pytest.approx(0.5, abs=0.01)


@pytest.mark.slow
def test_run_engine_records_the_host_during_the_engines_run(tmp_path):
    from jobs.bench import run_engine
    from jobs.validity import run_verdict
    spec = tmp_path / "workloads.yaml"
    spec.write_text("""
workloads:
  tiny:
    version: 1
    prompts: {source: random_tokens, count: 2, input_len: [8, 8]}
    output_len: [4, 4]
    sampling: {temperature: 0, ignore_eos: true}
    seed: 1
    hardware: any
    validity: {min_duration_s: 0, min_requests: 2, max_foreign_cpus: 0.5}
""")
    workload = get_workload("tiny", spec)
    gpu = GpuState(pids=[os.getpid()], utilization_pct=40.0)
    result = run_engine(workload, "ours", "dummy:smollm2-135m", "torch",
                        host_inputs=steady_host(foreign_cpus=1.2, gpu=gpu))
    assert result.host["foreign_cpus_mean"] == pytest.approx(1.2, abs=0.01) and result.host["samples"]
    assert result.host["gpu_present"] and result.host["foreign_gpu_pids"] == []   # our own process is not foreign
    verdict = run_verdict(workload, {"ours": result.metrics}, "quiet", preflight_thresholds=preflight.DEFAULTS,
                          host_by_engine={"ours": result.host})
    assert not verdict["valid"] and verdict["reasons"][0].startswith(
        "ours: noisy during measurement (foreign CPUs mean 1.2")
