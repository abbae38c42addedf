"""Owns the read side's typed queries: what the API, the CLI and the services read from the read
models, one module per topic (projects and keys, runs, traces, pairs, samples, search trees, the
event feed, idempotency records), as typed async functions over the store. The SQL (and any
PostgreSQL / SQLite difference) stays here; callers get plain dicts typed as ``TypedDict`` rows,
dataclasses and ``Page`` values, never a table object."""
