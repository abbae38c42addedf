"""The openai backend's constrained decoding over real HTTP: against a fake vLLM upstream (a stdlib
HTTP server) that checks each request body - the valid actions sent as ``structured_outputs.regex``
(vLLM >= 0.12) or ``guided_regex`` (older vLLM) - and answers as a constraining, an ignoring or a
refusing server would."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from core.domain.trajectory import Message
from core.llm.openai_compat import OpenAIPolicy, action_regex
from core.llm.ports import CannotConstrain, SamplingParams, sample_turns
from core.llm.registry import open_policy

VALID = ["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "click[Buy Now]", "inventory"]
CONVERSATION = [Message("system", "You craft items."), Message("user", "Goal: craft oak planks.")]


class FakeVLLM:
    """Records request bodies; ``field`` is where this server reads the regex (None: it ignores
    every constraint field); ``refuse`` answers 400 to a constrained request; ``answer`` is the text
    it returns. A constrained request whose regex does not admit exactly VALID gets a 400 naming it."""

    def __init__(self, field: str | None, answer: str, refuse: bool = False) -> None:
        self.bodies: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                owner.bodies.append(body)
                status, payload = owner.answer_for(body, field, answer, refuse)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def answer_for(body: dict[str, Any], field: str | None, answer: str, refuse: bool) -> tuple[int, Any]:
        regex = (body.get("structured_outputs") or {}).get("regex") or body.get("guided_regex")
        if regex is not None and refuse:
            return 400, {"object": "error", "message": "structured outputs are not supported"}
        if field == "structured_outputs":
            regex = (body.get("structured_outputs") or {}).get("regex")
        elif field == "guided_regex":
            regex = body.get("guided_regex")
        else:
            regex = None
        if regex is not None:
            admitted = [a for a in VALID if re.fullmatch(regex, f"Thought: t\nAction: {a}")]
            wrong = [
                t
                for t in ("get 2 oak logs", "inventory now", "craft")
                if re.fullmatch(regex, f"Thought: t\nAction: {t}")
            ]
            if admitted != VALID or wrong:
                return 400, {"object": "error", "message": f"regex admits {admitted} and {wrong}"}
        choices = [
            {"index": i, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            for i in range(int(body.get("n", 1)))
        ]
        return 200, {"choices": choices, "usage": {"completion_tokens": 7}}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[FakeVLLM]:
    server = FakeVLLM(*request.param)
    yield server
    server.stop()


GOOD = "Thought: logs first.\nAction: get 1 oak logs"


@pytest.mark.parametrize("upstream", [("structured_outputs", GOOD)], indirect=True)
async def test_sends_the_actions_as_structured_outputs_regex(upstream: FakeVLLM) -> None:
    policy = OpenAIPolicy(upstream.base, "m")
    try:
        rows = await policy.sample_actions(
            [CONVERSATION, CONVERSATION],
            [VALID, None],
            SamplingParams(n=2, temperature=1.0, max_tokens=40, seed=3),
        )
    finally:
        await policy.close()
    assert [[c.text for c in row] for row in rows] == [[GOOD, GOOD], [GOOD, GOOD]]
    constrained, free = sorted(upstream.bodies, key=lambda b: "structured_outputs" not in b)
    assert constrained["structured_outputs"] == {"regex": action_regex(VALID)}
    assert "guided_regex" not in constrained and constrained["n"] == 2
    assert "structured_outputs" not in free and "guided_regex" not in free  # None: free decoding
    assert {constrained["seed"], free["seed"]} == {3, 4}


@pytest.mark.parametrize("upstream", [("guided_regex", GOOD)], indirect=True)
async def test_older_vllm_gets_guided_regex(upstream: FakeVLLM) -> None:
    policy = open_policy(f"{upstream.base}?structured=guided#m")
    try:
        rows = await sample_turns(
            policy, [CONVERSATION], [VALID], SamplingParams(n=1, temperature=0.0, max_tokens=40)
        )
    finally:
        await policy.close()
    assert rows[0][0].text == GOOD
    (body,) = upstream.bodies
    assert body["guided_regex"] == action_regex(VALID) and "structured_outputs" not in body


@pytest.mark.parametrize("upstream", [(None, "Thought: hm.\nAction: get 9 dirt")], indirect=True)
async def test_a_server_that_ignores_the_field_is_named(upstream: FakeVLLM) -> None:
    policy = OpenAIPolicy(upstream.base, "m")
    try:
        with pytest.raises(CannotConstrain, match=r"did not constrain .* ignores structured_outputs\.regex"):
            await policy.sample_actions([CONVERSATION], [VALID], SamplingParams(max_tokens=40))
    finally:
        await policy.close()


@pytest.mark.parametrize("upstream", [("structured_outputs", GOOD, True)], indirect=True)
async def test_a_server_that_refuses_the_field_is_named(upstream: FakeVLLM) -> None:
    policy = OpenAIPolicy(upstream.base, "m")
    try:
        with pytest.raises(CannotConstrain, match=r"cannot constrain actions: it refused structured_outputs"):
            await policy.sample_actions([CONVERSATION], [VALID], SamplingParams(max_tokens=40))
    finally:
        await policy.close()


async def test_a_policy_without_the_capability_is_named() -> None:
    class Plain:
        model_version = "plain"

    with pytest.raises(CannotConstrain, match="plain cannot constrain"):
        await sample_turns(Plain(), [CONVERSATION], [VALID])  # type: ignore[arg-type]
