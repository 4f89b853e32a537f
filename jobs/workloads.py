"""Benchmark workloads: versioned YAML specs, materialized deterministically from their seed."""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import yaml

from jobs import settings
from jobs.errors import WorkloadError

SOURCES = ("random_tokens", "chat_file")
HARDWARE = ("gpu", "cpu", "any")
DTYPES = ("auto", "float32", "bfloat16")
# How our engine holds a GGUF's weights (engine.config.QUANTIZATIONS): none dequantizes them;
# gguf runs its 4-bit matrices as stored. The peers run as ever: HF dequantized, llama.cpp the file.
QUANTIZATIONS = ("none", "gguf")
MAX_NAME = 64   # runs.workload's length in the results store
# Random prompts avoid the low ids where tokenizers keep their special tokens.
TOKEN_RANGE = (100, 10000)
# Foreign CPUs allowed on average during a measurement. Measured (jobs/host_monitor.py):
# the idle H200 host 0.006, also under a torch GPU load; an idle 2-core CPU host running
# PostgreSQL, Redis, RabbitMQ and MariaDB 0.013, and 0.01-0.10 while ours, HF and llama.cpp
# ran cpu-small there; the same host busy with other test runs about 1.0. Judged on the
# mean, not one 0.5 s sample: samples on that quiet host reached 1.25 in short kernel and
# steal bursts. 0.25 CPUs taken from an engine on 2 cores is some 12% of its figure at most.
DEFAULT_MAX_FOREIGN_CPUS = 0.25
# The fields of a length distribution (the workloads file's header describes them).
LOGNORMAL_FIELDS = ("distribution", "median", "sigma", "range")


@dataclass(frozen=True)
class Lognormal:
    """Lengths drawn from a lognormal distribution truncated to the workload's [min, max]:
    many short requests and a long tail of long ones, as real batch traffic has."""
    median: float
    sigma: float   # of the log of the length: 1.0 puts the 84th percentile at e x the median

    def draw(self, rng: random.Random, lo: int, hi: int) -> int:
        """One length in [lo, hi] from a single uniform draw, by the inverse of the truncated CDF
        over [lo - 0.5, hi + 0.5] (each integer gets the mass that rounds to it)."""
        dist = NormalDist(math.log(self.median), self.sigma)
        below, through = dist.cdf(math.log(lo - 0.5)), dist.cdf(math.log(hi + 0.5))
        p = below + rng.random() * (through - below)
        # p reaches 0 or 1 only by rounding in a far tail, where the bound is the answer.
        length = round(math.exp(dist.inv_cdf(p))) if 0 < p < 1 else (lo if p <= 0 else hi)
        return min(max(length, lo), hi)


def draw_length(rng: random.Random, bounds: tuple[int, int], shape: Lognormal | None) -> int:
    """A length in the inclusive range `bounds`: uniform, or of the given shape."""
    return rng.randint(*bounds) if shape is None else shape.draw(rng, *bounds)


@dataclass(frozen=True)
class Request:
    prompt: list[int] | list[dict]      # token ids, or chat messages
    max_tokens: int


@dataclass(frozen=True)
class Workload:
    name: str
    version: int
    description: str
    source: str
    count: int
    input_len: tuple[int, int]          # the inclusive range of the prompt lengths
    output_len: tuple[int, int]         # and of the output lengths
    temperature: float
    ignore_eos: bool
    seed: int
    hardware: str
    min_duration_s: float
    min_requests: int
    min_agreement: float | None
    chat_path: Path | None = None
    dtype: str = "auto"         # the compute dtype of the engines that take one (ours, hf); auto: theirs
    quantization: str = "none"  # how ours holds the weights (QUANTIZATIONS)
    top_p: float = 1.0
    top_k: int = 0
    # Its prompts share prefixes by design (a common system prompt): prefix-cache hits inside
    # one measured repetition are then the engine's due, not a flattered figure.
    shared_prefixes: bool = False
    # The most CPUs that processes outside the bench may keep busy, on average, while an
    # engine is measured (jobs/host_monitor.py); more makes the run invalid.
    max_foreign_cpus: float = DEFAULT_MAX_FOREIGN_CPUS
    # How lengths are spread over their range: None is uniform.
    input_shape: Lognormal | None = None
    output_shape: Lognormal | None = None
    # The model the workload is stated for (a goal on one architecture, e.g. a dummy preset);
    # None: the run's choice.
    model: str | None = None
    spec: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def requests(self, seed: int | None = None) -> list[Request]:
        """The workload's requests; the same seed always gives the same requests."""
        rng = random.Random(self.seed if seed is None else seed)
        if self.source == "random_tokens":
            prompts = [[rng.randint(*TOKEN_RANGE) for _ in range(draw_length(rng, self.input_len, self.input_shape))]
                       for _ in range(self.count)]
        else:
            prompts = _chat_prompts(self.chat_path, self.count, self.name)
        return [Request(p, draw_length(rng, self.output_len, self.output_shape)) for p in prompts]

    def model_for(self, asked: str | None, default: str) -> str:
        """The model a run of this workload measures: the one asked for, else the workload's,
        else `default`; a WorkloadError when the workload states another (its figures would
        stand for the wrong model)."""
        if self.model and asked not in (None, self.model):
            raise WorkloadError(f"workload {self.name!r} is stated for model {self.model!r}; "
                                f"model {asked!r} contradicts it")
        return asked or self.model or default

    def request_seed(self, index: int) -> int:
        """Request `index`'s sampling seed: every engine that takes a seed gets this one."""
        return self.seed * 100_003 + index

    def sampling_params(self, request: Request, index: int):
        from engine import SamplingParams
        return SamplingParams(max_tokens=request.max_tokens, temperature=self.temperature, top_p=self.top_p,
                              top_k=self.top_k, ignore_eos=self.ignore_eos, seed=self.request_seed(index))


def _chat_prompts(path: Path, count: int, workload: str) -> list[list[dict]]:
    """The first `count` rows' messages of a chat file; a bad file is a WorkloadError naming the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"workload {workload!r}: cannot read its chat file {path} ({e})") from None
    if len(lines) < count:
        raise WorkloadError(f"workload {workload!r}: {path} has {len(lines)} lines, the workload takes {count}")
    prompts = []
    for number, line in enumerate(lines[:count], 1):
        try:
            messages = json.loads(line)["messages"]
        except (ValueError, TypeError, KeyError, RecursionError):
            messages = None
        if not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
            raise WorkloadError(f"workload {workload!r}: {path} line {number} is not a JSON object with a "
                                "'messages' list of {role, content} strings")
        prompts.append(messages)
    return prompts


def load_workloads(path: Path | None = None) -> dict[str, Workload]:
    path = path or settings.workloads_file()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"{path}: cannot read the workloads file ({e})") from None
    except yaml.YAMLError as e:
        raise WorkloadError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("workloads"), dict):
        raise WorkloadError(f"{path}: expected a top-level 'workloads' mapping")
    return {name: _parse(name, spec, path.parent) for name, spec in doc["workloads"].items()}


def get_workload(name: str, path: Path | None = None) -> Workload:
    workloads = load_workloads(path)
    if name not in workloads:
        raise WorkloadError(f"unknown workload {name!r}; known: {', '.join(sorted(workloads))}")
    return workloads[name]


def workload_names() -> frozenset[str]:
    """The names of the workloads of jobs/data/workloads.yaml (or ROADGATE_WORKLOADS_FILE).

    Read when asked, not at import: a malformed workloads file must break only the commands
    that use workloads, with its one-line WorkloadError, not every command at start-up."""
    return frozenset(load_workloads())


def _parse(name: str, spec, base: Path) -> Workload:
    def fail(field_name: str, why: str):
        raise WorkloadError(f"workload {name!r}: field {field_name!r} {why}")

    def need(mapping, key: str, kind, where: str):
        if not isinstance(mapping, dict) or key not in mapping:
            fail(where, "is missing")
        value = mapping[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            fail(where, f"must be of type {kind.__name__}, got {value!r}")
        return value

    def length_range(value, where: str) -> tuple[int, int]:
        if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, int) for v in value)
                or not 1 <= value[0] <= value[1]):
            fail(where, f"must be [min, max] with 1 <= min <= max, got {value!r}")
        return value[0], value[1]

    def lengths(value, where: str) -> tuple[tuple[int, int], Lognormal | None]:
        """[min, max] (uniform), or {distribution: lognormal, median: M, sigma: S, range: [min, max]}."""
        if not isinstance(value, dict):
            return length_range(value, where), None
        unknown = sorted(set(value) - set(LOGNORMAL_FIELDS), key=str)
        if unknown:
            fail(f"{where}.{unknown[0]}", f"is unknown (a length distribution has {', '.join(LOGNORMAL_FIELDS)})")
        if value.get("distribution") != "lognormal":
            fail(f"{where}.distribution", f"must be lognormal (a [min, max] list is uniform), "
                                          f"got {value.get('distribution')!r}")
        bounds = length_range(value.get("range"), f"{where}.range")
        median, sigma = need(value, "median", float, f"{where}.median"), need(value, "sigma", float, f"{where}.sigma")
        if not bounds[0] <= median <= bounds[1]:
            fail(f"{where}.median", f"must lie in its range {list(bounds)}, got {median!r}")
        if not (0 < sigma and math.isfinite(sigma)):
            fail(f"{where}.sigma", f"must be a finite number > 0, got {sigma!r}")
        return bounds, Lognormal(median, sigma)

    if not isinstance(spec, dict):
        fail("(spec)", "must be a mapping")
    if not isinstance(name, str):
        raise WorkloadError(f"workload name {name!r} must be a string")
    if len(name) > MAX_NAME:   # the store's column: refused here, before any run, not after one
        fail("(name)", f"is {len(name)} characters long; at most {MAX_NAME}")
    prompts = spec.get("prompts")
    source = need(prompts, "source", str, "prompts.source")
    if source not in SOURCES:
        fail("prompts.source", f"must be one of {', '.join(SOURCES)}, got {source!r}")
    count = need(prompts, "count", int, "prompts.count")
    if count < 1:
        fail("prompts.count", "must be >= 1")
    chat_path = None
    input_len, input_shape = (1, 1), None
    if source == "chat_file":
        chat_path = base / need(prompts, "path", str, "prompts.path")
        if not chat_path.is_file():
            fail("prompts.path", f"names a file that does not exist: {chat_path}")
    else:
        input_len, input_shape = lengths(prompts.get("input_len"), "prompts.input_len")
    sampling = spec.get("sampling")
    temperature = need(sampling, "temperature", float, "sampling.temperature")
    if temperature < 0:
        fail("sampling.temperature", "must be >= 0")
    validity = spec.get("validity")
    min_agreement = validity.get("min_agreement") if isinstance(validity, dict) else None
    if min_agreement is not None and not (isinstance(min_agreement, (int, float)) and 0 <= min_agreement <= 1):
        fail("validity.min_agreement", "must be a number in [0, 1]")
    max_foreign_cpus = validity.get("max_foreign_cpus", DEFAULT_MAX_FOREIGN_CPUS) if isinstance(validity, dict) \
        else DEFAULT_MAX_FOREIGN_CPUS
    if isinstance(max_foreign_cpus, bool) or not (isinstance(max_foreign_cpus, (int, float)) and max_foreign_cpus >= 0):
        fail("validity.max_foreign_cpus", f"must be a number >= 0, got {max_foreign_cpus!r}")
    dtype = spec.get("dtype", "auto")
    if dtype not in DTYPES:
        fail("dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    quantization = spec.get("quantization", "none")
    if quantization not in QUANTIZATIONS:
        fail("quantization", f"must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    shared_prefixes = spec.get("shared_prefixes", False)
    if not isinstance(shared_prefixes, bool):
        fail("shared_prefixes", f"must be true or false, got {shared_prefixes!r}")
    model = spec.get("model")
    if model is not None and not (isinstance(model, str) and model.strip()):
        fail("model", f"must be a model name (as --model takes it), got {model!r}")
    hardware = need(spec, "hardware", str, "hardware")
    if hardware not in HARDWARE:
        fail("hardware", f"must be one of {', '.join(HARDWARE)}")
    output_len, output_shape = lengths(spec.get("output_len"), "output_len")
    return Workload(
        name=name, version=need(spec, "version", int, "version"),
        description=spec.get("description", ""), source=source, count=count, input_len=input_len,
        output_len=output_len, temperature=temperature,
        ignore_eos=need(sampling, "ignore_eos", bool, "sampling.ignore_eos"),
        seed=need(spec, "seed", int, "seed"), hardware=hardware,
        min_duration_s=need(validity, "min_duration_s", float, "validity.min_duration_s"),
        min_requests=need(validity, "min_requests", int, "validity.min_requests"),
        min_agreement=min_agreement, chat_path=chat_path, dtype=dtype, quantization=quantization,
        top_p=float(sampling.get("top_p", 1.0)), top_k=int(sampling.get("top_k", 0)),
        shared_prefixes=shared_prefixes, max_foreign_cpus=float(max_foreign_cpus), input_shape=input_shape,
        output_shape=output_shape, model=model, spec=spec)
