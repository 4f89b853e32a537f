"""Every cuda_src/*.cu compiles for Hopper (sm_90a, what the engine builds on an H100/H200) and for
plain sm_90 with the local nvcc (CPU CI: no GPU needed), and ships in an install."""
import re
from pathlib import Path

import pytest

from engine.ops import cuda_build

SOURCES = sorted(cuda_build.SRC_DIR.glob("*.cu"))


def _nvcc_or_none():
    try:
        return cuda_build.nvcc_path()
    except RuntimeError:
        return None


@pytest.mark.skipif(_nvcc_or_none() is None, reason="nvcc is not installed here, so CUDA sources cannot be compiled")
@pytest.mark.parametrize("arch", [cuda_build.arch_of(9, 0), "sm_90"])
@pytest.mark.parametrize("src", SOURCES, ids=[s.name for s in SOURCES])
def test_source_compiles_for_sm90(src: Path, arch: str, tmp_path: Path):
    """For sm_90a also: every wgmma stays asynchronous. ptxas makes each wgmma wait for itself,
    and says so only in its -v report, where a kernel reads an accumulator a multiply in flight
    still writes, or lacks the registers to keep it (C7514, C7512): that halves a kernel
    without a word, so it fails here."""
    out = tmp_path / (src.stem + ".cubin")
    report = cuda_build.compile_source(src, arch, out, ptxas_report=True)
    assert out.stat().st_size > 0
    assert "Compiling entry function" in report     # ptxas's -v report is there to be read
    serialized = [line for line in report.splitlines() if "wgmma.mma_async instructions are serialized" in line]
    assert not serialized, "\n".join(serialized)


def test_there_are_sources():
    assert SOURCES, f"no .cu files under {cuda_build.SRC_DIR}"


@pytest.mark.slow
def test_an_installed_roadgate_carries_the_kernel_sources(tmp_path):
    """A non-editable install (what a wheel gives) finds every .cu and .cuh outside the checkout."""
    import os
    import shutil
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[1]
    source, target = tmp_path / "source", tmp_path / "site"
    # Built from a copy: setuptools writes build/ into the tree it builds.
    for package in ("engine", "jobs", "cuda_src"):
        shutil.copytree(repo / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, cwd=tmp_path)
    listing = subprocess.run(
        [sys.executable, "-c", "from engine.ops import cuda_build as b; "
                               "print(b.SRC_DIR); print(*sorted(p.name for p in b.SRC_DIR.iterdir()))"],
        env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path,   # before the editable checkout
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert listing[0] == str(target / "cuda_src")
    shipped = set(listing[1].split())
    assert {p.name for p in repo.joinpath("cuda_src").glob("*.cu*")} <= shipped and "common.cuh" in shipped
    assert (target / "engine" / "cpu_int4.c").is_file()     # the CPU int4 kernel's source, compiled at first use


def _kernel_definitions(source: str):
    """(pattern of the exported name, parameter list, the text after it) of each `extern "C"`
    kernel, past attributes such as __launch_bounds__(...); in a macro's name, the parts pasted
    with ## that are its parameters (upper case: N, MT) stand for letters and digits, and a
    KIND part for words that each end in an underscore (wg_, ws_split_)."""
    text = source.replace("\\\n", " ")
    for m in re.finditer(r'extern "C" __global__ void\s+(?:__\w+__\((?:[^()]|\([^)]*\))*\)\s*)*'
                         r'([\w#]+)\s*\(([^)]*)\)', text):
        name = "".join("(?:[A-Za-z0-9]+_)+" if part == "KIND" else
                       "[A-Za-z0-9]+" if re.fullmatch(r"[A-Z][A-Z0-9_]*", part) else re.escape(part)
                       for part in m[1].split("##"))
        yield re.compile(name + "$"), m[2], text[m.end():]


def declared_kernels(source: str) -> dict[re.Pattern, list[str]]:
    """The source's `extern "C"` kernels: a pattern of the exported name -> each parameter's
    signature letter (P pointer, T tensor map, l int64, f float, i int)."""
    kernels = {}
    for pattern, params, _ in _kernel_definitions(source):
        params = [p.strip() for p in params.split(",") if p.strip()]
        kernels[pattern] = ["P" if "*" in p else "T" if "TensorMap" in p else "l" if "int64_t" in p
                            else "f" if p.startswith(("float", "const float")) else "i" for p in params]
    return kernels


def kernels_calling_pdl_start(source: str) -> dict[re.Pattern, bool]:
    """Whether each kernel calls pdl_start(): in its body, after nothing but prefetches (calls
    of prefetch_*), or, where the body hands over to a device function, in that function.
    What engine/ops/pdl.py relies on when it makes an edge into the kernel programmatic."""
    calls = {}
    for pattern, _, rest in _kernel_definitions(source):
        head = rest.lstrip()[1:].split("}", 1)[0]         # from the body's brace to the first closing one
        before, found, _ = head.partition("pdl_start();")
        if found:
            calls[pattern] = re.fullmatch(r"(\s*prefetch_\w+\([^;]*\);)*\s*", before) is not None
            continue
        callee = re.match(r"\s*(\w+)\s*(?:<[^;(]*>)?\s*\(", head)
        definition = callee and re.search(rf"__device__[^;{{]*\b{callee[1]}\s*\((.*?)\n}}", source, re.S)
        calls[pattern] = bool(definition) and "pdl_start();" in definition[1]
    return calls


def test_the_kernel_table_matches_the_sources_parameters_and_constants():
    """Every kernel cuda_ops launches is declared in its source with the parameters the table
    gives it; every constant the host mirrors is the source's."""
    from engine.ops.kernel_table import CONSTANTS, KERNELS
    declared = {stem: declared_kernels((cuda_build.SRC_DIR / f"{stem}.cu").read_text())
                for stem in {spec.source for spec in KERNELS}}
    for spec in KERNELS:
        found = [letters for pattern, letters in declared[spec.source].items() if pattern.match(spec.name)]
        assert found, f"{spec.name}: no extern \"C\" kernel of {spec.source}.cu exports it"
        assert "".join(found[0]) == spec.signature, f"{spec.name}: the source takes {''.join(found[0])}"
    for name, (source, source_name, value) in CONSTANTS.items():
        text = (cuda_build.SRC_DIR / source).read_text()
        assert re.search(rf"constexpr int [^;]*\b{source_name} = {value}\b", text), f"{name}: {source} has no " \
                                                                                  f"{source_name} = {value}"


def test_the_check_sees_a_drifted_signature():
    source = 'extern "C" __global__ void embed_rows(const int64_t* ids, const char* t, char* out, int64_t n) {}'
    [(pattern, letters)] = declared_kernels(source).items()
    assert pattern.match("embed_rows") and "".join(letters) == "PPPl"   # the table's PPPi would now fail


def test_a_macros_name_parts_match_only_their_own_kernels():
    # N stands for a dtype (no underscore), KIND for words ending in one: the mma.sync kernels'
    # pattern must not take a wgmma kernel's name, nor the other way round.
    source = ('#define A(T, N, D) extern "C" __global__ void attn_##N##_d##D(const T* q, int n) {}\n'
              '#define B(T, N, KIND) extern "C" __global__ void attn_##KIND##N##_d64(const T* q, float s) {}\n')
    mma, wgmma = declared_kernels(source)
    assert mma.match("attn_bf16_d64") and not mma.match("attn_ws_split_bf16_d64")
    assert wgmma.match("attn_ws_split_bf16_d64") and wgmma.match("attn_wg_f16_d64") and not wgmma.match("attn_bf16_d64")


def test_every_kernel_waits_for_the_one_before_it_first():
    """A kernel may be launched while the kernel it depends on still runs (engine/ops/pdl.py):
    every kernel the table names calls pdl_start() before it reads anything a kernel writes."""
    from engine.ops.kernel_table import KERNELS
    opening = {stem: kernels_calling_pdl_start((cuda_build.SRC_DIR / f"{stem}.cu").read_text())
               for stem in {spec.source for spec in KERNELS}}
    for spec in KERNELS:
        [opens] = [ok for pattern, ok in opening[spec.source].items() if pattern.match(spec.name)]
        assert opens, f"{spec.name} does not start with pdl_start()"


def test_the_pdl_check_sees_a_kernel_that_reads_first():
    source = ('__device__ void waits(const float* x) {\n    pdl_start();\n}\n'
              '__device__ void reads(const float* x) {\n    x[0];\n}\n'
              'extern "C" __global__ void a(const float* x, float* y) { prefetch_l2(x, 16); pdl_start(); y[0] = x[0]; }'
              'extern "C" __global__ void b(const float* x, float* y) { y[0] = x[0]; pdl_start(); }'
              'extern "C" __global__ void c(const float* x, float* y) { y[0] = x[0]; }'
              'extern "C" __global__ void d(const float* x, float* y) { waits(x); }'
              'extern "C" __global__ void e(const float* x, float* y) { reads(x); }')
    assert list(kernels_calling_pdl_start(source).values()) == [True, False, False, True, False]
