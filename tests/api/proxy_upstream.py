"""A tiny real OpenAI-compatible upstream for the capture proxy's tests (no model: canned answers).

``upstream()`` serves, on 127.0.0.1 over real HTTP (the standard library's threading server):

* ``GET /v1/models``: one model, ``fake``;
* ``POST /v1/chat/completions``: a ``chat.completion`` whose assistant content is ``Upstream.answer``
  (a test may set it, NUL characters included), or with ``"stream": true`` the same answer as
  Server-Sent Events (one ``chat.completion.chunk`` per character, then ``[DONE]``); a body that is
  not a JSON object with a ``messages`` list of objects (and, when given, a string ``model`` and a
  boolean ``stream``) is a 400 with OpenAI's error shape, as a real server refuses it.

A stream is sent with chunked transfer encoding, one HTTP chunk per event; with ``Upstream.linger_s``
set, the server keeps the response open that long after ``[DONE]`` before ending it (what a busy model
server does while it tears the request down), so a client that closes at ``[DONE]`` closes first.

It counts the calls it answered (``Upstream.calls``), so a test can tell whether the proxy forwarded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Upstream:
    url: str  # the OpenAI base URL, ending in /v1
    answer: str = "ok"
    calls: int = 0
    linger_s: float = 0.0  # a stream stays open this long after [DONE]
    lock: threading.Lock = field(default_factory=threading.Lock)


def _completion(answer: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _chunk(delta: dict[str, Any], finish: str | None, model: str) -> bytes:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _problem(body: Any) -> str | None:
    """Why a chat-completions body is refused (what an OpenAI server checks of the fields the proxy's
    document names: tests/api/test_api_schemathesis_cli.py fuzzes against it), or None."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "messages: a list of objects is required"
    if "model" in body and not isinstance(body["model"], str):
        return "model: a string is required"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream: a boolean is required"
    return None


def _handler(state: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self._send(404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')
                return
            models = {
                "object": "list",
                "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "t"}],
            }
            self._send(200, json.dumps(models).encode())

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')
                return
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            problem = _problem(body)
            if problem is not None:
                error = {"error": {"message": problem, "type": "invalid_request_error"}}
                self._send(400, json.dumps(error).encode())
                return
            with state.lock:
                state.calls += 1
                answer = state.answer
            model = str(body.get("model") or "fake")
            if not body.get("stream"):
                self._send(200, json.dumps(_completion(answer, model)).encode())
                return
            chunks = [_chunk({"role": "assistant", "content": ""}, None, model)]
            chunks += [_chunk({"content": char}, None, model) for char in answer]
            chunks += [_chunk({}, "stop", model), b"data: [DONE]\n\n"]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for chunk in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                if state.linger_s:
                    time.sleep(state.linger_s)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:  # the proxy went away first
                self.close_connection = True

    return Handler


@contextmanager
def upstream(answer: str = "ok") -> Iterator[Upstream]:
    """A running upstream (see the module docstring); stopped on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = Upstream(url=f"http://127.0.0.1:{server.server_address[1]}/v1", answer=answer)
    server.RequestHandlerClass = _handler(state)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
