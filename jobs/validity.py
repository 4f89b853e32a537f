"""Is a bench run evidence? The workload's validity rules applied to what each engine measured.

A run is stored either way; one that fails is INVALID and never evidence for a
PASS (jobs/gates/evaluate.py reads the verdict back from runs.validity). An
engine's measurement fails when it ran shorter than the workload's
min_duration_s, finished fewer than min_requests requests, or agreed with the
reference engine less than min_agreement. Agreement is only known where a
reference ran beside it on a greedy workload; where it is not known it is
recorded as such and is not a failure here (a roadmap row that needs agreement
says so in its own validity rules). The agreement floor holds our engine only:
it is the check that our engine computes the reference's function. A peer is
measured as it is shipped (llama.cpp computes with quantized dot products, so its
greedy picks part from HF's at near-ties); its agreement is recorded, not judged.
An engine that reports prefix-cache hits on a workload that does not declare shared
prefixes measured a warm cache, not the workload: invalid.
The host must have been quiet before the run, per a preflight no more lenient than its
defaults (and before each engine, where each ran under a preflight of its own: a nightly's
cells), and while every engine was measured, per jobs/host_monitor.py: foreign CPUs on
average at most the workload's max_foreign_cpus, no foreign process on the GPU. The CPU of
a nightly cell's siblings (the run's other cells, on other GPUs) is not foreign; it is
recorded beside it (sibling_cpus_mean).
Those are the host's reasons (`host_reasons`), which roadmap rows that need no quiet
host disregard.
"""
from __future__ import annotations

from jobs.preflight import DEFAULTS as PREFLIGHT_DEFAULTS
from jobs.workloads import Workload


OUR_ENGINE = "ours"


def engine_verdict(workload: Workload, metrics: dict[str, dict], held_to_agreement: bool = True) -> dict:
    """One engine's measurement against the workload's rules: {valid, reasons, measured}."""
    # An engine that repeats a short workload has measured for all its repetitions.
    duration = metrics.get("measured_s", metrics["wall_s"])["value"]
    requests = metrics["requests_s"]["count"]
    agreement = metrics.get("agreement", {}).get("value")
    hit_tokens = metrics.get("prefix_cache_hit_tokens", {}).get("value", 0)
    reasons = []
    if duration < workload.min_duration_s:
        reasons.append(f"ran {duration:.3g}s, shorter than the workload's minimum {workload.min_duration_s:g}s")
    if requests < workload.min_requests:
        reasons.append(f"finished {requests} requests, fewer than the workload's minimum {workload.min_requests}")
    if hit_tokens and not workload.shared_prefixes:
        reasons.append(f"{hit_tokens:g} prompt tokens came from the prefix cache, and the workload declares "
                       "no shared prefixes")
    if held_to_agreement and workload.min_agreement is not None and agreement is not None \
            and agreement < workload.min_agreement:
        reasons.append(f"agreement with the reference {agreement:.3g}, below the floor {workload.min_agreement:g}")
    return {"valid": not reasons, "reasons": reasons,
            "measured": {"duration_s": duration, "requests": requests, "agreement": agreement,
                         "prefix_cache_hit_tokens": hit_tokens}}


def lenient_preflight(thresholds: dict | None) -> str | None:
    """Why a quiet preflight is still no evidence of a quiet host: it waited at thresholds
    looser than preflight.DEFAULTS (a longer sampling interval is looser too: each sample
    averages over it, so a shorter burst averages away), or recorded none."""
    if not thresholds:
        return "lenient preflight (its thresholds were not recorded)"
    looser = [f"{name} {thresholds[name]:g} > default {PREFLIGHT_DEFAULTS[name]:g}"
              for name in ("load_threshold", "max_gpu_util", "sample_every_s")
              if thresholds[name] > PREFLIGHT_DEFAULTS[name]]
    if thresholds["window_s"] < PREFLIGHT_DEFAULTS["window_s"]:
        looser.append(f"window_s {thresholds['window_s']:g} < default {PREFLIGHT_DEFAULTS['window_s']:g}")
    return f"lenient preflight ({', '.join(looser)})" if looser else None


def measurement_noise(max_foreign_cpus: float, host: dict | None) -> str | None:
    """Why the host was not quiet while an engine was measured (`host`: its host_monitor summary), or None."""
    if not host or host["foreign_cpus_mean"] is None:
        return "host not monitored during measurement"
    mean, pids = host["foreign_cpus_mean"], host["foreign_gpu_pids"]
    if mean <= max_foreign_cpus and not pids:
        return None
    return (f"noisy during measurement (foreign CPUs mean {mean:g}, max {host['foreign_cpus_max']:g}, "
            f"allowed {max_foreign_cpus:g}" + (f"; foreign GPU processes {pids}" if pids else "") + ")")


def unquiet_before(outcome: dict) -> str | None:
    """Why an engine's own preflight (PreflightOutcome.as_dict()) is no evidence of a quiet host, or None."""
    if outcome["status"] != "quiet":
        return f"host not quiet before its measurement (preflight {outcome['status']}: {outcome['reason']})"
    return lenient_preflight(outcome["thresholds"])


def run_verdict(workload: Workload, metrics_by_engine: dict[str, dict[str, dict]], preflight_status: str, *,
                preflight_thresholds: dict | None = None, host_by_engine: dict[str, dict] | None = None,
                preflight_by_engine: dict[str, dict] | None = None) -> dict:
    """The whole run: a quiet host before it, before each engine that had a preflight of its own
    (`preflight_by_engine`: their outcomes as dicts) and during each engine's measurement
    (`host_by_engine`: host_monitor summaries), and every engine's own verdict. Stored as
    runs.validity, the outcomes and summaries with it."""
    engines = {engine: engine_verdict(workload, metrics, held_to_agreement=engine == OUR_ENGINE)
               for engine, metrics in metrics_by_engine.items()}
    quiet_host = host_verdict(list(metrics_by_engine), preflight_status, preflight_thresholds, host_by_engine or {},
                              workload.max_foreign_cpus, preflight_by_engine)
    reasons = quiet_host["host_reasons"] + [f"{engine}: {reason}" for engine, verdict in engines.items()
                                            for reason in verdict["reasons"]]
    return {"valid": not reasons, "reasons": reasons, **quiet_host, "engines": engines,
            "rules": {"workload": workload.name, "version": workload.version,
                      "min_duration_s": workload.min_duration_s, "min_requests": workload.min_requests,
                      "min_agreement": workload.min_agreement, "max_foreign_cpus": workload.max_foreign_cpus}}


def host_verdict(engines: list[str], preflight_status: str, preflight_thresholds: dict | None,
                 host_by_engine: dict[str, dict], max_foreign_cpus: float,
                 preflight_by_engine: dict[str, dict] | None = None) -> dict:
    """Was the host quiet before the run (its preflight, and each engine's own, where one had
    one) and while each of `engines` was measured (`host_by_engine`: host_monitor summaries)?
    {quiet_host, host_reasons, host, preflight}: the part of runs.validity that roadmap rows
    asking for a quiet host read (bench runs and watched micro-benchmarks alike)."""
    preflight_by_engine = preflight_by_engine or {}
    quiet = preflight_status == "quiet"
    reasons = [] if quiet else [f"host not known to be quiet (preflight {preflight_status})"]
    if quiet and (lenient := lenient_preflight(preflight_thresholds)):
        reasons.append(lenient)
    for engine, outcome in preflight_by_engine.items():
        if before := unquiet_before(outcome):
            reasons.append(f"{engine}: {before}")
    for engine in engines:
        if noise := measurement_noise(max_foreign_cpus, host_by_engine.get(engine)):
            reasons.append(f"{engine}: {noise}")
    return {"quiet_host": quiet, "host_reasons": reasons, "host": host_by_engine, "preflight": preflight_by_engine}
