"""Owns the production-trace routes: ingest a batch (all or nothing) and read one trace back.

A batch is parsed completely (core.formats.importing) before anything is written; the first
malformed field answers 422 naming it (``body.traces[3].messages[5].role``) and nothing is stored.
Then every TraceIngested event of the batch is appended in ONE store transaction. The critic
service picks them up from there.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path
from sqlalchemy import select

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.errors import field_error as make_field_error
from api.idempotency import Idempotency, idempotency
from api.reads import owned_row
from api.schemas import ERROR_RESPONSES, ID_PATTERN, CritiqueOut, TraceAccepted, TraceBatchIn, TraceOut
from api.writes import append, new_event
from core.domain.events import TraceCritiqued, TraceIngested
from core.domain.ids import trace_stream
from core.domain.serde import to_dict
from core.formats.importing import TraceFormatError, parse_traces
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
    await append(svc, new_events)
    out = TraceAccepted(trace_ids=trace_ids).model_dump(mode="json")
    await idem.save(202, out)
    return out


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
