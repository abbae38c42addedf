"""Owns an environment URI's query options (``?key=value&...``): parsed strictly, each key given at most
once, taken one by one with their defaults (numbers checked), and whatever is left refused by name.
Shared by the registry's built-in schemes and the adapters that parse their own URIs (OpenEnv)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

from core.envs.base import EnvError


class UriOptions:
    """A URI's query options: each given at most once, taken one by one, the rest refused by name."""

    def __init__(self, uri: str, query: str) -> None:
        self.uri = uri
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError as exc:
            raise EnvError(f"malformed environment URI {uri!r}: bad query string {query!r}") from exc
        self.values: dict[str, str] = {}
        for key, value in pairs:
            if key in self.values:
                raise EnvError(f"environment URI {uri!r}: option {key!r} given twice")
            self.values[key] = value

    def take(self, key: str, default: str) -> str:
        return self.values.pop(key, default)

    def take_number(self, key: str, default: float, cast: Callable[[str], float] = int) -> float:
        raw = self.values.pop(key, None)
        if raw is None:
            return default
        try:
            return cast(raw)
        except ValueError as exc:
            raise EnvError(f"environment URI {self.uri!r}: option {key}={raw!r} is not a number") from exc

    def finish(self, env: str, allowed: str) -> None:
        if self.values:
            unknown = ", ".join(sorted(self.values))
            raise EnvError(
                f"environment URI {self.uri!r}: unknown option(s) {unknown} for {env} (known: {allowed})"
            )
