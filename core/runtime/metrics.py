"""Owns the Prometheus metrics of workers and the relay (prometheus_client, default registry).

Counters are labelled by ``service`` (the consumer group name) so several services in one process
(embedded mode) stay apart. ``serve_metrics(port)`` exposes them over HTTP for ``agentr worker
--metrics-port``; the API process exposes the same registry at ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

HANDLED = Counter("agentr_worker_handled", "Messages whose handler ran and committed.", ["service"])
SKIPPED = Counter(
    "agentr_worker_skipped", "Redelivered messages skipped because the tracking table had them.", ["service"]
)
FAILED = Counter("agentr_worker_failed", "Handler runs that raised (left pending for a retry).", ["service"])
RETRIED = Counter("agentr_worker_retried", "Messages reclaimed from an idle or dead consumer.", ["service"])
DEAD_LETTERED = Counter("agentr_worker_dead_lettered", "Messages moved to a dead-letter stream.", ["service"])
LAG = Gauge(
    "agentr_worker_lag", "Store's last position minus the newest position this worker handled.", ["service"]
)
MODELS_OPEN = Gauge(
    "agentr_worker_models_open", "Models a worker's model cache holds open (loaded, not closed).", ["cache"]
)
MODELS_OPENED = Counter("agentr_worker_models_opened", "Models a worker's model cache loaded.", ["cache"])
RELAY_PUBLISHED = Counter("agentr_relay_published", "Events the relay published to the bus.", ["relay"])
RELAY_ERRORS = Counter("agentr_relay_errors", "Relay publish attempts that failed (bus down).", ["relay"])
RELAY_LAG = Gauge("agentr_relay_lag", "Store's last position minus the relay checkpoint.", ["relay"])


def serve_metrics(port: int, host: str = "0.0.0.0") -> None:
    """Serve the default registry as Prometheus text on ``http://host:port/metrics``."""
    start_http_server(port, addr=host)
