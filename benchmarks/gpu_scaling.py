"""Batch generation spread over the GPUs of one host, against the same batch on one of them.

On a host of N GPUs (jobs.gpu_lease's count; --gpus N to use fewer), one deterministic batch
input goes through the real batch_generation DAG twice, in a real Airflow 3 deployment on this
machine: api-server, dag-processor and a scheduler whose LocalExecutor runs the tasks, SQLite
metadata, the DAGs of dags/ (`airflow dags test` would run the mapped shards one after another in
one process; the scheduler runs as many at once as the `gpu` pool has slots):

  one GPU   the pool at 1 slot, 2 shards, the scheduler and every task it starts shown only the
            first GPU this process may use (CUDA_VISIBLE_DEVICES): the one-GPU baseline
  N GPUs    the pool at N slots, 2 x N shards, each leasing the lowest free GPU of the host

Each run's output tokens (its manifest) over its wall time (its run in the results store: the
split's start to the commit) is its output tok/s; the scaling ratio is the N-GPU figure over the
one-GPU one (issue 23's bar: >= 0.9 x N). The proof that no two shards shared a GPU comes from
each shard's recorded lease (GPU index, host, from, until): leases of one GPU never overlap.
Recorded as micro-benchmark gpu-scaling-batch unless --no-store (the batch runs then land in a
store of the work directory's, not the environment's).

--check-dag-run DAG_ID RUN_ID applies the same proof to any DAG run whose tasks recorded GPU
leases in the store (a batch's shards; a nightly's bench cells, one run per workload).

Usage: python benchmarks/gpu_scaling.py [--gpus N] [--prompts 8192] [--max-tokens 256]
           [--model smollm2-135m-instruct] [--backend auto] [--work-dir DIR] [--no-store]
       python benchmarks/gpu_scaling.py --check-dag-run DAG_ID RUN_ID
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from cluster.processes import Daemon, stop_all  # noqa: E402
from cluster.servers import free_port, wait_until  # noqa: E402
from jobs.settings import SHIPPED_DATA  # noqa: E402

MICROBENCHMARK = "gpu-scaling-batch"
DAG_ID = "batch_generation"
SHARDS_PER_GPU = 2
# Issue 23: N GPUs must give at least this share of N times the one-GPU figure.
SCALING_BAR = 0.9
BIN = Path(sys.executable).parent
COMPONENTS = {"api-server": ["api-server"], "dag-processor": ["dag-processor"]}
DAG_RUN_TIMEOUT_S = 6 * 3600.0


@dataclass(frozen=True)
class HeldGpu:
    """One task's GPU lease as the store keeps it (jobs.gpu_lease.Lease.record)."""
    index: int | None    # None: the one slot of a host without GPUs
    host: str
    start: datetime
    end: datetime


def held_gpus(run_config: dict) -> list[HeldGpu]:
    """The leases a store run recorded: a batch's list (one per shard), a bench's {engine: lease}."""
    recorded = run_config.get("gpu_leases") or []
    leases = recorded.values() if isinstance(recorded, dict) else recorded
    return [HeldGpu(r["index"], r["host"], datetime.fromisoformat(r["acquired_at"]),
                    datetime.fromisoformat(r["released_at"])) for r in leases]


def shared_gpus(leases: list[HeldGpu]) -> list[tuple[HeldGpu, HeldGpu]]:
    """Every two leases of one GPU of one host held at the same time: none where no two tasks shared a GPU."""
    return [(a, b) for i, a in enumerate(leases) for b in leases[i + 1:]
            if (a.host, a.index) == (b.host, b.index) and a.start < b.end and b.start < a.end]


def most_held_at_once(leases: list[HeldGpu]) -> int:
    """The most leases held at one moment (a release at the moment of another's start is before it)."""
    events = sorted([(lease.start, 1) for lease in leases] + [(lease.end, -1) for lease in leases])
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


@dataclass(frozen=True)
class BatchFigures:
    """One batch run: its output tokens, its wall time and its shards' GPU leases."""
    store_run_id: str
    output_tokens: int
    wall_s: float
    leases: list[HeldGpu]

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def gpus_used(self) -> list[int | None]:
        return sorted({lease.index for lease in self.leases}, key=lambda i: -1 if i is None else i)


def scaling(one_gpu: BatchFigures, spread: BatchFigures, gpus: int) -> dict[str, float | bool]:
    """The N-GPU run's output tok/s over the one-GPU run's, per GPU, and whether it meets the bar."""
    ratio = spread.output_tok_s / one_gpu.output_tok_s
    return {"scaling_ratio": ratio, "per_gpu": ratio / gpus, "meets_bar": ratio >= SCALING_BAR * gpus}


def write_batch_input(path: Path, count: int) -> None:
    """`count` chat prompts: the shipped ones in turn, each led by its number. The same file every
    time, and no two prompts alike: a repeated prompt is a prefix-cache hit in a shard that holds
    both, and shards of different sizes hold different shares of repeats."""
    chats = [json.loads(line)["messages"] for line in (SHIPPED_DATA / "chat_prompts.jsonl").read_text().splitlines()]
    with path.open("w") as f:
        for i in range(count):
            *before, last = chats[i % len(chats)]
            numbered = {**last, "content": f"Request {i}. {last['content']}"}
            f.write(json.dumps({"id": f"prompt-{i:06d}", "messages": [*before, numbered]}) + "\n")


class LocalAirflow:
    """A real Airflow 3 deployment of dags/ under `root`, as `airflow standalone` runs one
    (LocalExecutor, SQLite), without the triggerer (batch_generation defers nothing). The
    scheduler is started per phase (start_scheduler), so a phase can pin it to a GPU. Every DAG
    stays paused but the one run here: a scheduled nightly would take the GPUs, and each
    batch's results asset event would start gate_evaluation."""

    def __init__(self, root: Path, parallelism: int) -> None:
        self.logs = root / "logs"
        self.port = free_port()
        self.settings = {
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # The executor's worker processes: the pool's slots decide how many shards run at once.
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            # The REST API without a login: it listens on 127.0.0.1 only, for this benchmark's life.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.logs / "airflow"),
            "ROADGATE_TASK_RUNNER": "local",
        }
        self.daemons: dict[str, Daemon] = {}

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        # The calling shell's Airflow settings would override the deployment's: dropped (as cluster/ does).
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        return inherited | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"} | self.settings | (extra or {})

    def airflow(self, *args: str) -> None:
        """One `airflow` CLI command, its output in logs/cli.log."""
        with open(self.logs / "cli.log", "ab") as log:
            log.write(f"$ airflow {' '.join(args)}\n".encode())
            log.flush()
            if subprocess.run([str(BIN / "airflow"), *args], env=self.environment(), stdout=log,
                              stderr=subprocess.STDOUT).returncode:
                raise RuntimeError(f"airflow {' '.join(args[:2])} failed: see {self.logs / 'cli.log'}")

    def __enter__(self) -> LocalAirflow:
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            self.airflow("db", "migrate")
            for name, command in COMPONENTS.items():
                self._spawn(name, command)
            # Parsed by the dag-processor and served by the api-server: then it can be unpaused.
            wait_until(lambda: self._request("GET", f"/dags/{DAG_ID}") is not None, 300,
                       f"{DAG_ID} in the api-server", self._check_alive)
            self._request("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        stop_all(list(self.daemons.values()))

    def set_pool(self, slots: int) -> None:
        self.airflow("pools", "set", "gpu", str(slots), "one slot per GPU")

    def start_scheduler(self, extra_env: dict[str, str] | None = None) -> None:
        self._spawn("scheduler", ["scheduler"], extra_env)

    def stop_scheduler(self) -> None:
        stop_all([self.daemons.pop("scheduler")])

    def run_dag(self, run_id: str, conf: dict, timeout_s: float) -> dict:
        """Trigger a run of DAG_ID and wait for it to end; the run as the REST API gives it."""
        self._request("POST", f"/dags/{DAG_ID}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf})
        deadline = time.monotonic() + timeout_s
        while (run := self._request("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}"))["state"] not in ("success", "failed"):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"DAG run {run_id}: still {run['state']} after {timeout_s:.0f} s")
            time.sleep(2)
        return run

    def _spawn(self, name: str, command: list[str], extra_env: dict[str, str] | None = None) -> None:
        argv = [str(BIN / "airflow"), *command]
        if name == "api-server":
            argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.daemons[name] = Daemon.spawn(name, argv, self.environment(extra_env), self.logs / f"{name}.log")

    def _check_alive(self) -> None:
        if dead := [name for name, daemon in self.daemons.items() if not daemon.alive()]:
            raise RuntimeError(f"{', '.join(dead)} exited: see {self.logs / dead[0]}.log")

    def _request(self, method: str, path: str, body: dict | None = None) -> dict | None:
        """The REST API's answer; None where the server is not up yet or the object not there yet."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/v2{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            if e.code == 404 and method == "GET":
                return None
            raise RuntimeError(f"{method} {path}: HTTP {e.code} {e.read().decode(errors='replace')[:500]}") from None
        except OSError:   # refused: not listening yet
            if method != "GET":
                raise
            return None


def run_phase(airflow: LocalAirflow, name: str, *, slots: int, shards: int, pin: int | None, conf: dict,
              work: Path, timeout_s: float) -> BatchFigures:
    """One batch run with the pool at `slots` and `shards` shards; `pin`: the one GPU its tasks see."""
    from jobs.batch import read_manifest
    from jobs.store import open_ready_store
    from jobs.store.models import Run

    run_id = f"gpu-scaling-{name}-{time.strftime('%Y%m%dT%H%M%S')}"
    output = work / run_id
    airflow.set_pool(slots)
    airflow.start_scheduler(None if pin is None else {"CUDA_VISIBLE_DEVICES": str(pin)})
    try:
        dag_run = airflow.run_dag(run_id, conf | {"output_uri": str(output), "num_shards": shards}, timeout_s)
    finally:
        airflow.stop_scheduler()
    if dag_run["state"] != "success":
        raise RuntimeError(f"DAG run {run_id} {dag_run['state']}: see the task logs under {airflow.logs / 'airflow'}")
    manifest = read_manifest(str(output))
    with open_ready_store().session() as session:
        run = session.get(Run, manifest["store_run_id"])
        return BatchFigures(run.id, manifest["output_tokens"], (run.finished_at - run.started_at).total_seconds(),
                            held_gpus(run.config))


def dag_run_leases(dag_id: str, run_id: str) -> list[HeldGpu]:
    """The GPU leases of every store run a DAG run landed."""
    from sqlalchemy import select

    from jobs.store import open_ready_store
    from jobs.store.models import Run

    with open_ready_store().session() as session:
        runs = session.scalars(select(Run).where(Run.airflow_dag_id == dag_id, Run.airflow_run_id == run_id)).all()
        return [lease for run in runs for lease in held_gpus(run.config)]


def describe_leases(leases: list[HeldGpu]) -> str:
    """The leases, one a line, and the verdict on them."""
    lines = [f"    GPU {'-' if lease.index is None else lease.index} on {lease.host}: "
             f"{lease.start.isoformat(timespec='milliseconds')} .. {lease.end.isoformat(timespec='milliseconds')}"
             for lease in sorted(leases, key=lambda lease: lease.start)]
    shared = shared_gpus(leases)
    verdict = (f"no two of {len(leases)} leases held one GPU at once; at most {most_held_at_once(leases)} held at once"
               if not shared else "SHARED: " + "; ".join(
                   f"GPU {a.index} on {a.host} held from {a.start} and from {b.start}" for a, b in shared))
    return "\n".join([*lines, f"  {verdict}"])


def check_dag_run(dag_id: str, run_id: str) -> int:
    leases = dag_run_leases(dag_id, run_id)
    if not leases:
        print(f"gpu_scaling: no run of {dag_id} {run_id} in the results store recorded a GPU lease", file=sys.stderr)
        return 2
    print(f"{dag_id} {run_id}: {len(leases)} GPU leases\n{describe_leases(leases)}")
    return 1 if shared_gpus(leases) else 0


def usable_gpus() -> list[int]:
    """The GPUs the batch's leases may hand out here (jobs.gpu_lease: its count, CUDA_VISIBLE_DEVICES)."""
    from jobs import gpu_lease
    return gpu_lease.usable_devices(gpu_lease.device_count())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, help="GPUs to spread over (default: every one this host has)")
    ap.add_argument("--prompts", type=int, default=8192, help="rows of the batch input")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--backend", default="auto", choices=["auto", "cuda", "torch"])
    ap.add_argument("--work-dir", type=Path, help="Airflow's home and logs, the input and the outputs "
                                                  "(default: a new temporary directory, kept)")
    ap.add_argument("--timeout-s", type=float, default=DAG_RUN_TIMEOUT_S, help="the longest one DAG run may take")
    ap.add_argument("--no-store", action="store_true", help="record nothing in the environment's results store")
    ap.add_argument("--check-dag-run", nargs=2, metavar=("DAG_ID", "RUN_ID"),
                    help="only check the GPU leases a DAG run recorded: exit 1 if two tasks held one GPU at once")
    args = ap.parse_args(argv)
    if args.check_dag_run:
        return check_dag_run(*args.check_dag_run)

    def refuse(message: str) -> int:
        print(f"gpu_scaling: {message}", file=sys.stderr)
        return 2
    devices = usable_gpus()
    if not devices:
        return refuse("this host has no GPU to spread over (jobs.gpu_lease counts none: NVML needs nvidia-ml-py; "
                      "ROADGATE_GPU_COUNT simulates some)")
    gpus = len(devices) if args.gpus is None else args.gpus
    if not 1 <= gpus <= len(devices):
        return refuse(f"--gpus {args.gpus}: this host has {len(devices)} GPU(s) to lease ({devices})")
    if args.prompts < SHARDS_PER_GPU * gpus or args.max_tokens < 1:
        return refuse(f"--prompts must be at least {SHARDS_PER_GPU * gpus} (a row per shard) and --max-tokens "
                      f"at least 1, got {args.prompts} and {args.max_tokens}")
    from engine.model_source import ModelSourceError, resolve
    try:
        resolve(args.model)
    except ModelSourceError as e:
        return refuse(str(e))
    model = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model   # tasks run elsewhere

    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="roadgate-gpu-scaling-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.no_store:
        os.environ |= {"ROADGATE_DATA_DIR": str(work / "data")}   # the tasks inherit it
        for name in ("ROADGATE_DB_URL", "ROADGATE_PARQUET_ROOT"):
            os.environ.pop(name, None)
    batch_input = work / "prompts.jsonl"
    write_batch_input(batch_input, args.prompts)
    conf = {"model": model, "input_uri": str(batch_input), "backend": args.backend,
            "sampling": {"max_tokens": args.max_tokens}}

    from jobs.store.models import utcnow
    started = utcnow()
    print(f"gpu_scaling: {args.prompts} prompts, up to {args.max_tokens} tokens each, {model} ({args.backend}); "
          f"1 GPU, then {gpus}; work dir {work}", flush=True)
    try:
        with LocalAirflow(work / "deployment", parallelism=gpus + 1) as airflow:
            phase = dict(airflow=airflow, conf=conf, work=work, timeout_s=args.timeout_s)
            one_gpu = run_phase(name="1gpu", slots=1, shards=SHARDS_PER_GPU, pin=devices[0], **phase)
            spread = run_phase(name=f"{gpus}gpu", slots=gpus, shards=SHARDS_PER_GPU * gpus, pin=None, **phase)
    except (RuntimeError, OSError) as e:   # TimeoutError is an OSError
        print(f"gpu_scaling: {e}", file=sys.stderr)
        return 1
    figures = scaling(one_gpu, spread, gpus)

    for label, run in (("1 GPU", one_gpu), (f"{gpus} GPUs", spread)):
        print(f"{label:>8}: {len(run.leases)} shards on GPU(s) {run.gpus_used}: {run.output_tokens} output tokens "
              f"in {run.wall_s:.1f} s = {run.output_tok_s:.1f} tok/s (batch run {run.store_run_id})\n"
              f"{describe_leases(run.leases)}")
    print(f" scaling: {figures['scaling_ratio']:.2f}x the one-GPU figure on {gpus} GPUs, {figures['per_gpu']:.2f} "
          f"a GPU; the bar (>= {SCALING_BAR} x {gpus}) is {'met' if figures['meets_bar'] else 'NOT met'}")
    if shared_gpus(one_gpu.leases + spread.leases):
        print("gpu_scaling: two shards held one GPU at once; nothing recorded", file=sys.stderr)
        return 1
    if not args.no_store:
        from jobs.microbench import record_microbench
        config = {"gpus": gpus, "shards": SHARDS_PER_GPU * gpus, "prompts": args.prompts,
                  "max_tokens": args.max_tokens, "model": model, "backend": args.backend}
        run_id = record_microbench(MICROBENCHMARK, config, {
            "output_tok_s": spread.output_tok_s, "one_gpu_output_tok_s": one_gpu.output_tok_s,
            "scaling_ratio": figures["scaling_ratio"]}, started, utcnow())
        print(f"recorded run {run_id} ({MICROBENCHMARK})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
