"""Batch jobs around the engine: generation, benchmarks, results store, gates.

Knows SQL and Parquet; knows nothing of Airflow.
"""
