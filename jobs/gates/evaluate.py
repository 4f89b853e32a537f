"""`roadgate gates evaluate`: one appended evaluation per active roadmap row.

The evidence for each row comes from the SQL view v_gate_evidence; the verdict
is validity first (is the measurement trustworthy?), then the threshold. A ratio
row compares with the peer measured in the same run, and only if the peer ran like
itself: a peer figure far off its own series' recent history (a starved or broken
peer) makes the ratio unusable, not a PASS.
"""
from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import JSON, DateTime, Float, Integer, String, select, text

from jobs.registry import METRICS
from jobs.store.db import Store
from jobs.store.models import GateEvaluation, RoadmapRow, utcnow

PASS, GATING, STALE, INVALID, NO_DATA = "PASS", "GATING", "STALE", "INVALID", "NO_DATA"
# A peer's figure is usable when within this factor of the median of its own last
# PEER_HISTORY figures (same series, earlier runs); llama.cpp starved by a busy host
# measured 2.47 tok/s against its usual 52.9.
PEER_FLOOR = 0.5
PEER_HISTORY = 10

EVIDENCE_QUERY = text("SELECT * FROM v_gate_evidence").columns(
    roadmap_row_id=String, metric_id=Integer, run_id=String, run_status=String, fingerprint=String,
    series=String, started_at=DateTime, finished_at=DateTime, preflight_status=String, validity=JSON, value=Float,
    count=Integer, agreement=Float, peer_value=Float, peer_series=String,
)
PEER_HISTORY_QUERY = text(
    "SELECT value FROM v_metric_history WHERE series = :series AND metric = :metric AND started_at < :before "
    "AND run_status = 'ok' ORDER BY started_at DESC LIMIT :n")


@dataclass(frozen=True)
class Verdict:
    status: str
    reason: str
    target: float | None = None


def _invalid_because(row: RoadmapRow, ev) -> str | None:
    rules = row.validity or {}
    if ev.run_status != "ok":
        return f"run {ev.run_id} ended with status {ev.run_status!r}"
    if rules.get("preflight_quiet", True):
        if ev.preflight_status != "quiet":
            return f"preflight was {ev.preflight_status!r}, not quiet"
        # Quiet at the start is not enough: the bench job's verdict on the host also covers
        # a preflight looser than its defaults and noise while each engine was measured.
        host_reasons = (ev.validity or {}).get("host_reasons")
        if host_reasons:
            return "; ".join(host_reasons)
    # The bench job's verdict on the row's engine and its peer (too short, too few requests,
    # agreement below the workload's floor); the quiet host is the preflight rule above.
    judged = (ev.validity or {}).get("engines", {})
    for engine in (row.engine, row.peer_engine):
        if engine in judged and not judged[engine]["valid"]:
            return f"{engine} measurement invalid: {'; '.join(judged[engine]['reasons'])}"
    if "min_duration_s" in rules:
        duration = (ev.finished_at - ev.started_at).total_seconds() if ev.finished_at else None
        if duration is None or duration < rules["min_duration_s"]:
            return f"run lasted {duration}s, needs at least {rules['min_duration_s']}s"
    if "min_samples" in rules and (ev.count or 0) < rules["min_samples"]:
        return f"{ev.count} samples, needs at least {rules['min_samples']}"
    if "min_agreement" in rules and (ev.agreement is None or ev.agreement < rules["min_agreement"]):
        return f"agreement with the reference {ev.agreement}, needs at least {rules['min_agreement']}"
    if row.peer_engine and ev.peer_value is None:
        return f"no {row.peer_engine} {row.metric} in the same run to compare with"
    return None


def _peer_off_its_history(row: RoadmapRow, ev, peer_history: list[float]) -> str | None:
    if not row.peer_engine or not peer_history:
        return None
    usual = statistics.median(peer_history)
    lower_is_better = METRICS[row.metric].better == "lower"
    ratio = usual / ev.peer_value if lower_is_better else ev.peer_value / usual
    if ratio >= PEER_FLOOR:
        return None
    return (f"{row.peer_engine} {row.metric} {ev.peer_value:g} is far off its own history (median {usual:g} "
            f"of its last {len(peer_history)} runs; usable within {1 / PEER_FLOOR:g}x): the ratio is unusable")


def judge(row: RoadmapRow, ev, now: datetime, peer_history: list[float] = ()) -> Verdict:
    """The status of one row given its newest evidence (None: there is none) and, for a
    ratio row, the peer's earlier figures in its series, newest first."""
    if ev is None or ev.metric_id is None:
        return Verdict(NO_DATA, f"no {row.engine} {row.metric} on {row.workload}/{row.hardware_class}")
    age_days = (now - (ev.finished_at or ev.started_at)).total_seconds() / 86400
    if age_days > row.max_age_days:
        return Verdict(STALE, f"newest evidence is {age_days:.1f} days old, {row.max_age_days:g} allowed")
    invalid = _invalid_because(row, ev) or _peer_off_its_history(row, ev, list(peer_history))
    if invalid:
        return Verdict(INVALID, invalid)
    target = row.threshold * ev.peer_value if row.peer_engine else row.threshold
    met = ev.value >= target if row.comparison == ">=" else ev.value <= target
    peer = f" ({row.threshold:g} x {row.peer_engine} {ev.peer_value:g})" if row.peer_engine else ""
    return Verdict(PASS if met else GATING, f"{ev.value:g} {row.comparison if met else 'fails ' + row.comparison} {target:g}{peer}", target)


def _peer_history(session, row: RoadmapRow, ev) -> list[float]:
    if not row.peer_engine or ev is None or ev.peer_series is None:
        return []
    return list(session.scalars(PEER_HISTORY_QUERY, {"series": ev.peer_series, "metric": row.metric,
                                                     "before": ev.started_at, "n": PEER_HISTORY}))


def evaluate_gates(store: Store, now: datetime | None = None) -> list[GateEvaluation]:
    """Appends one evaluation per active roadmap row, in one transaction; returns them."""
    now = now or utcnow()
    batch_id = str(uuid.uuid4())
    with store.session() as session, session.begin():
        rows = {r.id: r for r in session.scalars(select(RoadmapRow).where(RoadmapRow.retired_at.is_(None)))}
        evidence = {ev.roadmap_row_id: ev for ev in session.execute(EVIDENCE_QUERY)}
        evaluations = []
        for row_id in sorted(rows):
            ev = evidence.get(row_id)
            verdict = judge(rows[row_id], ev, now, _peer_history(session, rows[row_id], ev))
            has_data = ev is not None and ev.metric_id is not None
            evaluations.append(GateEvaluation(
                batch_id=batch_id, roadmap_row_id=row_id, evaluated_at=now, status=verdict.status,
                reason=verdict.reason, target=verdict.target,
                run_id=ev.run_id if has_data else None, metric_id=ev.metric_id if has_data else None,
                value=ev.value if has_data else None, peer_value=ev.peer_value if has_data else None,
            ))
        session.add_all(evaluations)
    return evaluations
