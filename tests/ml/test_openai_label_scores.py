"""Exact label scoring over HTTP without a local tokenizer: the openai backend against `agentr model
serve` (a subprocess) uses vLLM's ``/tokenize`` + token-id echo, and equals the hf backend's own
scores; a server without ``/tokenize`` falls back to ``top_logprobs`` once, and says so."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from core.domain.trajectory import Message
from core.llm.hf import HFPolicy
from core.llm.openai_compat import OpenAIPolicy
from tests.support import TinySpec

LABELS = ["Good", "Bad", "Uncertain", "Thought: the first wrong action"]  # multi-token labels too
CONVERSATIONS = [
    [Message("system", "You judge actions."), Message("user", "Goal: craft oak planks. Action: get 1 log")],
    [
        Message("system", "You judge actions."),
        Message("user", "Goal: craft stick."),
        Message("assistant", "Thought: planks first.\nAction: get 2 planks"),
        Message("user", "Got 2 oak planks"),
    ],
    [Message("user", "Is 'craft 4 sticks using 2 planks' right?")],
]


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name="judge", seed=3)


async def test_tokenize_endpoint_matches_the_local_chat_template(server: str, local: HFPolicy) -> None:
    root = server.removesuffix("/v1")
    async with httpx.AsyncClient() as client:
        chat = await client.post(
            f"{root}/tokenize",
            json={
                "model": "judge",
                "messages": [{"role": m.role, "content": m.content} for m in CONVERSATIONS[1]],
                "add_generation_prompt": True,
                "add_special_tokens": False,
            },
        )
        plain = await client.post(
            f"{root}/tokenize", json={"prompt": "Uncertain", "add_special_tokens": False}
        )
        both = await client.post(f"{root}/tokenize", json={"prompt": "x", "messages": []})
    assert chat.status_code == 200, chat.text
    expected = local.encode(local.render(CONVERSATIONS[1]))
    assert chat.json()["tokens"] == expected
    assert chat.json()["count"] == len(expected)
    assert plain.json()["tokens"] == local.encode("Uncertain")
    assert both.status_code == 400 and "exactly one of prompt or messages" in both.text


async def test_label_scores_over_http_equal_the_local_scores_without_a_tokenizer(
    server: str, local: HFPolicy
) -> None:
    remote = OpenAIPolicy(server, "judge")  # no template_from: nothing local but the URL
    try:
        assert remote.score_mode is None
        over_http = await remote.score_labels(CONVERSATIONS, LABELS)
        assert remote.score_mode == "tokenize"  # detected once, cached
        again = await remote.score_labels(CONVERSATIONS[1:], LABELS[:2])
    finally:
        await remote.close()
    in_process = await local.score_labels(CONVERSATIONS, LABELS)
    assert any(len(local.encode(label)) > 1 for label in LABELS)
    for a, b in zip(over_http, in_process, strict=True):
        assert set(a) == set(LABELS)
        for label in LABELS:
            assert math.isfinite(a[label])
            assert a[label] == pytest.approx(b[label], abs=1e-3)
    for a, b in zip(again, in_process[1:], strict=True):
        for label in LABELS[:2]:
            assert a[label] == pytest.approx(b[label], abs=1e-3)


async def test_token_id_prompts_echo_their_log_probabilities(server: str, local: HFPolicy) -> None:
    ids = local.encode(local.render(CONVERSATIONS[0])) + local.encode("Good")
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{server}/completions",
            json={"model": "judge", "prompt": [ids, ids[:5]], "max_tokens": 1, "echo": True, "logprobs": 0},
        )
        bad = await client.post(
            f"{server}/completions",
            json={"model": "judge", "prompt": [10**9], "max_tokens": 1, "echo": True, "logprobs": 0},
        )
    assert answer.status_code == 200, answer.text
    choices = answer.json()["choices"]
    assert len(choices) == 2
    echoed = choices[0]["logprobs"]["token_logprobs"]
    assert len(echoed) == len(ids) + 1  # the prompt's tokens and the one generated token
    assert echoed[0] is None
    expected = (await local.prompt_logprobs([ids]))[0].token_logprobs
    assert echoed[1 : len(ids)] == pytest.approx(expected[1:], abs=1e-4)
    assert bad.status_code == 400 and "token ids" in bad.text


class NoTokenize:
    """An OpenAI-like server without /tokenize (as OpenAI itself): 404 there, top_logprobs on chat."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", 0))
                self.rfile.read(length)
                outer.paths.append(self.path)
                if self.path.endswith("/chat/completions"):
                    top = [{"token": "Good", "logprob": -0.1}, {"token": "B", "logprob": -2.5}]
                    lp = {"content": [{"token": "Good", "logprob": -0.1, "top_logprobs": top}]}
                    message = {"role": "assistant", "content": "Good"}
                    body = {"choices": [{"index": 0, "message": message, "logprobs": lp}]}
                    status, text = 200, json.dumps(body)
                else:
                    status, text = 404, '{"detail": "Not Found"}'
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


async def test_a_server_without_tokenize_falls_back_to_top_logprobs_once() -> None:
    server = NoTokenize()
    policy = OpenAIPolicy(server.base, "m", retries=0)
    try:
        first = await policy.score_labels(CONVERSATIONS[:1], ["Good", "Bad", "Uncertain"])
        assert policy.score_mode == "top_logprobs"
        second = await policy.score_labels(CONVERSATIONS[:1], ["Good"])
    finally:
        await policy.close()
        server.httpd.shutdown()
    assert first == [{"Good": -0.1, "Bad": -2.5, "Uncertain": -math.inf}]
    assert second == [{"Good": -0.1}]
    assert server.paths.count("/tokenize") == 1  # probed once, then remembered
    assert server.paths.count("/v1/chat/completions") == 2


def test_score_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="score_mode must be one of"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", score_mode="guess")
    with pytest.raises(ValueError, match="needs template_from"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", score_mode="echo")
