"""Owns the operational events: messages a worker gave up on (dead letters)."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.events.base import DomainEvent, register


@register
@dataclass(frozen=True)
class MessageDeadLettered(DomainEvent):
    consumer: str
    topic: str
    position: int
    deliveries: int
    error: str
