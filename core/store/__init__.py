"""Owns persistence: the EventStore port (ports), its SQL adapter (sql, bulk), the schema (tables),
the read models (projections, projectors/), opening a store (factory) and migrations (migrate)."""
