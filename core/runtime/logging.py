"""Owns process log set-up: one handler on the root logger, plain text or JSON lines.

``configure_logging(level, json_lines)`` is called once by each composition root (``agentr worker``,
``agentr run``, ...). With JSON lines (``AGENTR_LOG_JSON=1``) each record is one object with time,
level, logger, message, and every ``extra={...}`` field the caller attached (service, position,
topic, ...), so logs can be filtered by message position or service without parsing text.

``redacted_traceback(exc)`` is what a server logs for an unexpected error: where it happened (each
frame of the exception chain) and the exception types, never their messages, which may quote SQL
parameters or other user content.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any, TextIO

SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
"""Loggers a server library may have given handlers of its own (uvicorn's default log config)."""

# Attributes every LogRecord has; anything else came from ``extra=`` and is emitted as a field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields attached to a record."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def redacted_traceback(exc: BaseException) -> str:
    """Frames and exception types of ``exc`` and its causes, without any exception message."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    blocks = []
    for item in reversed(chain):
        lines = [f"{type(item).__module__}.{type(item).__qualname__} (message withheld)"]
        for frame in traceback.extract_tb(item.__traceback__):
            lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}')
        blocks.append("\n".join(lines))
    return "\n-- which led to --\n".join(blocks)


class _Redacting(logging.Formatter):
    """A formatter whose exception text, with ``redact``, is ``redacted_traceback``: frames and
    types only. Every logger's records pass it (uvicorn's "Exception in ASGI application" too)."""

    redact = False

    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        if self.redact and ei and ei[1] is not None:
            return redacted_traceback(ei[1])
        return super().formatException(ei)


class JsonFormatter(_Redacting):
    """One JSON object per record: time, level, logger, message, extras, exception text."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        payload.update(record_fields(record))
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def _field_value(value: Any) -> str:
    """An extra's value for a text line: as it is when it is one plain token, else JSON-quoted (a
    value holding spaces, ``=``, quotes or control characters cannot forge another field or line)."""
    text = str(value)
    if text and all(c.isprintable() and not c.isspace() and c not in '="' for c in text):
        return text
    return json.dumps(text)


class TextFormatter(_Redacting):
    """Human-readable lines; extras are appended as key=value (values quoted unless plain tokens)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = record_fields(record)
        if extras:
            line += " " + " ".join(f"{k}={_field_value(v)}" for k, v in sorted(extras.items()))
        return line


def configure_logging(
    level: str = "INFO",
    json_lines: bool = False,
    stream: TextIO | None = None,
    *,
    redact_exceptions: bool = False,
) -> None:
    """Replace the root logger's handlers with one that writes to ``stream`` (stderr by default).

    ``redact_exceptions`` (the API server): every logged exception, whoever logs it, is written as
    ``redacted_traceback`` (frames and types, no message), since a request's data can reach an
    exception's message. Loggers of the libraries a server runs (uvicorn's, whose own handlers would
    print full tracebacks) are pointed at the root handler here.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING or ERROR")
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter: _Redacting = JsonFormatter() if json_lines else TextFormatter()
    formatter.redact = redact_exceptions
    handler.setFormatter(formatter)
    for name in SERVER_LOGGERS:
        server_logger = logging.getLogger(name)
        for old in list(server_logger.handlers):
            server_logger.removeHandler(old)
        server_logger.propagate = True
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
