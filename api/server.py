"""Owns how the API process is served: the uvicorn configuration ``agentr serve`` runs.

* Logging: the process's own set-up (``core.runtime.logging``, exceptions redacted: a traceback
  carries frames and types, never a message quoting request data); uvicorn's access log is off
  (the API writes its own structured one).
* Client addresses: uvicorn's proxy headers are OFF unless ``AGENTR_TRUSTED_PROXIES`` names the
  reverse proxies (addresses or networks, comma-separated) whose ``X-Forwarded-For`` /
  ``X-Forwarded-Proto`` may set the client address. Otherwise the TCP peer is the client, so a
  client behind a local sidecar cannot pick the address the failed-auth limit counts.
"""

from __future__ import annotations

from typing import Any

from core.runtime.settings import Settings


def trusted_proxies(settings: Settings) -> list[str]:
    """The addresses/networks of ``AGENTR_TRUSTED_PROXIES``, or [] (believe no forwarding header)."""
    return [part.strip() for part in (settings.trusted_proxies or "").split(",") if part.strip()]


def uvicorn_config(app: Any, settings: Settings, host: str, port: int) -> Any:
    """The ``uvicorn.Config`` ``agentr serve`` runs ``app`` under."""
    import uvicorn

    proxies = trusted_proxies(settings)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,  # our logging set-up (configure_logging with redact_exceptions)
        access_log=False,
        timeout_graceful_shutdown=10,
        proxy_headers=bool(proxies),
        # with proxy_headers off uvicorn installs no ProxyHeadersMiddleware, so this is unused;
        # given anyway, so its FORWARDED_ALLOW_IPS environment default never applies
        forwarded_allow_ips=proxies or [],
        server_header=False,
    )
