"""Owns reading an OpenEnv server's ``GET /schema``: which action field carries our text action and
which observation field carries the observation text (the rules are in core.envs.openenv's
docstring), and the errors naming the server's fields when a named one is not there."""

from __future__ import annotations

from typing import Any

import httpx

from core.envs.base import EnvError

ACTION_NAMES = ("message", "action", "command", "text", "content")
OBSERVATION_NAMES = ("text", "observation", "message", "prompt", "content", "output", "response")
RESERVED = ("reward", "done", "metadata")  # beside every observation, never its text


def _is_string(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "string":
        return True
    return any(isinstance(s, dict) and s.get("type") == "string" for s in schema.get("anyOf", []))


def pick_field(schema: dict[str, Any], preferred: tuple[str, ...], *, required_first: bool) -> str | None:
    """The text field of an object's JSON schema: the one required string field (when
    ``required_first``), else the one string field, else the first ``preferred`` name among the
    string fields; None when none stands out."""
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k not in RESERVED}
    strings = [k for k, v in props.items() if isinstance(v, dict) and _is_string(v)]
    if required_first:
        required = [k for k in schema.get("required") or [] if k in strings]
        if len(required) == 1:
            return required[0]
    if len(strings) == 1:
        return strings[0]
    return next((name for name in preferred if name in strings), None)


async def fetch_schema(base_url: str, wait_s: float, who: str) -> dict[str, Any] | None:
    """``GET BASE/schema`` as a dict; None when the server has none (not 200, not a JSON object);
    EnvError naming the URL when it cannot be reached."""
    url = f"{base_url}/schema"
    try:
        async with httpx.AsyncClient(timeout=wait_s) as client:
            response = await client.get(url)
    except httpx.HTTPError as exc:
        raise EnvError(f"{who}: cannot reach {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        return None
    try:
        payload = response.json()
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def resolve_fields(
    schema: dict[str, Any] | None,
    action_field: str | None,
    observation_field: str | None,
    *,
    who: str,
    where: str,
) -> tuple[str, str | None]:
    """(action field, observation field or None) for a server's schema and the fields named in the
    URI (None: read them from the schema)."""
    if schema is None:
        if action_field is None:
            raise EnvError(
                f"{who}: {where} has no /schema to read the action field from; name it: ?action_field=FIELD"
            )
        return action_field, observation_field
    action = schema.get("action") or {}
    fields = sorted(k for k in (action.get("properties") or {}) if k != "metadata")
    if action_field is None:
        action_field = pick_field(action, ACTION_NAMES, required_first=True)
        if action_field is None:
            raise EnvError(
                f"{who}: cannot tell which action field of {where} carries a text action (fields: "
                f"{', '.join(fields) or 'none'}); name it: ?action_field=FIELD"
            )
    elif fields and action_field not in fields:
        raise EnvError(
            f"{who}: unknown action field {action_field!r}: the action schema of {where} has "
            f"{', '.join(fields)}"
        )
    others = [k for k in action.get("required") or [] if k != action_field]
    if others:
        raise EnvError(
            f"{who}: the action schema of {where} also requires {', '.join(others)}, which a text "
            f"action in {action_field!r} cannot fill"
        )
    observation = schema.get("observation") or {}
    if observation_field is None:
        return action_field, pick_field(observation, OBSERVATION_NAMES, required_first=False)
    known = sorted(k for k in (observation.get("properties") or {}) if k not in RESERVED)
    if known and observation_field not in known:
        raise EnvError(
            f"{who}: unknown observation field {observation_field!r}: the observation schema of "
            f"{where} has {', '.join(known)}"
        )
    return action_field, observation_field
