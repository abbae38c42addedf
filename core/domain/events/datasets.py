"""Owns the events of the dataset streams (``dataset-{dataset_id}``): named, versioned datasets."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.events.base import DomainEvent, register
from core.domain.trace_datasets import DatasetManifest


@register
@dataclass(frozen=True)
class DatasetCreated(DomainEvent):
    """A named, versioned dataset was built from a query over the event log (immutable)."""

    dataset_id: str
    project_id: str
    manifest: DatasetManifest
