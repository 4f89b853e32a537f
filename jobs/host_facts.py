"""What a run ran on: the host, its CPU and GPU, and the code (RunRecord's fields of those names).

Every job that records a run asks here: bench, nightly, the batch shards, the micro-benchmarks;
the dashboard asks for this host's hardware class.
"""
from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import subprocess
from pathlib import Path

VECTOR_ISAS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "asimd")   # widest first


def cpu_name(cpuinfo: str | None = None) -> str:
    """The host CPU as results depend on it: model, logical cores, widest vector ISA
    (e.g. "AMD EPYC 7763 64-Core Processor x2 avx2"). Two 2-core EPYC hosts of this
    project, one with AVX-512 BF16 and one with AVX2 only, ran the CPU workloads 3.5x
    apart. A model name that names no model ("AMD EPYC", as a hypervisor may call every
    EPYC) gets the CPU's family and model numbers: two 2-core AVX2-only hosts named so,
    Zen 1 (family 23 model 1) and Zen 2 (model 49), ran the same 4-bit workload at 1.14x
    and 2.03x llama.cpp's speed. `cpuinfo`: /proc/cpuinfo's text, read when not given."""
    model, isa = _cpu_model_and_isa(cpuinfo)
    return " ".join(filter(None, (model, f"x{os.cpu_count()}", isa)))


def cpu_class() -> str:
    """The hardware class of a CPU host, as CPU roadmap rows name it: "cpu-<widest vector ISA>"."""
    return "cpu-" + (_cpu_model_and_isa()[1] or "unknown")


def _cpu_model_and_isa(cpuinfo: str | None = None) -> tuple[str, str | None]:
    if cpuinfo is None:
        cpuinfo = ""
        with contextlib.suppress(OSError):
            cpuinfo = Path("/proc/cpuinfo").read_text()
    fields: dict[str, str] = {}   # the first processor's
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or platform.machine()
    if not re.search(r"\d", model) and fields.get("cpu family") and fields.get("model"):
        model += f" family {fields['cpu family']} model {fields['model']}"
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return model, next((f for f in VECTOR_ISAS if f in flags), None)


# A GPU model in its name: letters then digits ("H200", "A100", "L40S", "GH200"); a memory
# type ("HBM3") or a form factor ("SXM4") is not one.
_GPU_MODEL = re.compile(r"(?!HBM|SXM)[A-Z]+[0-9]+[A-Z]?")


def hardware_class(gpu_name: str | None = None) -> str:
    """This host's hardware class as roadmap rows name it: the GPU's model ("H200" of "NVIDIA
    H200", "H100" of "NVIDIA H100 80GB HBM3", "A100" of "NVIDIA A100-SXM4-80GB"; else the name's
    last word), else the CPU class ("cpu-avx512_bf16"). Without `gpu_name`, torch is asked for the GPU."""
    if gpu_name is None:
        import torch
        gpu_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    if not gpu_name:
        return cpu_class()
    words = re.split(r"[\s-]+", gpu_name.strip())
    return next((w for w in words if _GPU_MODEL.fullmatch(w)), words[-1])


def host_facts() -> dict:
    """What the run ran on: host, CPU, GPU, driver, CUDA, and the code: its git state and
    the hash of its files, which names it also in a dirty or copied tree (RunRecord's
    fields of those names)."""
    import torch

    from jobs.code_identity import code_hash, committed_code_hash
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    driver = None
    if gpu:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10).stdout.strip() or None
    sha = dirty = None
    code = code_hash()
    repo = Path(__file__).resolve().parent.parent
    committed = committed_code_hash(repo)
    if committed is not None:   # a checkout of ours (in a copy, a parent's repository would name another commit)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                 text=True, check=True).stdout.strip()
            # Dirty: the code that ran is not the commit's (edited, untracked, or the checkout's
            # .git is older than its files, as on a host the files are copied to).
            dirty = code != committed
    return {"host": socket.gethostname(), "cpu_name": cpu_name(), "gpu_name": gpu, "driver_version": driver,
            "cuda_version": torch.version.cuda if gpu else None,
            "hardware_class": hardware_class(gpu), "git_sha": sha, "git_dirty": dirty,
            "code_hash": code}
