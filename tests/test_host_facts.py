"""The CPU's name and class as runs record them (jobs.host_facts), from /proc/cpuinfo texts."""
import os

from jobs.host_facts import cpu_name


def cpuinfo(model_name: str, family: int, model: int, flags: str) -> str:
    """Two processors of a /proc/cpuinfo, as Linux writes it on x86."""
    one = (f"processor\t: {{}}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
           f"model name\t: {model_name}\nstepping\t: 0\nflags\t\t: fpu sse2 {flags}\n\n")
    return one.format(0) + one.format(1)


def test_a_model_name_without_a_model_gets_the_family_and_model_numbers():
    # One hypervisor names Zen 1 and Zen 2 alike; they ran a 4-bit workload 1.14x and 2.03x llama.cpp.
    zen1, zen2 = (cpu_name(cpuinfo("AMD EPYC", 23, m, "avx avx2 fma")) for m in (1, 49))
    assert zen1 == f"AMD EPYC family 23 model 1 x{os.cpu_count()} avx2"
    assert zen2 == f"AMD EPYC family 23 model 49 x{os.cpu_count()} avx2"


def test_a_model_name_that_names_its_model_is_kept_as_it_is():
    name = cpu_name(cpuinfo("AMD EPYC 9654 96-Core Processor", 25, 17, "avx2 avx512f avx512_bf16"))
    assert name == f"AMD EPYC 9654 96-Core Processor x{os.cpu_count()} avx512_bf16"


def test_without_cpuinfo_the_name_still_has_cores_and_no_isa():
    model, cores = cpu_name("").split(" x")
    assert model and cores == str(os.cpu_count())
