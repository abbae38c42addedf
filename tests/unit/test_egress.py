"""The egress rules (core/domain/egress.py): which served-model and environment URLs an allow-list
covers, compared parsed and never as text, and where the server's OPENAI_API_KEY goes."""

from __future__ import annotations

import pytest

from core.domain.egress import Egress, parse_url_list
from core.runtime.settings import Settings

MODELS = "http://vllm:8000/v1, https://Models.Example.com/openai/, http://[::1]:9000/v1"


ENVS = "http://envs:36001, ws://sessions.example:9000/env"
KEYED = "https://models.example.com/openai"


def egress(key: str | None = "sk-server") -> Egress:
    return Egress(
        models=parse_url_list(MODELS, "AGENTR_ALLOWED_MODEL_URLS", ("http", "https")),
        envs=parse_url_list(ENVS, "AGENTR_ALLOWED_ENV_URLS"),
        keyed=parse_url_list(KEYED, "AGENTR_OPENAI_API_KEY_URLS", ("http", "https")),
        api_key=key,
    )


def test_settings_build_the_same_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server")
    built = Settings(allowed_model_urls=MODELS, allowed_env_urls=ENVS, openai_api_key_urls=KEYED).egress
    assert built == egress()


@pytest.mark.parametrize(
    "url",
    [
        "http://vllm:8000/v1#agent",
        "http://vllm:8000/v1/#agent",  # trailing slash
        "HTTP://VLLM:8000/v1?model=agent",  # scheme and host case
        "http://vllm:8000/v1/sub#x",  # below the base path
        "https://models.example.com:443/openai/v1#gpt",  # the default port written out
        "https://models.example.com/openai#gpt",
        "http://[0:0::1]:9000/v1#m",  # the same IPv6 address spelt another way
        "http://vllm:8000/%76%31#m",  # percent-encoded "v1"
    ],
)
def test_urls_under_an_allowed_base_are_allowed(url: str) -> None:
    assert egress().model_problem(url) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://attacker/v1#m", "is not in AGENTR_ALLOWED_MODEL_URLS"),
        ("http://169.254.169.254/latest/meta-data#m", "is not in AGENTR_ALLOWED_MODEL_URLS"),
        ("http://localhost:6379/v1#m", "is not in AGENTR_ALLOWED_MODEL_URLS"),
        ("http://vllm:8001/v1#m", "is not in"),  # another port
        ("http://vllm/v1#m", "is not in"),  # port 80, not 8000
        ("https://vllm:8000/v1#m", "is not in"),  # another scheme
        ("http://vllm:8000/v10#m", "is not in"),  # /v1 is a path segment, not a text prefix
        ("http://vllm:8000/#m", "is not in"),  # above the base path
        ("http://vllm:8000.evil/v1#m", "not a valid URL"),
        ("http://vllm.evil:8000/v1#m", "is not in"),  # host suffix
        ("http://vllm:8000@evil:8000/v1#m", "user information"),  # userinfo trick
        ("http://vllm:8000/v1@evil/#m", "is not in"),  # an '@' after the host is in the path
        ("http://user:pw@vllm:8000/v1#m", "user information"),
        ("http://vllm:8000/v1/../../admin#m", "'..'"),
        ("http://vllm:8000/v1/%2e%2e/admin#m", "'..'"),
        ("http://vllm:8000/v1%2F..%2Fadmin#m", "encoded slash"),
        ("http://vllm%2eevil:8000/v1#m", "percent sign in its host"),
        ("http://vllm\\@evil:8000/v1#m", "backslash"),
        ("http://vllm:8000/v1\t#m", "printable ASCII"),
        ("http://vllm:8000/v1/ü#m", "printable ASCII"),
        ("ftp://vllm:8000/v1#m", "http:// / https:// URL"),
        ("http://[::2]:9000/v1#m", "is not in"),
    ],
)
def test_everything_else_is_refused_naming_the_setting(url: str, why: str) -> None:
    problem = egress().model_problem(url)
    assert problem is not None and why in problem, problem
    assert "AGENTR_ALLOWED_MODEL_URLS" in problem
    assert egress().model_key(url) is None


def test_the_key_goes_only_to_the_paired_base() -> None:
    rules = egress()
    assert rules.model_key("https://models.example.com/openai/v1#gpt") == "sk-server"
    assert rules.model_key("http://vllm:8000/v1#agent") is None  # allowed, not paired
    assert rules.model_key("https://evil.example.com/openai/v1#gpt") is None  # neither
    assert egress(key=None).model_key("https://models.example.com/openai#gpt") is None


def test_environment_uris_use_their_transport_url() -> None:
    rules = egress()
    for uri in ("agentgym+http://envs:36001/textcraft", "agentgym+HTTP://envs:36001/sciworld?max_steps=5"):
        assert rules.env_problem(uri) is None, uri
    assert rules.env_problem("openenv+ws://sessions.example:9000/env/x") is None
    for uri, why in (
        ("agentgym+http://169.254.169.254/textcraft", "is not in AGENTR_ALLOWED_ENV_URLS"),
        ("agentgym+http://localhost:6379/textcraft", "is not in AGENTR_ALLOWED_ENV_URLS"),
        ("openenv+http://sessions.example:9000/env", "is not in"),  # http, not the allowed ws
        ("agentgym+http://envs:36001@evil/textcraft", "user information"),
        ("http://evil/textcraft", "is not in"),  # any URI with a host is remote
    ):
        problem = rules.env_problem(uri)
        assert problem is not None and why in problem and "AGENTR_ALLOWED_ENV_URLS" in problem, problem
    for local in ("textcraft", "textcraft?distractors=2", "sciworld", "tau2:retail", "python:envs.mod:make"):
        assert rules.env_problem(local) is None, local


def test_defaults_allow_no_url_and_the_command_line_allows_every_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    server = Settings()
    assert server.egress.model_problem("http://127.0.0.1:8000/v1#m") is not None
    assert server.egress.env_problem("agentgym+http://127.0.0.1:36001/textcraft") is not None
    local = Settings().for_local_user().egress
    assert local.model_problem("http://127.0.0.1:8000/v1#m") is None
    assert local.env_problem("agentgym+http://127.0.0.1:36001/textcraft") is None
    assert local.model_key("http://127.0.0.1:8000/v1#m") == "sk-user"  # what the user typed, as before


def test_the_operators_critic_model_is_allowed_without_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server")
    rules = Settings(critic_model="http://critic:8000/v1#judge").egress
    assert rules.model_problem("http://critic:8000/v1#judge") is None
    assert rules.model_key("http://critic:8000/v1#judge") is None
    assert rules.model_problem("http://other:8000/v1#judge") is not None


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("allowed_model_urls", "vllm:8000/v1", "AGENTR_ALLOWED_MODEL_URLS: 'vllm:8000/v1' is not an http"),
        ("allowed_model_urls", "http://vllm:8000/v1#agent", "no query or fragment"),
        ("allowed_env_urls", "http://user@envs:1", "AGENTR_ALLOWED_ENV_URLS"),
        ("openai_api_key_urls", "ws://vllm:8000", "AGENTR_OPENAI_API_KEY_URLS"),
    ],
)
def test_a_malformed_setting_stops_the_process_naming_it(field: str, value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Settings(**{field: value})
