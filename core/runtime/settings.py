"""Owns process settings: every ``AGENTR_*`` environment variable, read once per process.

Unset ``AGENTR_DATABASE_URL`` means the embedded SQLite file under ``AGENTR_HOME``; unset
``AGENTR_REDIS_URL`` means the in-process bus (valid only when everything runs in one process).
Nothing here connects to anything.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.domain.egress import (
    ENV_URLS_SETTING,
    KEY_URLS_SETTING,
    MODEL_SCHEMES,
    MODEL_URLS_SETTING,
    Egress,
    UrlProblem,
    parse_url_list,
)

_URL_LISTS: dict[str, tuple[str, tuple[str, ...]]] = {  # field -> (variable, URL schemes it takes)
    "allowed_model_urls": (MODEL_URLS_SETTING, MODEL_SCHEMES),
    "allowed_env_urls": (ENV_URLS_SETTING, ("http", "https", "ws", "wss")),
    "openai_api_key_urls": (KEY_URLS_SETTING, MODEL_SCHEMES),
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTR_", env_file=None, extra="ignore")

    home: Path = Field(Path(".agentr"), description="Folder for the embedded database, models, datasets.")
    database_url: str | None = Field(
        None, description="postgresql+asyncpg://... or sqlite+aiosqlite:///...; unset = embedded SQLite."
    )
    redis_url: str | None = Field(None, description="redis://host:port/db; unset = in-process bus.")
    redis_prefix: str = Field("agentr", description="Prefix of every Redis key agentr writes.")
    admin_key: str | None = Field(None, description="Bootstraps the API's first admin key.")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING, ERROR.")
    log_json: bool = Field(False, description="Emit logs as JSON lines.")
    # worker runtime
    block_ms: int = Field(1000, description="How long a worker blocks waiting for new messages.")
    reclaim_idle_ms: int = Field(30_000, description="Pending messages idle this long are reclaimed.")
    max_deliveries: int = Field(5, description="After this many deliveries a message is dead-lettered.")
    batch_size: int = Field(16, description="Messages a worker takes per read.")
    search_concurrency: int = Field(
        8, description="Trees one search worker searches at once (their policy calls are batched together)."
    )
    max_open_models: int = Field(
        2,
        ge=1,
        description="Models a search, critic or splice worker keeps open (least recently used closed first).",
    )
    # training jobs (the train worker waits on them; the Celery trainer runs them)
    train_concurrency: int = Field(
        8,
        ge=1,
        description="Run steps one train worker handles at once: one run waiting on its training job "
        "never holds up the others.",
    )
    train_heartbeat_timeout_s: float = Field(
        90.0,
        gt=0,
        description="A training job whose trainer wrote no heartbeat for this many seconds is lost (its "
        "trainer died): the train worker queues it again. Trainers write one every third of it.",
    )
    train_max_attempts: int = Field(
        3, ge=1, description="Times a training job is queued (first time included) before a lost one fails."
    )
    train_timeout_s: float = Field(
        86_400.0,
        gt=0,
        description="Longest a run waits for one training job, queued or training; then the iteration fails.",
    )
    train_visibility_timeout_s: int = Field(
        3600,
        ge=60,
        description="Celery broker visibility timeout: a job taken by a trainer that never acknowledged it "
        "goes back to the queue after this long (a backstop: lost jobs are re-queued on their heartbeat).",
    )
    env_step_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds an in-process or plugin environment's reset/step may take before EnvTimeout.",
    )
    # critic / splicer (production traces; search pairs take these from their RunConfig)
    critic_model: str | None = Field(
        None, description="Model (folder or OpenAI-compatible URL) that judges production traces."
    )
    critic_trace_strategy: str = Field(
        "rules", description="First-error strategy for production traces: rules, model or direct."
    )
    critic_trace_replay_policy: str = Field(
        "expert",
        description="Who continues a failed trace's replayed prefixes when it names its environment "
        "(docs/critic.md, the replay critic): expert (the environment's own) or model (critic_model's "
        "sampled continuations, critic_trace_replay_m per probe).",
    )
    critic_trace_replay_m: int = Field(4, description="Replay with critic_model: continuations per probe.")
    critic_trace_replay_budget: int = Field(
        16, description="Replay of a failed trace: most continuations spent on it (all probes together)."
    )
    critic_trace_plan: str = Field(
        "auto",
        description="How the model critic judges traces: auto (label scores), text (its words, step by "
        "step) or whole (its words, the whole trace at once): text / whole for a served chat model "
        "without label log-probabilities (OpenAI's API).",
    )
    # API
    api_host: str = Field("127.0.0.1", description="Host `agentr serve` binds.")
    api_port: int = Field(8000, description="Port `agentr serve` binds.")
    max_body_bytes: int = Field(16 * 1024 * 1024, description="Request bodies above this get 413.")
    metrics_token: str | None = Field(
        None, description="When set, GET /metrics needs `Authorization: Bearer <this token>`."
    )
    auth_failures_per_min: float = Field(
        30.0, ge=0, description="Failed authentications a client address may make per minute (0 = no limit)."
    )
    auth_failure_burst: int = Field(20, ge=1, description="Failed authentications allowed in a burst.")
    key_requests_per_s: float = Field(
        100.0, ge=0, description="Requests per second per API key (0 = no limit)."
    )
    key_request_burst: int = Field(500, ge=1, description="Requests per API key allowed in a burst.")
    max_follow_streams_per_key: int = Field(
        4, ge=0, description="Open GET /v1/events?follow=true streams per API key (0 = no bound)."
    )
    model_roots: str | None = Field(
        None,
        description="Folders (separated by the OS path separator, ':' on Linux) that model references "
        "submitted over the API must lie in; unset = AGENTR_HOME/models and AGENTR_HOME/runs.",
    )
    allowed_model_urls: str | None = Field(
        None,
        description="Comma-separated base URLs of the OpenAI-compatible model servers that runs and trace "
        "batches may name (http://vllm:8000/v1 allows http://vllm:8000/v1#agent); unset = none: API "
        "callers may name only model folders. The workers check again before calling.",
    )
    allowed_env_urls: str | None = Field(
        None,
        description="Comma-separated base URLs of the remote environments runs may name "
        "(http://envs:36001 allows agentgym+http://envs:36001/textcraft); unset = none.",
    )
    openai_api_key_urls: str | None = Field(
        None,
        description="Comma-separated base URLs of the served models that receive OPENAI_API_KEY as their "
        "bearer credential (each also in AGENTR_ALLOWED_MODEL_URLS); unset = none: the key is sent nowhere.",
    )
    trusted_proxies: str | None = Field(
        None,
        description="Comma-separated addresses/networks of reverse proxies whose X-Forwarded-For / "
        "X-Forwarded-Proto `agentr serve` believes; unset = none (the TCP peer is the client).",
    )

    @field_validator("allowed_model_urls", "allowed_env_urls", "openai_api_key_urls")
    @classmethod
    def _base_urls(cls, value: str | None, info: ValidationInfo) -> str | None:
        setting, schemes = _URL_LISTS[info.field_name or ""]
        parse_url_list(value, setting, schemes)  # a malformed entry stops the process at start
        return value

    _local_user: bool = PrivateAttr(False)

    def for_local_user(self) -> Settings:
        """A copy for services that run what this machine's user typed on the command line (the
        embedded ``agentr run``): their workers call every URL given, with OPENAI_API_KEY, as before."""
        copy = self.model_copy()
        copy._local_user = True
        return copy

    @property
    def egress(self) -> Egress:
        """The outside services this process's workers may call (core/domain/egress.py): the allow-lists
        above, the operator's own AGENTR_CRITIC_MODEL, and OPENAI_API_KEY for the paired base URLs."""
        if self._local_user:
            return Egress.local(os.environ.get("OPENAI_API_KEY") or None)
        egress = Egress(
            models=parse_url_list(self.allowed_model_urls, *_URL_LISTS["allowed_model_urls"]),
            envs=parse_url_list(self.allowed_env_urls, *_URL_LISTS["allowed_env_urls"]),
            keyed=parse_url_list(self.openai_api_key_urls, *_URL_LISTS["openai_api_key_urls"]),
            api_key=os.environ.get("OPENAI_API_KEY") or None,
        )
        critic = (self.critic_model or "").strip()
        if critic.lower().startswith(("http://", "https://")) and egress.model_problem(critic) is not None:
            with contextlib.suppress(UrlProblem):  # a critic URL refused outright stays refused
                egress = egress.with_model(critic, keyed=False)  # the operator's own critic model
        return egress

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.home / 'agentr.db').resolve()}"

    @property
    def model_root_paths(self) -> tuple[Path, ...]:
        """The model roots as absolute, normalised folders (the first one takes relative names)."""
        if self.model_roots and self.model_roots.strip():
            given = [Path(part) for part in self.model_roots.split(os.pathsep) if part.strip()]
        else:
            given = [self.home / "models", self.home / "runs"]
        return tuple(Path(os.path.abspath(path.expanduser())) for path in given)

    @property
    def embedded(self) -> bool:
        return self.redis_url is None


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
