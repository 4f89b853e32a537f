"""python -m cluster up [--root DIR] [--set KEY=VALUE ...] | down | status | env

`up` starts the deployment (cluster.deployment) and returns once every component is healthy,
printing where the API is and how to log in; when a component fails to come up it prints the
end of that component's log, stops everything and exits 1. `down` stops it. `env` prints the
deployment's settings as shell exports, for the `airflow` CLI: eval "$(python -m cluster env)".
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from cluster.deployment import REPO, Deployment, DeploymentError, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    parser.add_argument("--root", type=Path, default=REPO / ".cluster", help="the deployment's folder (default .cluster/)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting over docker/airflow.env's (up only), e.g. "
                             "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT=30")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set) if args.command == "up" else None
    deployment = Deployment(args.root, overrides)

    if args.command == "down":
        deployment.down()
        print(f"cluster: stopped (data and logs stay under {args.root})")
        return 0
    if args.command == "status":
        for name, alive in deployment.status().items():
            print(f"{name:14} {'running' if alive else 'stopped'}")
        return 0
    if args.command == "env":
        if "pg_url" not in deployment.state:
            print(f"cluster: no deployment under {args.root}: make cluster", file=sys.stderr)
            return 1
        print("\n".join(f"export {key}={shlex.quote(value)}" for key, value in deployment.settings().items()))
        return 0

    start = time.monotonic()
    try:
        deployment.up()
    except (DeploymentError, TimeoutError, RuntimeError, OSError) as e:
        print(f"cluster: {e}", file=sys.stderr)
        for log in sorted(deployment.logs.glob("*.log"), key=lambda p: p.stat().st_mtime)[-2:]:
            print(f"--- {log}\n{tail(log)}", file=sys.stderr)
        deployment.down()
        return 1
    except BaseException:
        deployment.down()
        raise
    print(f"cluster: up in {time.monotonic() - start:.0f} s; logs in {deployment.logs}\n"
          f"  API and UI   {deployment.api_url}  (user admin, password {deployment.password()},\n"
          f"               kept in {deployment.home}/simple_auth_manager_passwords.json.generated)\n"
          f"  metadata     {deployment.state['pg_url']}/airflow   results store {deployment.state['pg_url']}/roadgate\n"
          f"  broker       {deployment.state['redis_url']}\n"
          f"  airflow CLI  eval \"$(.venv/bin/python -m cluster env)\"\n"
          f"  stop with    make cluster-down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
