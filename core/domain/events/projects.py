"""Owns the events of the project streams (``project-{project_id}``): projects and API keys."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.events.base import DomainEvent, register


@register
@dataclass(frozen=True)
class ProjectCreated(DomainEvent):
    project_id: str
    name: str
    critic_strategy: str | None = None  # the critic for the project's failed traces (None: the worker's)
    critic_model: str | None = None


@register
@dataclass(frozen=True)
class ApiKeyIssued(DomainEvent):
    project_id: str
    key_id: str
    prefix: str  # the public part shown in listings
    salt: str
    key_hash: str
    scopes: tuple[str, ...]
    label: str = ""


@register
@dataclass(frozen=True)
class ApiKeyRevoked(DomainEvent):
    project_id: str
    key_id: str
