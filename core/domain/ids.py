"""Owns identifiers: id generation and the stream-id naming scheme every process agrees on."""

from __future__ import annotations

import uuid


def new_id() -> str:
    """A fresh random identifier (UUID4, canonical text form)."""
    return str(uuid.uuid4())


def derived_id(*parts: object) -> str:
    """A deterministic identifier from parts (UUID5): retries and replays produce the same id."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "agentr:" + "/".join(str(p) for p in parts)))


def run_stream(run_id: str) -> str:
    return f"run-{run_id}"


def tree_stream(tree_id: str) -> str:
    return f"tree-{tree_id}"


def pair_stream(pair_id: str) -> str:
    return f"pair-{pair_id}"


def trace_stream(trace_id: str) -> str:
    return f"trace-{trace_id}"


def dataset_stream(dataset_id: str) -> str:
    return f"dataset-{dataset_id}"


def otlp_stream(buffer_id: str) -> str:
    return f"otlp-{buffer_id}"


def episodes_stream(buffer_id: str) -> str:
    return f"episodes-{buffer_id}"


def project_stream(project_id: str) -> str:
    return f"project-{project_id}"


def system_stream(name: str) -> str:
    return f"system-{name}"
