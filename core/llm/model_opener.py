"""Owns how a worker opens its models: a model reference -> ``Policy`` behind the operator's egress
allow-lists (``Settings.egress``, core/domain/egress.py). The critic and splice workers both open
the iteration's model this way; it lives here so that neither imports the other's service module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from core.domain.egress import Egress
from core.llm.ports import Policy
from core.llm.registry import egress_checked as checked_policy_opener
from core.runtime.settings import Settings


def open_model(ref: str, egress: Egress | None = None) -> Policy:
    """A model reference -> Policy (core.llm.registry), for the critic and the splicer; ``egress``:
    the served models this worker may call and where its key goes (core/domain/egress.py)."""
    from core.llm.registry import open_policy

    return open_policy(ref, egress=egress)


def egress_policy_opener(opener: Callable[[str], Policy], settings: Settings) -> Callable[[str], Policy]:
    """A worker's model opener behind ``settings.egress``: ``open_model`` bound to it (so the key goes
    only where it is paired), any other opener checked before it runs."""
    egress = settings.egress
    if opener is open_model:
        opener = functools.partial(open_model, egress=egress)
    return checked_policy_opener(opener, egress)
