"""Owns the egress rules: which served models and remote environments the workers may call, and which
of them receive the server's own model credential (pure, stdlib only).

Model references (``http(s)://HOST:PORT/PATH#model``) and environment URIs (``agentgym+http://``,
``openenv+http://``, ...) arrive over the API from run and ingest keys; the operator decides which
outside services exist: ``AGENTR_ALLOWED_MODEL_URLS`` and ``AGENTR_ALLOWED_ENV_URLS``, each a
comma-separated list of base URLs, empty by default (API callers may then name only model folders and
local environments). ``OPENAI_API_KEY`` is sent only to served models under
``AGENTR_OPENAI_API_KEY_URLS``; any other served model gets no ``Authorization`` header.

A URL lies under a base URL when, parsed (not compared as text), it has the base's scheme, host
(case-insensitive; an IP address compared as an address, IPv6 included) and port (the scheme's
default port when none is written), and the base's path segments are the first segments of its path
(percent-decoded; a trailing slash changes nothing; ``/v1`` does not cover ``/v10``). Query and
fragment (a model's ``#name``, ``?model=``) do not take part. A URL is refused outright, whatever the
list, when it carries user information (``user@host``: also the ``allowed.example@evil`` trick), a
``.`` or ``..`` path segment, a percent sign in its host, or any character outside printable ASCII,
or a backslash: the parser that checks and the client that connects can then never disagree about
where the request goes.

An environment URI's transport URL is what follows its ``agentgym+`` / ``openenv+`` prefix
(``agentgym+http://envs:36001/textcraft`` -> ``http://envs:36001/textcraft``); an ``openenv+ws://`` URI
needs a ``ws://`` base. URIs without a host (``textcraft``, ``tau2:retail``, ``python:...``) are local.

``Egress.local()`` is the command line's: on the user's own machine every URL the user types is
called and ``OPENAI_API_KEY`` goes with it, as before. The API checks at the edge (422 naming the
setting), and each worker checks again before it opens a model or an environment.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

MODEL_URLS_SETTING = "AGENTR_ALLOWED_MODEL_URLS"
ENV_URLS_SETTING = "AGENTR_ALLOWED_ENV_URLS"
KEY_URLS_SETTING = "AGENTR_OPENAI_API_KEY_URLS"

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
MODEL_SCHEMES = ("http", "https")
REMOTE_ENV_PREFIXES = ("agentgym+", "openenv+")
_PRINTABLE_ASCII = re.compile(r"^[\x21-\x7e]*$")


class UrlProblem(ValueError):
    """A URL that cannot be checked (malformed, or written in a way that is refused outright)."""


@dataclass(frozen=True)
class BaseUrl:
    """A parsed http(s)/ws(s) URL, normalised for comparison: scheme, host, port, path segments."""

    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, schemes: Iterable[str] = DEFAULT_PORTS) -> BaseUrl:
        """Parse ``text``; UrlProblem says why it cannot be compared safely."""
        text = text.strip()
        if not _PRINTABLE_ASCII.match(text) or "\\" in text:
            raise UrlProblem("has a character other than printable ASCII (or a backslash)")
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:  # e.g. a port that is not a number, an unclosed [IPv6
            raise UrlProblem(f"is not a valid URL ({exc})") from None
        scheme = parts.scheme.lower()
        allowed = tuple(schemes)
        if scheme not in allowed:
            raise UrlProblem(f"is not an {' / '.join(s + '://' for s in allowed)} URL")
        if "@" in parts.netloc:
            raise UrlProblem("carries user information (user@host): not allowed in a service URL")
        host = parts.hostname or ""
        if not host:
            raise UrlProblem("has no host")
        if "%" in host:
            raise UrlProblem("has a percent sign in its host")
        with contextlib.suppress(ValueError):  # one spelling per address (IPv6 compressed)
            host = str(ipaddress.ip_address(host))
        segments = tuple(unquote(s) for s in parts.path.split("/") if s)
        if any(s in (".", "..") or "/" in s or "\\" in s for s in segments):
            raise UrlProblem("has a '.' or '..' path segment (or an encoded slash)")
        return cls(scheme, host, port if port is not None else DEFAULT_PORTS[scheme], segments)

    def covers(self, other: BaseUrl) -> bool:
        """Whether ``other`` lies under this base URL (same origin, path segment prefix)."""
        return (self.scheme, self.host, self.port) == (
            other.scheme,
            other.host,
            other.port,
        ) and other.segments[: len(self.segments)] == self.segments

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/{'/'.join(self.segments)}"


def parse_url_list(
    text: str | None, setting: str, schemes: Iterable[str] = DEFAULT_PORTS
) -> tuple[BaseUrl, ...]:
    """The comma-separated base URLs of ``setting``; ValueError naming the setting and the entry."""
    bases = []
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        if urlsplit(entry.strip()).query or "#" in entry:
            raise ValueError(f"{setting}: {entry.strip()!r} is a base URL: no query or fragment")
        try:
            bases.append(BaseUrl.parse(entry, schemes))
        except UrlProblem as exc:
            raise ValueError(f"{setting}: {entry.strip()!r} {exc}") from None
    return tuple(bases)


def is_remote_env(uri: str) -> bool:
    """Whether the environment URI names a service over the network (anything with a host)."""
    try:
        parts = urlsplit(uri.strip())
    except ValueError:
        return True  # unparseable: treated as remote, so the check refuses it
    return bool(parts.netloc) or parts.scheme.startswith(REMOTE_ENV_PREFIXES)


@dataclass(frozen=True)
class Egress:
    """The outside services a worker may call, and where the model credential goes (module docstring)."""

    models: tuple[BaseUrl, ...] = ()
    envs: tuple[BaseUrl, ...] = ()
    keyed: tuple[BaseUrl, ...] = ()
    api_key: str | None = field(default=None, repr=False)
    anything: bool = False
    """The command line's rule: every URL allowed, the key sent to each (``Egress.local``)."""

    @classmethod
    def local(cls, api_key: str | None) -> Egress:
        return cls(api_key=api_key, anything=True)

    def with_model(self, ref: str, *, keyed: bool) -> Egress:
        """This egress plus the served model ``ref`` (and the key for it when ``keyed``): what a
        command-line run adds for the URL its user typed."""
        base = BaseUrl.parse(ref, MODEL_SCHEMES)
        return Egress(
            models=(*self.models, base),
            envs=self.envs,
            keyed=(*self.keyed, base) if keyed else self.keyed,
            api_key=self.api_key,
            anything=self.anything,
        )

    def with_env(self, uri: str) -> Egress:
        """This egress plus the remote environment ``uri`` (see ``with_model``)."""
        base = BaseUrl.parse(_env_transport(uri))
        return Egress(self.models, (*self.envs, base), self.keyed, self.api_key, self.anything)

    def model_problem(self, ref: str) -> str | None:
        """Why the served model ``ref`` (an http(s) URL) may not be called, naming the setting; None
        when it may."""
        if self.anything:
            return None
        try:
            url = BaseUrl.parse(ref, MODEL_SCHEMES)
        except UrlProblem as exc:
            return f"model URL {ref.strip()} {exc}: refused whatever {MODEL_URLS_SETTING} holds"
        if not any(base.covers(url) for base in self.models):
            return (
                f"model URL {ref.strip()} is not in {MODEL_URLS_SETTING} (the served models this server "
                "may call)"
            )
        return None

    def env_problem(self, uri: str) -> str | None:
        """Why the environment ``uri`` may not be opened, naming the setting; None when it may (a
        local environment always may)."""
        if self.anything or not is_remote_env(uri):
            return None
        try:
            url = BaseUrl.parse(_env_transport(uri))
        except UrlProblem as exc:
            return f"environment URI {uri.strip()} {exc}: refused whatever {ENV_URLS_SETTING} holds"
        if not any(base.covers(url) for base in self.envs):
            return (
                f"environment URI {uri.strip()} is not in {ENV_URLS_SETTING} (the remote environments "
                "this server may call)"
            )
        return None

    def model_key(self, ref: str) -> str | None:
        """The credential to send to the served model ``ref``: the server's key when ``ref`` lies under
        a base it is paired with (``AGENTR_OPENAI_API_KEY_URLS``), else None."""
        if self.api_key is None or self.model_problem(ref) is not None:
            return None
        if self.anything:
            return self.api_key
        try:
            url = BaseUrl.parse(ref, MODEL_SCHEMES)
        except UrlProblem:
            return None
        return self.api_key if any(base.covers(url) for base in self.keyed) else None


def _env_transport(uri: str) -> str:
    """``agentgym+http://h:p/name`` -> ``http://h:p/name`` (the URL the environment client calls)."""
    uri = uri.strip()
    for prefix in REMOTE_ENV_PREFIXES:
        if uri.lower().startswith(prefix):
            return uri[len(prefix) :]
    return uri
