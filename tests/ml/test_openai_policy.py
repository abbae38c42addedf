"""The openai Policy backend over real HTTP: against `agentr model serve` running as a subprocess, and
against a small stdlib HTTP server that misbehaves on purpose (5xx, malformed bodies)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import torch

from core.domain.trajectory import Message
from core.llm.hf import HFPolicy
from core.llm.openai_compat import OpenAIPolicy
from core.llm.ports import PolicyError
from tests.support import TinySpec, free_port

LABELS = ["Good", "Bad", "Uncertain"]
CONVERSATIONS = [
    [Message("system", "You craft items."), Message("user", "Goal: craft oak planks.")],
    [
        Message("system", "You craft items."),
        Message("user", "Goal: craft stick."),
        Message("assistant", "Thought: planks first.\nAction: get 2 planks"),
        Message("user", "Got 2 oak planks"),
    ],
]


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name="tiny-llama", seed=1)


async def test_models_endpoint_and_model_discovery(server: str) -> None:
    policy = OpenAIPolicy(server)
    try:
        assert await policy.list_models() == ["tiny-llama"]
        await policy.sample(CONVERSATIONS[:1], max_tokens=2, seed=0)
        assert policy.model == "tiny-llama"
    finally:
        await policy.close()


async def test_samples_over_http_equal_the_local_backend(server: str, local: HFPolicy) -> None:
    remote = OpenAIPolicy(server, "tiny-llama")
    try:
        over_http = await remote.sample(
            CONVERSATIONS, n=3, temperature=1.0, max_tokens=12, seed=21, logprobs=True
        )
    finally:
        await remote.close()
    in_process = await local.sample(
        CONVERSATIONS, n=3, temperature=1.0, max_tokens=12, seed=21, logprobs=True
    )
    assert [[c.text for c in row] for row in over_http] == [[c.text for c in row] for row in in_process]
    for row_http, row_local in zip(over_http, in_process, strict=True):
        assert len({c.text for c in row_http}) == 3
        for a, b in zip(row_http, row_local, strict=True):
            assert a.logprobs is not None and b.logprobs is not None
            assert a.tokens == b.tokens == len(a.logprobs)
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


async def test_echo_label_scores_equal_the_local_scores(
    server: str, local: HFPolicy, tiny_folder: Path
) -> None:
    remote = OpenAIPolicy(server, "tiny-llama", template_from=str(tiny_folder))
    try:
        over_http = await remote.score_labels(CONVERSATIONS, LABELS)
    finally:
        await remote.close()
    in_process = await local.score_labels(CONVERSATIONS, LABELS)
    for a, b in zip(over_http, in_process, strict=True):
        for label in LABELS:
            assert a[label] == pytest.approx(b[label], abs=1e-3)


async def test_top_logprobs_scoring_is_exact_for_single_token_labels(server: str, local: HFPolicy) -> None:
    # labels = the model's own likeliest single tokens after the generation prompt
    ids = torch.tensor([local.encode(local.render(CONVERSATIONS[0]))])
    with torch.inference_mode():
        top = (
            torch.log_softmax(local.model(input_ids=ids).logits[0, -1].float(), -1).topk(40).indices.tolist()
        )
    labels = []
    for token in top:
        text = local.tokenizer.decode([token])
        if (
            text.strip()
            and local.encode(text) == [token]
            and not any(t.startswith(text) or text.startswith(t) for t in labels)
        ):
            labels.append(text)
        if len(labels) == 2:
            break
    assert len(labels) == 2
    remote = OpenAIPolicy(server, "tiny-llama", score_mode="top_logprobs")
    try:
        over_http = await remote.score_labels(CONVERSATIONS[:1], labels)
    finally:
        await remote.close()
    in_process = await local.score_labels(CONVERSATIONS[:1], labels)
    for label in labels:
        assert over_http[0][label] == pytest.approx(in_process[0][label], abs=1e-3)


async def test_wrong_model_name_and_wrong_base_url_are_named(server: str) -> None:
    wrong_model = OpenAIPolicy(server, "gpt-nonexistent", retries=0)
    with pytest.raises(PolicyError, match=r"(?s)answered 404.*gpt-nonexistent.*serves `tiny-llama`"):
        await wrong_model.sample(CONVERSATIONS[:1])
    await wrong_model.close()
    no_v1 = OpenAIPolicy(server.removesuffix("/v1"), "tiny-llama", retries=0)
    with pytest.raises(PolicyError, match=r"404.*should end in /v1"):
        await no_v1.sample(CONVERSATIONS[:1])
    await no_v1.close()


async def test_server_rejects_bad_parameters_with_openai_errors(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        response = await client.post(
            "/chat/completions", json={"model": "tiny-llama", "messages": [], "n": 0}
        )
        assert response.status_code == 400
        message = response.json()["error"]["message"]
        assert "messages" in message and "n" in message


async def test_usage_counts_prompt_and_completion_tokens(server: str, local: HFPolicy) -> None:
    """OpenAI's usage object: prompt tokens as the server tokenizes them (once per prompt),
    completion tokens over all choices, total = their sum."""
    messages = [
        {"role": "system", "content": "You craft items."},
        {"role": "user", "content": "Goal: craft stick."},
    ]
    async with httpx.AsyncClient(base_url=server, timeout=120) as client:
        chat = (
            await client.post(
                "/chat/completions",
                json={"model": "tiny-llama", "messages": messages, "n": 2, "max_tokens": 6, "seed": 1},
            )
        ).json()
        root = server.removesuffix("/v1")  # vLLM's /tokenize sits beside /v1
        counted = (
            await client.post(f"{root}/tokenize", json={"model": "tiny-llama", "messages": messages})
        ).json()["count"]
        texts = ["Goal: craft", "Got 1 oak logs"]
        plain = (
            await client.post(
                "/completions", json={"model": "tiny-llama", "prompt": texts, "max_tokens": 4, "seed": 1}
            )
        ).json()
    usage = chat["usage"]
    assert usage["prompt_tokens"] == counted > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    expected = sum(len(local.encode(t)) for t in texts)
    assert plain["usage"]["prompt_tokens"] == expected
    assert plain["usage"]["total_tokens"] == expected + plain["usage"]["completion_tokens"]


async def test_unreachable_server_is_named() -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    policy = OpenAIPolicy(base, "m", retries=1, backoff=0.01)
    with pytest.raises(PolicyError, match=rf"cannot reach model server {base}.*after 2 attempts"):
        await policy.sample(CONVERSATIONS[:1])
    await policy.close()


class Misbehaving:
    """A real HTTP server whose answers the test scripts: a queue of (status, body) per request."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str]] = []
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                with owner.lock:
                    owner.requests += 1
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                    status, body = owner.answers.pop(0) if owner.answers else (200, GOOD_BODY)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(0.05)
                with owner.lock:
                    owner.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


GOOD_BODY = json.dumps(
    {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Action: x"}, "finish_reason": "stop"}
        ],
        "usage": {"completion_tokens": 2},
    }
)


@pytest.fixture
def misbehaving() -> Iterator[Misbehaving]:
    server = Misbehaving()
    yield server
    server.stop()


async def test_retries_on_503_and_429_then_succeeds(misbehaving: Misbehaving) -> None:
    misbehaving.answers = [(503, '{"error": "busy"}'), (429, '{"error": "slow down"}')]
    policy = OpenAIPolicy(misbehaving.base, "m", retries=3, backoff=0.01)
    result = await policy.sample(CONVERSATIONS[:1])
    await policy.close()
    assert result[0][0].text == "Action: x"
    assert misbehaving.requests == 3


async def test_gives_up_after_retries_naming_status_and_body(misbehaving: Misbehaving) -> None:
    misbehaving.answers = [(500, '{"error": "kaput"}')] * 3
    policy = OpenAIPolicy(misbehaving.base, "m", retries=2, backoff=0.01)
    with pytest.raises(PolicyError, match=r"answered HTTP 500 .*kaput"):
        await policy.sample(CONVERSATIONS[:1])
    await policy.close()
    assert misbehaving.requests == 3


@pytest.mark.parametrize(
    "body", ['{"choices": "oops"}', "<html>not json</html>", '{"choices": [{"message": {"content": null}}]}']
)
async def test_malformed_answers_are_named(misbehaving: Misbehaving, body: str) -> None:
    misbehaving.answers = [(200, body)]
    policy = OpenAIPolicy(misbehaving.base, "m", retries=0)
    with pytest.raises(PolicyError, match=rf"model server {misbehaving.base} sent a malformed|non-JSON"):
        await policy.sample(CONVERSATIONS[:1])
    await policy.close()


async def test_concurrency_is_bounded(misbehaving: Misbehaving) -> None:
    policy = OpenAIPolicy(misbehaving.base, "m", max_concurrency=2)
    results = await policy.sample([CONVERSATIONS[0]] * 8)
    await policy.close()
    assert len(results) == 8
    assert misbehaving.requests == 8
    assert 1 <= misbehaving.max_in_flight <= 2
