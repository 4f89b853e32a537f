"""The roadmap file (jobs/data/roadmap.yaml): loading, validation, and sync to `roadmap_rows`.

Validation is complete before anything is written, and each error names the row
and the field, so a bad edit to the file is fixed from the message alone.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml
from sqlalchemy import select

from jobs.errors import RoadmapError, WorkloadError
from jobs.registry import METRICS, MICROBENCHMARKS
from jobs.settings import roadmap_file
from jobs.store.db import Store
from jobs.store.models import RoadmapRow, utcnow
from jobs.workloads import workload_names

ID_PATTERN = re.compile(r"^ROAD-[A-Z0-9]+(-[A-Z0-9]+)*$")
COMPARISONS = {">=": ">=", "≥": ">=", "<=": "<=", "≤": "<="}
VALIDITY_FIELDS = {"preflight_quiet": bool, "min_duration_s": (int, float), "min_samples": int, "min_agreement": (int, float)}
REQUIRED = ("id", "title", "metric", "engine", "comparison", "threshold", "workload", "hardware", "max_age_days")
OPTIONAL = ("validity",)


@dataclass(frozen=True)
class RoadmapRowSpec:
    id: str
    title: str
    metric: str
    engine: str
    comparison: str  # >= | <=
    threshold: float  # absolute, or a ratio to peer_engine's value when peer_engine is set
    peer_engine: str | None
    workload: str
    hardware_class: str
    max_age_days: float
    validity: dict


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RoadmapError(f"{where}: must be a positive number, got {value!r}")
    return float(value)


def _text(raw: dict, name: str, where: str) -> str:
    value = raw[name]
    if not isinstance(value, str) or not value.strip():
        raise RoadmapError(f"{where}: field {name!r}: must be a non-empty string, got {value!r}")
    return value


def _threshold(value, where: str) -> tuple[float, str | None]:
    where = f"{where}: field 'threshold'"
    if isinstance(value, dict):
        if set(value) != {"ratio", "peer"} or not isinstance(value["peer"], str):
            raise RoadmapError(f"{where}: a ratio threshold is {{ratio: <number>, peer: <engine>}}, got {value!r}")
        return _number(value["ratio"], where), value["peer"]
    return _number(value, where), None


def _validity(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RoadmapError(f"{where}: field 'validity': must be a mapping, got {value!r}")
    for key, item in value.items():
        kind = VALIDITY_FIELDS.get(key)
        if kind is None:
            raise RoadmapError(f"{where}: field 'validity.{key}': unknown (known: {', '.join(VALIDITY_FIELDS)})")
        if not isinstance(item, kind) or (kind is not bool and isinstance(item, bool)):
            raise RoadmapError(f"{where}: field 'validity.{key}': wrong type, got {item!r}")
    return dict(value)


def parse_row(raw, index: int, workloads: frozenset[str]) -> RoadmapRowSpec:
    if not isinstance(raw, dict):
        raise RoadmapError(f"row #{index + 1}: must be a mapping, got {raw!r}")
    where = f"row {raw.get('id') or '#' + str(index + 1)}"
    for name in REQUIRED:
        if name not in raw:
            raise RoadmapError(f"{where}: field {name!r}: missing")
    unknown = set(raw) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise RoadmapError(f"{where}: field {sorted(unknown)[0]!r}: unknown")
    if not isinstance(raw["id"], str) or not ID_PATTERN.fullmatch(raw["id"]):
        raise RoadmapError(f"{where}: field 'id': must look like ROAD-AREA-NAME (capitals, digits, dashes)")
    if raw["metric"] not in METRICS:
        raise RoadmapError(f"{where}: field 'metric': unknown metric {raw['metric']!r}")
    if raw["workload"] not in workloads | MICROBENCHMARKS:
        raise RoadmapError(f"{where}: field 'workload': unknown workload {raw['workload']!r}")
    if raw["comparison"] not in COMPARISONS:
        raise RoadmapError(f"{where}: field 'comparison': must be one of >=, <=, ≥, ≤; got {raw['comparison']!r}")
    threshold, peer = _threshold(raw["threshold"], where)
    return RoadmapRowSpec(
        id=raw["id"],
        title=_text(raw, "title", where),
        metric=raw["metric"],
        engine=_text(raw, "engine", where),
        comparison=COMPARISONS[raw["comparison"]],
        threshold=threshold,
        peer_engine=peer,
        workload=raw["workload"],
        hardware_class=_text(raw, "hardware", where),
        max_age_days=_number(raw["max_age_days"], f"{where}: field 'max_age_days'"),
        validity=_validity(raw.get("validity"), where),
    )


def parse_roadmap(text: str, source: str = "roadmap") -> list[RoadmapRowSpec]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RoadmapError(f"{source}: not valid YAML: {e}") from None
    if not isinstance(document, dict) or not isinstance(document.get("rows"), list):
        raise RoadmapError(f"{source}: expected a mapping with a 'rows' list")
    try:
        workloads = workload_names()
    except WorkloadError as e:
        raise RoadmapError(f"{source}: cannot check its workloads: {e}") from None
    rows, seen = [], set()
    for index, raw in enumerate(document["rows"]):
        try:
            row = parse_row(raw, index, workloads)
        except RoadmapError as e:
            raise RoadmapError(f"{source}: {e}") from None
        if row.id in seen:
            raise RoadmapError(f"{source}: row {row.id}: field 'id': duplicate row id")
        seen.add(row.id)
        rows.append(row)
    return rows


def load_roadmap(path: str | Path | None = None) -> list[RoadmapRowSpec]:
    """The roadmap at `path`, else settings.roadmap_file() (ROADGATE_ROADMAP_FILE, else the shipped one)."""
    source = Path(path) if path else roadmap_file()
    try:
        text = source.read_text()
    except OSError as e:
        raise RoadmapError(f"cannot read roadmap file {source}: {e.strerror}") from None
    return parse_roadmap(text, str(source))


def sync_roadmap(store: Store, rows: list[RoadmapRowSpec]) -> None:
    """Makes `roadmap_rows` match the file, in one transaction; rows gone from the file are retired.
    A row's synced_at moves only when the file changed it (new, edited or back from retirement):
    every evaluation syncs, and the exported evidence keeps each version of a row once."""
    now = utcnow()
    with store.session() as session, session.begin():
        existing = {r.id: r for r in session.scalars(select(RoadmapRow))}
        for spec in rows:
            fields = asdict(spec)
            row = existing.pop(spec.id, None)
            if row is not None and row.retired_at is None and all(
                    getattr(row, name) == value for name, value in fields.items()):
                continue
            row = row or RoadmapRow(id=spec.id)
            for name, value in fields.items():
                setattr(row, name, value)
            row.synced_at, row.retired_at = now, None
            session.add(row)
        for gone in existing.values():
            if gone.retired_at is None:
                gone.retired_at = now
