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

from fastapi import APIRouter, Depends, Path
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError
from api.errors import field_error as make_field_error
from api.idempotency import Idempotency, idempotency
from api.model_refs import OUTSIDE_ROOTS, resolve_model_ref
from api.reads import owned_row
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
)
from api.writes import append, new_event
from core.domain.events import NewEvent, TraceCritiqued, TraceIngested, TraceOutcomeSet
from core.domain.ids import derived_id, trace_stream
from core.domain.serde import to_dict
from core.formats.importing import TraceFormatError, parse_outcome, parse_traces
from core.store.tables import samples, traces

router = APIRouter(prefix="/v1/traces", tags=["traces"], responses=ERROR_RESPONSES)


@router.post("", status_code=202, response_model=TraceAccepted, summary="Ingest a batch of production traces")
async def ingest_traces(
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
    if critic_model is not None:
        critic_model = resolve_model_ref(critic_model, svc.settings.model_root_paths)
        if critic_model is None:  # the same answer whether or not the path exists
            raise make_field_error("body.critic.model", OUTSIDE_ROOTS)
    try:
        imported = parse_traces(body.trace_dicts(), body.format)
    except TraceFormatError as exc:
        raise make_field_error(f"body.{exc.path}", exc.problem) from None
    new_events = []
    trace_ids = []
    for index, item in enumerate(imported):
        trace_id = idem.new_id("trace", index)
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
        )
        new_events.append(
            new_event(
                trace_stream(trace_id),
                event,
                project_id=project_id,
                event_id=idem.new_id("event", index),
                correlation_id=trace_id,
            )
        )
    waiting = [t for t, item in zip(trace_ids, imported, strict=True) if item.outcome == "unknown"]
    message = f"{len(trace_ids) - len(waiting)} trace(s) with an outcome go on to the critic and splicer"
    if waiting:
        message += (
            f"; {len(waiting)} without an outcome wait for one: PATCH /v1/traces/{{id}} "
            '{"outcome": "success" | "failure" | reward} (or PATCH /v1/traces for many)'
        )
    out = TraceAccepted(trace_ids=trace_ids, waiting_for_outcome=waiting, message=message).model_dump(
        mode="json"
    )
    await append(svc, new_events, idem=idem, answer=(202, out))
    return out


async def _outcome_event(
    conn: AsyncConnection, project_id: str, trace_id: str, body: TraceOutcomeIn, path: str, svc: ApiServices
) -> tuple[TraceOutcomeOut, NewEvent | None, int]:
    row = await owned_row(conn, traces, "trace_id", trace_id, project_id, "trace")
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


@router.patch(
    "/{trace_id}",
    response_model=TraceOutcomeOut,
    summary="Set the outcome of a trace ingested without one (the critic then runs on it)",
)
async def set_trace_outcome(
    body: TraceOutcomeIn,
    trace_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("ingest")),
    svc: ApiServices = Depends(services),
) -> Any:
    async with svc.store.engine.connect() as conn:
        out, event, version = await _outcome_event(conn, principal.project(), trace_id, body, "body", svc)
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
        if item.trace_id in seen:
            raise make_field_error(
                f"body.outcomes[{index}].trace_id", f"{item.trace_id} appears twice; send it once"
            )
        seen.add(item.trace_id)
    outs, new_events, expected = [], [], {}
    async with svc.store.engine.connect() as conn:
        for index, item in enumerate(body.outcomes):
            out, event, version = await _outcome_event(
                conn, principal.project(), item.trace_id, item, f"body.outcomes[{index}]", svc
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
    async with svc.store.engine.connect() as conn:
        row = await owned_row(conn, traces, "trace_id", trace_id, principal.project(), "trace")
        sample_row = None
        if row["sample_id"] is not None:
            sample_row = (
                (await conn.execute(select(samples).where(samples.c.sample_id == row["sample_id"])))
                .mappings()
                .first()
            )
    trajectory = None
    critique = None
    for recorded in await svc.store.read_stream(trace_stream(trace_id)):
        event = recorded.event
        if isinstance(event, TraceIngested):
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
        transition_index=row["transition_index"],
        created_at=row["created_at"],
        trajectory=trajectory,
        critique=critique,
        sample=to_dict(row_to_sample(sample_row)) if sample_row is not None else None,
    )
