"""Owns the per-noun projectors (read-model updaters); ``core.store.projections`` dispatches to them."""
