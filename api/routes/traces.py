"""Owns the production-trace routes: ingest a batch (all or nothing), set outcomes later, read one back.

A batch is parsed completely (core.formats.importing) before anything is written; the first
malformed field answers 422 naming it (``body.traces[3].messages[5].role``) and nothing is stored.
Then every TraceIngested event of the batch is appended in ONE store transaction. The critic
service picks them up from there.

A trace ingested without an outcome waits (status ``waiting_for_outcome``): ``PATCH /v1/traces/{id}``
or the batch form ``PATCH /v1/traces`` sets it once (``TraceOutcomeSet``, all or nothing), and the critic
runs on it then. Setting the outcome it already has changes nothing; a different one is a 409.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from starlette.convertors import PathConvertor, register_url_convertor

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, validation_fields
from api.errors import field_error as make_field_error
from api.idempotency import Idempotency, idempotency
from api.model_refs import OUTSIDE_ROOTS, model_ref_problem
from api.reads import found
from api.routes.otlp import otlp_trace_id
from api.sanitize import nul_note
from api.schemas import (
    ERROR_RESPONSES,
    ID_PATTERN,
    CritiqueOut,
    OutcomeIn,
    TraceAccepted,
    TraceBatchIn,
    TraceOut,
    TraceOutcomeBatchIn,
    TraceOutcomeIn,
    TraceOutcomeOut,
    TraceOutcomesOut,
    TracePartialSuccess,
    TraceRefused,
)
from api.writes import append, new_event
from core.domain.events import ModelCallRecorded, NewEvent, TraceCritiqued, TraceIngested, TraceOutcomeSet
from core.domain.ids import derived_id, trace_stream
from core.domain.serde import to_dict
from core.formats.importing import ImportedTrace, TraceFormatError, parse_outcome, parse_traces, with_note
from core.store.queries import traces as trace_reads
from core.store.queries.traces import TraceRow


class _AnyTextPath(PathConvertor):
    """Starlette's ``path`` convertor that also matches line breaks (``.`` does not): an external id
    holding a URL-encoded newline reaches the handler (a clear 404 or 422), not a 405 from the GET
    route's pattern matching where the PATCH route's did not."""

    regex = "(?s:.+)"


register_url_convertor("anytext", _AnyTextPath())

router = APIRouter(prefix="/v1/traces", tags=["traces"], responses=ERROR_RESPONSES)


@router.post("", status_code=202, response_model=TraceAccepted, summary="Ingest a batch of production traces")
async def ingest_traces(
    request: Request,
    body: TraceBatchIn,
    principal: Principal = Depends(require("ingest")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    if body.critic is not None and body.critic.strategy == "model" and not body.critic.model:
        raise make_field_error(
            "body.critic.model",
            "strategy model needs the critic model to run: send critic.model (a folder or an "
            "OpenAI-compatible URL), or leave critic out to use the critic worker's AGENTR_CRITIC_MODEL",
        )
    critic_model = body.critic.model if body.critic is not None else None
    if critic_model is not None:  # a folder outside the roots: the same answer whether it exists or not
        critic_model, problem = model_ref_problem(
            critic_model, svc.settings.model_root_paths, svc.settings.egress
        )
        if critic_model is None:
            raise make_field_error("body.critic.model", problem or OUTSIDE_ROOTS)
    if body.partial and body.format == "otlp":
        raise make_field_error(
            "body.partial",
            "format otlp splits export requests by trace id, so a refusal cannot name one item: send the "
            "exports to the OTLP receiver (POST /v1/otlp/v1/traces), which answers partial success",
        )
    refused = [
        TraceRefused(index=index, **field)
        for index, trace, errors in body.refused
        for field in validation_fields(errors, trace)[:1]
    ]
    for one in refused:
        one.field = f"body.traces[{one.index}]" + (f".{one.field}" if one.field else "")
    origins = body.origins
    if body.partial:
        imported, origins, more = _parse_each(body.trace_dicts(), origins, body.format)
        refused = sorted([*refused, *more], key=lambda r: r.index)
        if not imported:
            raise ApiError(
                422,
                "; ".join(f"{r.field}: {r.message}" for r in refused[:5]),
                fields=[{"field": r.field, "message": r.message} for r in refused],
            )
    else:
        try:
            imported = parse_traces(body.trace_dicts(), body.format)
        except TraceFormatError as exc:
            raise make_field_error(f"body.{exc.path}", exc.problem) from None
        if body.format == "otlp":  # export requests merge by trace id: positions are the traces'
            origins = list(range(len(imported)))
    imported = _with_nul_notes(imported, getattr(request.state, "nul_replaced", None), body.format, origins)
    new_events = []
    trace_ids: list[str] = []
    replayed: list[str] = []
    expected: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    known = await trace_reads.external_traces(
        svc.store, project_id, [i.external_id for i in imported if i.external_id]
    )
    for index, item in zip(origins, imported, strict=True):
        if item.external_id is None:
            trace_id = idem.new_id("trace", index)
        else:
            if item.external_id in first_seen:
                raise make_field_error(
                    f"body.traces[{index}].id",
                    f"external id {item.external_id!r} appears twice in the batch (first as trace "
                    f"{first_seen[item.external_id]}); send each trace once",
                )
            first_seen[item.external_id] = index
            existing = known.get(item.external_id)
            if existing is not None:  # a re-send: an idempotent replay, not a copy
                trace_ids.append(existing)
                replayed.append(existing)
                continue
            trace_id = otlp_trace_id(project_id, item.external_id)  # the same id through both doors
            expected[trace_stream(trace_id)] = -1  # a concurrent re-send conflicts instead of copying
        trace_ids.append(trace_id)
        event = TraceIngested(
            trace_id=trace_id,
            project_id=project_id,
            task_key=item.task_key,
            trajectory=item.trajectory,
            outcome=item.outcome,
            source_format=item.source_format,
            external_id=item.external_id,
            critic_strategy=body.critic.strategy if body.critic is not None else None,
            critic_model=critic_model,
            env_uri=item.environment[0] if item.environment else None,
            env_task_id=item.environment[1] if item.environment else None,
        )
        new_events.append(
            new_event(
                trace_stream(trace_id),
                event,
                project_id=project_id,
                event_id=idem.new_id("event", index)
                if item.external_id is None
                else derived_id("trace-ingested", trace_id),
                correlation_id=trace_id,
            )
        )
    replayed_ids = set(replayed)
    stored = [t for t in trace_ids if t not in replayed_ids]
    waiting = [
        t
        for t, item in zip(trace_ids, imported, strict=True)
        if item.outcome == "unknown" and t not in replayed_ids
    ]
    message = f"{len(stored) - len(waiting)} trace(s) with an outcome go on to the critic and splicer"
    if waiting:
        message += (
            f"; {len(waiting)} without an outcome wait for one: PATCH /v1/traces/{{id}} "
            '{"outcome": "success" | "failure" | reward} (or PATCH /v1/traces for many)'
        )
    if replayed:
        message += (
            f"; {len(replayed)} already stored under the same external id: replayed, not copied "
            "(set a later outcome with PATCH /v1/traces/{id} or PATCH /v1/traces)"
        )
    partial = None
    if refused:
        message += f"; {len(refused)} refused (named in partialSuccess; nothing of them was stored)"
        partial = TracePartialSuccess(
            rejectedTraces=len(refused),
            errorMessage="; ".join(f"{r.field}: {r.message}" for r in refused[:20]),
            refused=refused,
        )
    out = TraceAccepted(
        trace_ids=trace_ids,
        waiting_for_outcome=waiting,
        replayed=replayed,
        message=message,
        partialSuccess=partial,
    ).model_dump(mode="json", exclude_none=True)
    if not new_events:
        return out
    await append(svc, new_events, expected, idem=idem, answer=(202, out))
    return out


def _parse_each(
    items: list[dict[str, Any]], origins: list[int], fmt: str
) -> tuple[list[ImportedTrace], list[int], list[TraceRefused]]:
    """A partial batch: each trace parsed on its own; the ones the importer cannot read are refused
    by name (their position in the batch as sent) instead of failing the batch."""
    imported, kept, refused = [], [], []
    for item, origin in zip(items, origins, strict=True):
        try:
            (one,) = parse_traces([item], fmt)
        except TraceFormatError as exc:
            path = exc.path.replace("traces[0]", f"traces[{origin}]", 1)
            refused.append(TraceRefused(index=origin, field=f"body.{path}", message=exc.problem))
            continue
        imported.append(one)
        kept.append(origin)
    return imported, kept, refused


def _with_nul_notes(
    imported: list[ImportedTrace], paths: list[str] | None, fmt: str, origins: list[int]
) -> list[ImportedTrace]:
    """Record on each trace where NUL characters were replaced (api.middleware; ``traces[i]...``
    paths, ``i`` its position in the batch as sent; an OTLP batch's paths name export requests, so
    every trace of it gets the note)."""
    if not paths:
        return imported
    out = []
    for index, item in enumerate(imported):
        mine = [p.removeprefix("traces").lstrip(".") for p in paths]
        if fmt != "otlp":
            mine = [p for p in paths if p.startswith(f"traces[{origins[index]}]")]
        if mine:
            item = with_note(item, nul_note(mine))
        out.append(item)
    return out


async def _trace_row(svc: ApiServices, project_id: str, reference: str) -> TraceRow:
    """The trace row for ``reference``: an agentr trace id, else the producer's id (external id; for
    OTLP traces the 32-hex trace id); 404 when neither names a trace of the project."""
    row = await trace_reads.trace_by_reference(svc.store, project_id, reference)
    if row is None:
        raise ApiError(
            404, f"trace {reference} not found (neither a trace id nor an external id in this project)"
        )
    return row


async def _outcome_event(
    project_id: str, reference: str, body: TraceOutcomeIn, path: str, svc: ApiServices
) -> tuple[TraceOutcomeOut, NewEvent | None, int]:
    row = await _trace_row(svc, project_id, reference)
    trace_id = row["trace_id"]
    value = body.outcome.model_dump() if isinstance(body.outcome, OutcomeIn) else body.outcome
    try:
        outcome, reward = parse_outcome(value, body.reward, path)
    except TraceFormatError as exc:
        raise make_field_error(exc.path, exc.problem) from None
    if outcome == "unknown":  # not reachable through the schema; kept as a guard
        raise make_field_error(f"{path}.outcome", 'send "success" or "failure" (or a reward)')
    out = TraceOutcomeOut(
        trace_id=trace_id, outcome=outcome, reward=reward, changed=row["outcome"] == "unknown"
    )
    if row["outcome"] == outcome:
        return out, None, -1
    if row["outcome"] != "unknown":
        raise ApiError(
            409, f"trace {trace_id} already has outcome {row['outcome']!r}; an outcome is set once"
        )
    stream = trace_stream(trace_id)
    version = await svc.store.stream_version(stream)
    event = new_event(
        stream,
        TraceOutcomeSet(trace_id=trace_id, outcome=outcome, reward=reward),  # type: ignore[arg-type]
        project_id=project_id,
        event_id=derived_id("trace-outcome", trace_id),
        correlation_id=trace_id,
    )
    return out, event, version


@router.patch("/{trace_id}/corrections", include_in_schema=False)
@router.patch("/{trace_id}/accept", include_in_schema=False)
async def patch_trace_action_not_allowed(trace_id: str, request: Request) -> Any:
    """``PATCH /v1/traces/{id}/corrections`` and ``.../accept`` are not operations (both are POSTed):
    405, not the outcome route below, whose ``{trace_id:anytext}`` would otherwise read
    ``ID/corrections`` as an external id. A trace whose external id ends in ``/corrections`` or
    ``/accept`` takes its outcome through ``PATCH /v1/traces`` (``outcomes[]``)."""
    action = request.url.path.rsplit("/", 1)[-1]
    raise ApiError(
        405,
        f"PATCH is not allowed on /v1/traces/{{trace_id}}/{action}: POST there; to set the outcome "
        f"of a trace whose external id ends in /{action}, use PATCH /v1/traces",
        headers={"Allow": "POST"},
    )


@router.patch(
    "/{trace_id:anytext}",
    response_model=TraceOutcomeOut,
    summary="Set the outcome of a trace ingested without one (the critic then runs on it)",
)
async def set_trace_outcome(
    body: TraceOutcomeIn,
    trace_id: str = Path(
        min_length=1,
        max_length=200,
        description="The agentr trace id, or the producer's id (external id, URL-encoded: a `/` as %2F).",
    ),
    principal: Principal = Depends(require("ingest")),
    svc: ApiServices = Depends(services),
) -> Any:
    out, event, version = await _outcome_event(principal.project(), trace_id, body, "body", svc)
    if event is not None:
        await append(svc, [event], {event.stream_id: version})
    return out


@router.patch(
    "",
    response_model=TraceOutcomesOut,
    summary="Set the outcomes of several traces (all or nothing)",
)
async def set_trace_outcomes(
    body: TraceOutcomeBatchIn,
    principal: Principal = Depends(require("ingest")),
    svc: ApiServices = Depends(services),
) -> Any:
    seen: set[str] = set()
    for index, item in enumerate(body.outcomes):
        if item.reference in seen:
            field = "trace_id" if item.trace_id is not None else "external_id"
            raise make_field_error(
                f"body.outcomes[{index}].{field}", f"{item.reference} appears twice; send it once"
            )
        seen.add(item.reference)
    outs, new_events, expected = [], [], {}
    for index, item in enumerate(body.outcomes):
        out, event, version = await _outcome_event(
            principal.project(), item.reference, item, f"body.outcomes[{index}]", svc
        )
        outs.append(out)
        if event is not None:
            new_events.append(event)
            expected[event.stream_id] = version
    if new_events:
        await append(svc, new_events, expected)
    return TraceOutcomesOut(items=outs)


@router.get("/{trace_id}", response_model=TraceOut, summary="A trace with its critique and revision sample")
async def get_trace(
    trace_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    read = await trace_reads.trace_with_sample(svc.store, principal.project(), trace_id)
    row, sample_row = found(read, "trace", trace_id)
    trajectory = None
    critique = None
    for recorded in await svc.store.read_stream(trace_stream(trace_id)):
        event = recorded.event
        # the capture proxy's later calls (ModelCallRecorded) carry the trace's latest conversation
        if isinstance(event, TraceIngested) or (
            isinstance(event, ModelCallRecorded) and event.trajectory is not None
        ):
            trajectory = to_dict(event.trajectory)
        elif isinstance(event, TraceCritiqued):
            critique = CritiqueOut(
                strategy=event.strategy,
                transition_index=event.transition_index,
                verdicts=[to_dict(v) for v in event.verdicts],
                model_version=event.model_version,
            )
    return TraceOut(
        trace_id=row["trace_id"],
        task_key=row["task_key"],
        outcome=row["outcome"],
        source_format=row["source_format"],
        external_id=row["external_id"],
        status=row["status"],
        reason=row["reason"],
        pair_id=row["pair_id"],
        sample_id=row["sample_id"],
        transition_index=row["transition_index"],
        created_at=row["created_at"],
        trajectory=trajectory,
        critique=critique,
        sample=to_dict(row_to_sample(sample_row)) if sample_row is not None else None,
        metadata=row["metadata"] or {},
    )
