"""Roadmap gates: rows from the versioned YAML file, evaluated into an append-only table."""
