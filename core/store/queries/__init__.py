"""Owns the typed read queries the API routes run against the read models (one module per area):
each takes plain values and answers dataclasses, so no route builds SQL on ``core.store.tables``."""
