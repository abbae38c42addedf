"""Owns the shapes of the production-trace routes (``/v1/traces``): the upload batches of every
format (OpenAI, legacy OpenAI, OpenTelemetry, OTLP, ShareGPT), outcomes, critiques and trace reads."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from api.schemas.common import (
    ID_PATTERN,
    ModelRef,
    _Strict,
)


class OutcomeIn(_Strict):
    """An outcome stated as success plus an optional reward."""

    success: bool = Field(strict=True)  # JSON true / false only, as the schema says (not 0 / 1)
    reward: float | None = Field(None, strict=True, ge=0, le=1, description="Final reward in [0, 1].")


LOCAL_ENVIRONMENTS = r"^(textcraft|sciworld|tau2:(retail|airline|mock))(\?[A-Za-z0-9_=&,.:-]*)?$"


class TraceEnvironmentIn(_Strict):
    """The environment a trace was played in, for the replay critic. Only environments that run in
    the critic worker itself are accepted (TextCraft, ScienceWorld, tau2 domains): a remote server
    or a python: plugin named by an uploader would make the worker connect or import on their say."""

    uri: str = Field(
        min_length=1,
        max_length=500,
        pattern=LOCAL_ENVIRONMENTS,
        description="textcraft, sciworld or tau2:retail|airline|mock, with their URI options "
        "(e.g. textcraft?max_steps=8).",
    )
    task_id: (
        Annotated[str, Field(min_length=1, max_length=200)] | Annotated[int, Field(strict=True, ge=0)]
    ) = Field(
        description="The task's id in that environment (tau2: the task id; TextCraft: an index or goal:NAME)."
    )


class _TraceEnvelope(BaseModel):
    """The fields every trace format shares. A format's own fields beyond the ones described are
    passed to its importer (core.formats), which names any malformed one in its 422."""

    model_config = ConfigDict(extra="allow")

    id: (
        Annotated[str, Field(min_length=1, max_length=200)]
        | Annotated[int, Field(strict=True, ge=-(10**199 - 1), le=10**200 - 1)]
        | None
    ) = Field(
        None,
        description="The caller's own id for the trace: text or an integer, at most 200 characters "
        "either way (its varchar(200) column holds an integer as its decimal text).",
    )
    task_key: str | None = Field(
        None, min_length=1, max_length=1000, description="Groups traces of one task; default: a hash."
    )
    outcome: (
        Literal["success", "failure", "unknown"]
        | bool
        | Annotated[float, Field(ge=0, le=1)]
        | OutcomeIn
        | None
    ) = Field(
        None,
        description='How the trace ended: "success" | "failure" | "unknown" (default), a reward in [0, 1] '
        '(success only at 1), true/false, or {"success": bool, "reward": number}. Unknown traces wait '
        "for PATCH /v1/traces/{id}.",
    )
    reward: float | None = Field(
        None, strict=True, ge=0, le=1, description="Final reward in [0, 1], if known."
    )
    metadata: dict[str, Any] | None = Field(
        None,
        description="Free-form metadata kept with the trace: stored in its event, shown by "
        "GET /v1/traces/{id} and the listing (filter: ?metadata.KEY=VALUE), carried into its samples' "
        "provenance.",
    )
    environment: TraceEnvironmentIn | None = Field(
        None,
        description="Where the trace can be replayed: a LOCAL environment and its task. A failed trace "
        "that names one becomes data by itself: the replay critic finds its decisive step and the "
        "expert's alternative there (docs/critic.md, 'The replay critic').",
    )


class OpenAITextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = Field(
        min_length=1,
        max_length=50,
        description="text (the text); any other part (image_url, input_audio, file) is kept as a typed "
        "placeholder such as [image part: image/png].",
    )
    text: str | None = None


class OpenAIFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=200)
    arguments: str | dict[str, Any] = Field("", description="JSON text (or an object) of the arguments.")


class OpenAIToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=200)
    type: Literal["function"] = "function"
    function: OpenAIFunction


class OpenAIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        description="function: the legacy result role, accepted with format openai-legacy."
    )
    content: str | list[OpenAITextPart] | None = None
    tool_calls: list[OpenAIToolCall] | None = None
    tool_call_id: str | None = Field(None, min_length=1, max_length=200)
    function_call: OpenAIFunction | None = Field(None, description="Legacy; format openai-legacy only.")


class OpenAITrace(_TraceEnvelope):
    messages: list[OpenAIMessage] = Field(min_length=1, description="OpenAI chat messages, in order.")
    tools: list[dict[str, Any]] | None = Field(None, description="The tool definitions offered.")


class OtelSpan(BaseModel):
    model_config = ConfigDict(extra="allow")
    attributes: dict[str, Any] | list[dict[str, Any]] = Field(
        default_factory=dict,
        description="gen_ai.* attributes: an object, or an OTLP key-value list; gen_ai.input.messages "
        "(and gen_ai.output.messages) hold the messages as JSON text or arrays.",
    )
    start_time_unix_nano: int | str | None = None


class OtelTrace(_TraceEnvelope):
    spans: list[OtelSpan] | None = Field(
        None, min_length=1, description="The trace's spans (every model-call span is read)."
    )
    resourceSpans: list[dict[str, Any]] | None = Field(  # noqa: N815 (the OTLP/JSON field name)
        None, min_length=1, description="Or: one OTLP/JSON export holding this trace's spans."
    )


class ShareGPTTurn(BaseModel):
    model_config = ConfigDict(extra="allow")
    from_: Literal[
        "system",
        "human",
        "user",
        "gpt",
        "assistant",
        "function_call",
        "observation",
        "tool",
        "function_response",
    ] = Field(alias="from")
    value: str


class ShareGPTTrace(_TraceEnvelope):
    conversations: list[ShareGPTTurn] = Field(min_length=1, description="ShareGPT / AgentGym turns.")


class TraceCriticIn(_Strict):
    """Who finds the first error of this batch's failed traces (default: the critic worker's settings)."""

    strategy: Literal["rules", "model", "direct"] = Field(
        "rules",
        description="rules: tool errors, HTTP-style codes, loops; model: the named critic model "
        "labels each step; direct: the last action (Direct-Revision), which never says no_error_found.",
    )
    model: Annotated[ModelRef, Field(max_length=500)] | None = Field(
        None,
        description="Critic model for strategy model (a URL under the server's AGENTR_ALLOWED_MODEL_URLS, "
        "or a folder inside the model roots).",
    )


class _TraceBatch(_Strict):
    traces: list[Any]
    critic: TraceCriticIn | None = Field(None, description="The critic for this batch's failed traces.")
    partial: bool = Field(
        False,
        strict=True,
        description="true: store the traces that can be read and name each refused one in the answer's "
        "partialSuccess (as the OTLP receiver does); false (default): the batch is stored whole or not at "
        "all. Not for format otlp (its receiver, POST /v1/otlp/v1/traces, answers partial success).",
    )
    # partial batches: the position in the sent batch of each kept trace, and the refused ones
    _origins: list[int] = PrivateAttr(default_factory=list)
    _refused: list[tuple[int, Any, list[Any]]] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _partial_batch(cls, data: Any, handler: Any) -> Any:
        """A partial batch validates each trace on its own: the ones that fail are set aside (with
        their errors) instead of failing the batch; when none is left the whole batch fails as usual."""
        traces = data.get("traces") if isinstance(data, dict) else None
        if not (isinstance(data, dict) and data.get("partial") is True and isinstance(traces, list)):
            batch = handler(data)
            batch._origins = list(range(len(batch.traces)))
            return batch
        adapter = _trace_adapter(cls)
        kept, origins, refused = [], [], []
        for index, trace in enumerate(traces):
            try:
                adapter.validate_python(trace)
            except ValidationError as exc:
                refused.append((index, trace, exc.errors(include_url=False)))
                continue
            kept.append(trace)
            origins.append(index)
        if not kept:
            return handler(data)
        batch = handler({**data, "traces": kept})
        batch._origins, batch._refused = origins, refused
        return batch

    @property
    def origins(self) -> list[int]:
        """Each kept trace's position in the batch as sent (a partial batch may have set some aside)."""
        return self._origins or list(range(len(self.traces)))

    @property
    def refused(self) -> list[tuple[int, Any, list[Any]]]:
        """The traces a partial batch set aside: (position, the trace as sent, pydantic errors)."""
        return list(self._refused)

    def trace_dicts(self) -> list[dict[str, Any]]:
        """The traces as the importers read them: exactly the fields the caller sent."""
        return [trace.model_dump(mode="json", by_alias=True, exclude_unset=True) for trace in self.traces]


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _trace_adapter(cls: type[BaseModel]) -> TypeAdapter[Any]:
    """The validator of one trace of batch class ``cls`` (the item type of its ``traces``)."""
    if cls not in _ADAPTERS:
        (item,) = get_args(cls.model_fields["traces"].annotation)
        _ADAPTERS[cls] = TypeAdapter(item)
    return _ADAPTERS[cls]


class OpenAIBatchIn(_TraceBatch):
    format: Literal["openai"]
    traces: list[OpenAITrace] = Field(min_length=1, max_length=10_000)


class OpenAILegacyBatchIn(_TraceBatch):
    format: Literal["openai-legacy"]
    traces: list[OpenAITrace] = Field(
        min_length=1,
        max_length=10_000,
        description="OpenAI messages that may use function_call / role function.",
    )


class OtlpBatchIn(_TraceBatch):
    format: Literal["otlp"]
    traces: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=1_000,
        description="OTLP/JSON export requests ({resourceSpans: [...]}); spans are grouped into traces by "
        "trace id. Outcome, reward and task key come from agentr.outcome / agentr.reward / agentr.task_key "
        "attributes or the root span's status.",
    )

    def trace_dicts(self) -> list[dict[str, Any]]:
        return list(self.traces)


class OtelBatchIn(_TraceBatch):
    format: Literal["otel"]
    traces: list[OtelTrace] = Field(min_length=1, max_length=10_000)


class ShareGPTBatchIn(_TraceBatch):
    format: Literal["sharegpt"]
    traces: list[ShareGPTTrace] = Field(min_length=1, max_length=10_000)


class ResponsesTrace(_TraceEnvelope):
    model_config = ConfigDict(extra="allow")
    input: str | list[dict[str, Any]] = Field(
        description="Responses API input: a string or items (message, reasoning, function_call, "
        "function_call_output)."
    )
    output: list[dict[str, Any]] | None = Field(None, description="The response's own output items.")
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = Field(
        None, description="Responses tools ({type: function, name, ...})."
    )


class ResponsesBatchIn(_TraceBatch):
    format: Literal["openai-responses"]
    traces: list[ResponsesTrace] = Field(min_length=1, max_length=10_000)


class LangfuseTrace(_TraceEnvelope):
    model_config = ConfigDict(extra="allow")
    trace: dict[str, Any] | None = Field(
        None,
        description="The Langfuse trace object (id, name, sessionId, metadata...); or send the body of "
        "GET /api/public/traces/{id} itself (the trace's fields with its observations embedded).",
    )
    observations: list[dict[str, Any]] = Field(
        min_length=1, description="Its observations (GENERATION ones hold the chat; TOOL ones tool results)."
    )


class LangfuseBatchIn(_TraceBatch):
    format: Literal["langfuse"]
    traces: list[LangfuseTrace] = Field(min_length=1, max_length=10_000)


TraceBatchIn = Annotated[
    OpenAIBatchIn
    | OpenAILegacyBatchIn
    | ResponsesBatchIn
    | OtelBatchIn
    | OtlpBatchIn
    | ShareGPTBatchIn
    | LangfuseBatchIn,
    Field(
        discriminator="format",
        description="A batch of production traces in one import format (`format` picks the shape of "
        "each trace); all are stored or none is. To add a format: a batch model here, in this union.",
    ),
]


class TraceRefused(BaseModel):
    index: int = Field(description="Its position in the batch sent.")
    field: str = Field(description="The field that could not be read, e.g. body.traces[3].messages[5].role.")
    message: str


class TracePartialSuccess(BaseModel):
    """The shape of the OTLP receiver's partialSuccess, counted in traces, each refused one named."""

    rejectedTraces: int  # noqa: N815 (as OTLP's rejectedSpans)
    errorMessage: str  # noqa: N815
    refused: list[TraceRefused]


class TraceAccepted(BaseModel):
    trace_ids: list[str]
    waiting_for_outcome: list[str] = Field(
        default_factory=list,
        description="The traces stored without an outcome: nothing is done with them until "
        "PATCH /v1/traces/{id} (or PATCH /v1/traces) sets one.",
    )
    replayed: list[str] = Field(
        default_factory=list,
        description="The traces already stored under the same producer id (`id`; OTLP trace id): a re-send "
        "is an idempotent replay, nothing new is stored for them.",
    )
    message: str = Field("", description="What happens next, in words.")
    partialSuccess: TracePartialSuccess | None = Field(  # noqa: N815 (the OTLP/HTTP answer's name)
        None,
        description="A partial batch (partial: true) that refused some traces: how many and each one's "
        "position, field and problem (the other traces were stored; trace_ids lists them in order).",
    )


class TraceOutcomeIn(_Strict):
    """The outcome of a trace that was ingested without one."""

    outcome: Literal["success", "failure"] | bool | Annotated[float, Field(ge=0, le=1)] | OutcomeIn = Field(
        description='"success" | "failure", a reward in [0, 1] (success only at 1), true/false, or '
        '{"success": bool, "reward": number}.'
    )
    reward: float | None = Field(
        None, strict=True, ge=0, le=1, description="Final reward in [0, 1], if known."
    )


class TraceOutcomeItem(TraceOutcomeIn):
    # _one_reference, stated: exactly one of the two is a string (a null one counts as absent)
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": [name], "properties": {name: {"type": "string"}}}
                for name in ("trace_id", "external_id")
            ]
        }
    )

    trace_id: str | None = Field(None, pattern=ID_PATTERN, description="The trace to set.")
    external_id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Or the producer's id of the trace (the `id` it was sent with; OTLP: the trace id).",
    )

    @model_validator(mode="after")
    def _one_reference(self) -> TraceOutcomeItem:
        if (self.trace_id is None) == (self.external_id is None):
            raise ValueError("send exactly one of trace_id and external_id")
        return self

    @property
    def reference(self) -> str:
        return self.trace_id if self.trace_id is not None else str(self.external_id)


class TraceOutcomeBatchIn(_Strict):
    """Outcomes for several traces; all are set or none is."""

    outcomes: list[TraceOutcomeItem] = Field(min_length=1, max_length=10_000)


class TraceOutcomeOut(BaseModel):
    trace_id: str
    outcome: str
    reward: float | None = None
    changed: bool = Field(description="False when the trace already had this outcome (nothing appended).")


class TraceOutcomesOut(BaseModel):
    items: list[TraceOutcomeOut]


class VerdictOut(BaseModel):
    step_index: int
    label: str
    scores: dict[str, float] = Field(default_factory=dict)
    method: str = ""
    reason: str = ""


class CritiqueOut(BaseModel):
    strategy: str
    transition_index: int | None
    verdicts: list[VerdictOut]
    model_version: str = ""


class TraceOut(BaseModel):
    trace_id: str
    task_key: str
    outcome: str
    source_format: str
    external_id: str | None = None
    status: str = Field(
        description="waiting_for_outcome, ingested, critiqued, no_error_found, unpaired (a failure with no "
        "usable successful trace of its task key: see reason), rejected (its pair was), revised."
    )
    reason: str | None = Field(
        None, description="Why a failed trace did not pair, or why its pair was rejected."
    )
    pair_id: str | None = Field(None, description="The pair made for this failed trace.")
    sample_id: str | None = Field(None, description="Its revision sample (failure) or good sample (success).")
    transition_index: int | None = None
    created_at: datetime
    trajectory: dict[str, Any] | None = None
    critique: CritiqueOut | None = None
    sample: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="The producer's metadata: the envelope's metadata, Langfuse metadata/userId/tags, "
        "span and resource attributes (what the format carried).",
    )
