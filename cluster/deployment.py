"""roadgate on Airflow 3 with the CeleryExecutor, on this machine, the way docker/compose.yaml
deploys it: PostgreSQL (Airflow's metadata and the results store, two databases), Redis (the
Celery broker), api-server, scheduler, dag-processor, triggerer, a worker for the default
queue and one for `gpu` (concurrency: the gpu pool's slots).

    python -m cluster up | down | status      (make cluster, make cluster-down)

Settings come from docker/airflow.env, the file compose reads too; only the host-specific
ones (HOST_SETTINGS: URLs, ports, paths, secrets) are filled in here. PostgreSQL and Redis are
private servers started under the deployment's folder (cluster.servers), unless
ROADGATE_CLUSTER_PG_URL (a server URL without a database: its `airflow` and `roadgate`
databases are created when missing) or ROADGATE_CLUSTER_REDIS_URL name servers to use.

Everything lives under one folder (default .cluster/): logs/ (one file per component, the
task logs under logs/airflow/), airflow/ (AIRFLOW_HOME), data/ (ROADGATE_DATA_DIR),
postgres/, and state.json, which `down` reads to stop exactly what `up` started.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

from cluster.processes import Daemon, stop_all
from cluster.servers import PostgresServer, create_databases, free_port, start_redis, wait_until

REPO = Path(__file__).resolve().parents[1]
SETTINGS_FILE = REPO / "docker" / "airflow.env"
DAGS = REPO / "dags"
BIN = Path(sys.executable).parent
DATABASES = ("airflow", "roadgate")

# The settings that differ between hosts: compose's `environment:` sets exactly these, and so
# does this deployment; every other setting is docker/airflow.env's (a test holds both to it).
HOST_SETTINGS = (
    "AIRFLOW__CORE__DAGS_FOLDER",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC",
    "AIRFLOW__CELERY__BROKER_URL",
    "AIRFLOW__CELERY__RESULT_BACKEND",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__API__SECRET_KEY",
    "ROADGATE_DB_URL",
    "ROADGATE_DATA_DIR",
)
# `airflow <command>` of each component, as compose's service `airflow-<name>` runs it.
COMMANDS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer"],
    "worker": ["celery", "worker"],
    # One task per GPU at once, each on the GPU it leases (jobs/gpu_lease.py): as many as the pool's slots.
    "worker-gpu": ["celery", "worker", "--queues", "gpu", "--concurrency", "{gpu_slots}"],
}
WORKERS = ("worker", "worker-gpu")
# What compose's airflow-init runs before the services start (GPU slots: GPU_SLOTS, else the GPUs here).
INIT_COMMANDS = (("airflow", "db", "migrate"), ("roadgate", "db", "upgrade"),
                 ("airflow", "pools", "set", "gpu", "{gpu_slots}", "one slot per GPU"))
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"


def read_settings(path: Path = SETTINGS_FILE) -> dict[str, str]:
    """docker/airflow.env as compose reads it: KEY=VALUE lines, `#` comments. Quotes and `$`
    are refused, since compose would interpret them and this reader would not."""
    settings = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key or any(c in value for c in "\"'$"):
            raise ValueError(f"{path}:{number}: expected KEY=VALUE with a literal value, got {line!r}")
        settings[key] = value
    return settings


def gpu_slots() -> int:
    if os.environ.get("GPU_SLOTS"):
        return int(os.environ["GPU_SLOTS"])
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 1
    return max(1, sum(line.startswith("GPU ") for line in listed.splitlines()))


class DeploymentError(RuntimeError):
    pass


class Deployment:
    """One deployment under `root`. `overrides` are settings laid over docker/airflow.env's
    (the tests shorten timeouts with them); they are kept in the state, so a component
    started later (a replacement worker) runs with the same."""

    def __init__(self, root: Path, overrides: dict[str, str] | None = None, *, durable: bool = True) -> None:
        self.root = Path(root).absolute()
        self.logs, self.home, self.data = self.root / "logs", self.root / "airflow", self.root / "data"
        self.state_file = self.root / "state.json"
        self.durable = durable
        self.state: dict = {"overrides": {}, "processes": {}}
        if self.state_file.exists():
            self.state = json.loads(self.state_file.read_text())
        if overrides is not None:
            self.state["overrides"] = dict(overrides)

    # ------------------------------------------------------------------ settings

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.state['api_port']}"

    def host_settings(self) -> dict[str, str]:
        pg, secret = self.state["pg_url"], self.state["secrets"]
        metadata = pg.replace("postgresql://", "postgresql+psycopg://", 1) + "/airflow"
        return {
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            # psycopg 3 serves the async URL too; Airflow would otherwise derive an asyncpg one.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": metadata,
            "AIRFLOW__CELERY__BROKER_URL": self.state["redis_url"],
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{metadata}",
            "AIRFLOW__API_AUTH__JWT_SECRET": secret["jwt"],
            "AIRFLOW__API__SECRET_KEY": secret["api"],
            "ROADGATE_DB_URL": f"{pg}/roadgate",
            "ROADGATE_DATA_DIR": str(self.data),
        }

    def settings(self) -> dict[str, str]:
        """What every component runs with: the file's settings, this host's, then the overrides;
        and, all components sharing this machine, one AIRFLOW_HOME and one log folder."""
        shared, host = read_settings(), self.host_settings()
        if clash := sorted(set(shared) & set(host)):
            raise DeploymentError(f"{SETTINGS_FILE} sets host-specific settings: {', '.join(clash)}")
        return shared | host | {"AIRFLOW_HOME": str(self.home),
                                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.logs / "airflow")} | self.state["overrides"]

    def environment(self) -> dict[str, str]:
        # Airflow and roadgate settings of the calling shell would override the deployment's: dropped.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ROADGATE_"))}
        return inherited | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"} | self.settings()

    def argv(self, name: str) -> list[str]:
        argv = [str(BIN / "airflow"), *(part.format(gpu_slots=gpu_slots()) for part in COMMANDS[name])]
        if name == "api-server":
            argv += ["--host", "127.0.0.1", "--port", str(self.state["api_port"])]
        if name in WORKERS:
            # Two workers on one host need their own names and pid files. Neither serves its
            # logs: every component writes to and reads from the same log folder here.
            argv += ["--celery-hostname", f"{name}@%h", "--pid", str(self.root / f"{name}.pid"), "--skip-serve-logs"]
        if name == "triggerer":
            argv += ["--skip-serve-logs"]
        return argv

    # ------------------------------------------------------------------ lifecycle

    def up(self, timeout_s: float = 240) -> None:
        """Start everything and wait until every component is healthy. On failure what was
        started stays recorded: call down()."""
        if self.running():
            raise DeploymentError(f"a deployment under {self.root} is running: stop it first (make cluster-down)")
        self.state["processes"] = {}
        for path in (self.logs, self.home, self.data):
            path.mkdir(parents=True, exist_ok=True)
        self.state.update(api_port=free_port(), secrets={"jwt": secrets.token_urlsafe(32),
                                                          "api": secrets.token_urlsafe(32)})
        self._start_servers()
        self._initialize()
        for name in COMMANDS:
            self.start(name)
        self.wait_healthy(timeout_s)

    def start(self, name: str) -> Daemon:
        """Start one component (again: a replacement for a dead worker runs the same command)."""
        daemon = Daemon.spawn(name, self.argv(name), self.environment(), self.logs / f"{name}.log")
        self.state["processes"][name] = daemon.as_dict()
        self._save()
        return daemon

    def kill(self, name: str) -> None:
        """SIGKILL a component and every process it started, as when its machine dies."""
        self._daemon(name).kill()

    def down(self) -> None:
        """Stop every component, then the servers this deployment started. Data stays."""
        stop_all([self._daemon(name) for name in self.state["processes"]])
        if "redis" in self.state:
            stop_all([Daemon.from_dict(self.state.pop("redis"))])
        if postgres := self._postgres():
            postgres.stop()
            del self.state["postgres"]
        self.state["processes"] = {}
        self._save()

    def running(self) -> bool:
        """Whether anything `up` started may still run: a live component, or a server not yet stopped."""
        return any(self.status().values()) or "postgres" in self.state or "redis" in self.state

    def status(self) -> dict[str, bool]:
        return {name: self._daemon(name).alive() for name in self.state["processes"]}

    def password(self, user: str = "admin") -> str:
        return json.loads((self.home / PASSWORDS_FILE).read_text())[user]

    def wait_healthy(self, timeout_s: float) -> None:
        """Until the api-server reports the metadata database, scheduler, triggerer and
        dag-processor healthy and both workers answer a ping through the broker."""
        def check_alive() -> None:
            if dead := [n for n, alive in self.status().items() if not alive]:
                raise DeploymentError(f"{', '.join(dead)} exited: see {self.logs}/{dead[0]}.log")

        wait_until(self._api_healthy, timeout_s, "the Airflow services", check_alive)
        wait_until(lambda: set(WORKERS) <= self.workers_answering(), timeout_s, "the Celery workers", check_alive)

    def workers_answering(self) -> set[str]:
        from celery import Celery
        app = Celery(broker=self.state["redis_url"])
        try:
            return {node.split("@", 1)[0] for reply in app.control.ping(timeout=1.0) for node in reply}
        finally:
            app.close()

    # ------------------------------------------------------------------ internals

    def _api_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/api/v2/monitor/health", timeout=5) as response:
                health = json.load(response)
        except OSError:
            return False
        return all(part.get("status") == "healthy" for part in health.values())

    def _start_servers(self) -> None:
        if url := os.environ.get("ROADGATE_CLUSTER_PG_URL"):
            self.state["pg_url"] = url.rstrip("/")
        else:
            postgres = PostgresServer.start(self.root / "postgres", self.logs / "postgres.log", durable=self.durable)
            self.state.update(postgres=postgres.as_dict(), pg_url=postgres.url)
            self._save()
        create_databases(self.state["pg_url"], *DATABASES)
        if url := os.environ.get("ROADGATE_CLUSTER_REDIS_URL"):
            self.state["redis_url"] = url
        else:
            redis, self.state["redis_url"] = start_redis(self.root / "redis", self.logs / "redis.log")
            self.state["redis"] = redis.as_dict()
        self._save()

    def _initialize(self) -> None:
        env, slots = self.environment(), str(gpu_slots())
        with open(self.logs / "init.log", "ab") as log:
            for command in INIT_COMMANDS:
                argv = [str(BIN / command[0]), *(part.format(gpu_slots=slots) for part in command[1:])]
                log.write(f"$ {' '.join(argv)}\n".encode())
                log.flush()
                if subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT).returncode:
                    raise DeploymentError(f"{' '.join(command[:3])} failed: see {self.logs / 'init.log'}")

    def _daemon(self, name: str) -> Daemon:
        return Daemon.from_dict(self.state["processes"][name])

    def _postgres(self) -> PostgresServer | None:
        if "postgres" not in self.state:
            return None
        return PostgresServer(**self.state["postgres"])

    def _save(self) -> None:
        """The state names the processes to stop and holds the secrets: readable by its owner only."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(self.state, f, indent=1)
        os.replace(tmp, self.state_file)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
