"""Results store: runs and metrics in SQL, per-request rows in Parquet, append-only."""
from jobs.store.corrections import annotate, supersede_metric, supersede_run
from jobs.store.db import Store, open_store
from jobs.store.ingest import IngestError, MetricRecord, RunRecord, fingerprint, record_run
from jobs.store.migrate import upgrade
from jobs.store.ready import open_ready_store

__all__ = [
    "IngestError", "MetricRecord", "RunRecord", "Store", "annotate", "fingerprint",
    "open_ready_store", "open_store", "record_run", "supersede_metric", "supersede_run", "upgrade",
]
