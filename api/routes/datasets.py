"""Owns the dataset routes: one iteration's training data, and named trace datasets.

* ``GET /v1/runs/{run_id}/iterations/{iteration}/dataset``: an iteration's data, streamed.
* ``POST /v1/datasets``: build a named, versioned dataset from a query over the event log
  (api.trace_datasets); ``GET /v1/datasets`` / ``GET /v1/datasets/{id}`` list and show them (the
  latter with the manifest's entries); ``GET /v1/datasets/{id}/download?format=`` streams it in
  openai / sharegpt / samples JSONL or Parquet, read from the event log in pages;
  ``POST /v1/datasets/{id}/rebuild`` re-runs the stored query up to the manifest's log position
  and says whether the same entries come out.

Both downloads also give ``dpo`` / ``prm`` records (api.pair_exports) and ``tokenized`` / ``hf``
files for a model (api.model_exports).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncConnection

from api import model_exports, pair_exports
from api import trace_datasets as builds
from api.dataset_schemas import (
    DatasetEntryOut,
    DatasetFormat,
    DatasetIn,
    DatasetOut,
    DatasetPage,
    DatasetSummaryOut,
    RebuildOut,
)
from api.datasets import dataset_batches, iter_dataset, iteration_body, jsonl_bytes, parquet_bytes
from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, field_error, not_found
from api.idempotency import Idempotency, idempotency
from api.model_exports import MAX_LENGTH_HELP, MODEL_FORMATS, MODEL_HELP, NOT_A_URL, choose_tokenizer
from api.model_refs import MODEL_REF_PATTERN
from api.pagination import cursor_param, keyset_page, known_query_only, limit_param
from api.routes.runs import RunId, run_row
from api.schemas import ERROR_RESPONSES, ID_PATTERN, ExportFormat
from api.writes import append, new_event
from core.domain.config import RunConfig
from core.domain.trace_datasets import DatasetManifest, DatasetQueryError
from core.formats.pair_records import PAIR_FORMATS
from core.store import export_lines, exports

router = APIRouter(prefix="/v1", tags=["datasets"], responses=ERROR_RESPONSES)

_MEDIA = {
    "openai": ("application/x-ndjson", "jsonl"),
    "sharegpt": ("application/x-ndjson", "jsonl"),
    "parquet": ("application/vnd.apache.parquet", "parquet"),
    "samples": ("application/x-ndjson", "jsonl"),
    "dpo": ("application/x-ndjson", "jsonl"),  # api/pair_exports.py
    "prm": ("application/x-ndjson", "jsonl"),
    "prm-values": ("application/x-ndjson", "jsonl"),
    **model_exports.MEDIA,
}
DatasetId = Path(pattern=ID_PATTERN, description="The dataset id (from POST /v1/datasets).")
_CONTENT = {
    "application/x-ndjson": {"schema": {"type": "string"}},
    "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
    "application/zip": {"schema": {"type": "string", "format": "binary"}},
}
_MODEL_FILES = (
    " `tokenized`: Parquet of input_ids / labels (-100 where the trainer computes no loss) / "
    "attention_mask for a model; `hf`: a zip of a Hugging Face datasets save_to_disk folder."
)
_DOWNLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "OpenAI fine-tuning JSONL (tools, tool_calls, assistant `weight` 0/1), ShareGPT "
        "JSONL (`loss` flags; LLaMA-Factory function_call / observation with tools), internal samples "
        "JSONL, or Parquet, streamed." + _MODEL_FILES,
        "content": _CONTENT,
    }
}
ModelQuery = Query(
    None,
    min_length=1,
    max_length=1000,
    pattern=MODEL_REF_PATTERN,
    description=MODEL_HELP,
    json_schema_extra={"not": NOT_A_URL},  # a served model's URL is refused (choose_tokenizer)
)
MaxLengthQuery = Query(None, ge=1, le=1_000_000, description=MAX_LENGTH_HELP)


@router.get(
    "/runs/{run_id}/iterations/{iteration}/dataset",
    response_class=StreamingResponse,
    summary="Download an iteration's dataset (streamed)",
    responses={
        200: {
            "description": "OpenAI fine-tuning JSONL (assistant `weight` 0/1), ShareGPT JSONL "
            "(`loss` flags) or Parquet, streamed." + _MODEL_FILES,
            "content": _CONTENT,
        }
    },
)
async def download_dataset(
    run_id: str = RunId,
    iteration: int = Path(ge=0, le=10_000, description="0-based iteration."),
    format: ExportFormat = Query(
        "openai",
        description="openai, sharegpt or parquet (samples); dpo (OpenAI preference JSONL from the "
        "iteration's pairs), prm (TRL stepwise supervision from first errors) or prm-values (from "
        "the search trees' Q values); tokenized (Parquet for `model`) or hf (a zip of a datasets "
        "folder): docs/datasets.md.",
    ),
    partial: bool = Query(False, description="Export what exists before the dataset is ready."),
    model: str | None = ModelQuery,
    max_length: int | None = MaxLengthQuery,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    run = await run_row(svc, project_id, run_id)
    it = await exports.iteration_row(svc.store.engine, run_id, iteration)
    if it is None:
        raise not_found("iteration", iteration)
    if it["dataset_id"] is None and not partial:
        raise ApiError(
            409,
            f"the dataset of iteration {iteration} is not ready (iteration status {it['status']}); "
            "pass partial=true to export what exists so far",
        )
    media_type, suffix = _MEDIA[format]
    body: AsyncIterator[bytes]
    if format in PAIR_FORMATS:
        counter = svc.metrics.export_rows.labels(format)
        body = pair_exports.iteration_body(svc.store, project_id, run_id, iteration, format, counter)
    elif format in MODEL_FORMATS:
        config = RunConfig.from_data(run["config"])
        default = it["model_ref"] or config.model  # the weights this iteration trains from
        tokenizer = choose_tokenizer(
            format, model, max_length, svc.settings.model_root_paths, (default, config), config
        )
        samples = iter_dataset(
            svc.store.engine, project_id=project_id, run_id=run_id, iteration=iteration, alpha=it["alpha"]
        )
        body = await model_exports.model_export_body(format, _count(samples, svc, format), tokenizer)
    elif export_lines.renders_lines(svc.store.engine, format):  # PostgreSQL renders the lines
        body = iteration_body(
            svc.store.engine,
            project_id=project_id,
            run_id=run_id,
            iteration=iteration,
            alpha=it["alpha"],
            fmt=format,
            counter=svc.metrics.export_rows.labels(format),
        )
    else:
        batches = dataset_batches(
            svc.store.engine,
            project_id=project_id,
            run_id=run_id,
            iteration=iteration,
            alpha=it["alpha"],
            plain=True,  # plain stored samples go to the encoders as their dicts
        )
        counted = _count_batches(batches, svc, format)
        body = parquet_bytes(counted) if format == "parquet" else jsonl_bytes(counted, format)
    name = f"{run_id}-iteration{iteration}-{format}.{suffix}"
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    if it["dataset_id"] is not None:
        headers["X-Dataset-Id"] = it["dataset_id"]
    return StreamingResponse(body, media_type=media_type, headers=headers)


async def _count(samples: Any, svc: ApiServices, fmt: str) -> Any:
    counter = svc.metrics.export_rows.labels(fmt)
    async for sample in samples:
        counter.inc()
        yield sample


async def _count_batches(batches: AsyncGenerator[list[Any], None], svc: ApiServices, fmt: str) -> Any:
    """``batches`` passed on, each counted at once (the export_rows metric)."""
    counter = svc.metrics.export_rows.labels(fmt)
    async with contextlib.aclosing(batches):
        async for batch in batches:
            counter.inc(len(batch))
            yield batch


# ------------------------------------------------------------------------------------------------
# Named trace datasets
# ------------------------------------------------------------------------------------------------


def _query_error(exc: DatasetQueryError) -> ApiError:
    text = str(exc)
    where, _, problem = text.partition(": ")
    if not problem or " " in where:  # "query.since must be before query.until": the field leads
        head, _, rest = text.partition(" ")
        if rest and re.fullmatch(r"[a-z_]+(?:\.[a-z_]+)+", head):
            return field_error(f"body.{head}", rest)
        return field_error("body", text)
    return field_error(f"body.{where}", problem)


async def _owned_dataset(conn: AsyncConnection, project_id: str, dataset_id: str) -> Any:
    """The project's ``datasets`` row of ``dataset_id``; 404 otherwise."""
    row = await exports.dataset_row(conn, project_id, dataset_id)
    if row is None:
        raise not_found("dataset", dataset_id)
    return row


def _summary(row: Any) -> DatasetSummaryOut:
    return DatasetSummaryOut(**{k: row[k] for k in DatasetSummaryOut.model_fields})


def _entries(manifest: DatasetManifest) -> list[DatasetEntryOut]:
    return [DatasetEntryOut(**vars(e)) for e in manifest.entries]


@router.post(
    "/datasets", status_code=201, response_model=DatasetOut, summary="Build a named dataset from a query"
)
async def create_dataset(
    body: DatasetIn,
    principal: Principal = Depends(require("run")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    try:
        manifest = await builds.plan(
            svc.store.engine, project_id, body.name, body.query.to_domain(), body.allow_empty
        )
    except DatasetQueryError as exc:
        raise _query_error(exc) from None
    event, stream = builds.created_event(project_id, manifest)

    async def answer(conn: AsyncConnection) -> tuple[int, Any]:
        row = await _owned_dataset(conn, project_id, manifest.dataset_id)
        out = DatasetOut(
            **_summary(row).model_dump(), entries=_entries(manifest), warnings=list(manifest.warnings)
        )
        return 201, out.model_dump(mode="json")

    # the Idempotency-Key is claimed in the append's transaction, with the answer read there
    await append(
        svc,
        [new_event(stream, event, project_id=project_id, event_id=idem.new_id("event", 0))],
        expected_versions={stream: -1},
        idem=idem,
        answer=answer,
    )
    async with svc.store.engine.connect() as conn:
        _status, out = await answer(conn)
    return out


@router.get(
    "/datasets",
    response_model=DatasetPage,
    dependencies=[Depends(known_query_only)],
    summary="List the project's datasets, newest first",
)
async def list_datasets(
    cursor: str | None = Depends(cursor_param),
    name: str | None = Query(None, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"),
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    query, keys = exports.datasets_listing(principal.project(), name)
    page, next_cursor = await keyset_page(
        svc.store.engine, query, keys, (int,), cursor, limit, descending=True
    )
    return DatasetPage(items=[_summary(row) for row in page], next_cursor=next_cursor)


async def _dataset(svc: ApiServices, project_id: str, dataset_id: str) -> tuple[Any, DatasetManifest]:
    async with svc.store.engine.connect() as conn:
        row = await _owned_dataset(conn, project_id, dataset_id)
    return row, await builds.read_manifest(svc.store, dataset_id)


@router.get("/datasets/{dataset_id}", response_model=DatasetOut, summary="A dataset with its manifest")
async def get_dataset(
    dataset_id: str = DatasetId,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    row, manifest = await _dataset(svc, principal.project(), dataset_id)
    return DatasetOut(
        **_summary(row).model_dump(), entries=_entries(manifest), warnings=list(manifest.warnings)
    )


@router.get(
    "/datasets/{dataset_id}/download",
    response_class=StreamingResponse,
    summary="Download a dataset (streamed from the event log)",
    responses=_DOWNLOAD_RESPONSES,
)
async def download_named_dataset(
    dataset_id: str = DatasetId,
    format: DatasetFormat = Query(
        "openai",
        description="openai, sharegpt, samples or parquet; dpo (OpenAI preference JSONL) or prm (TRL "
        "stepwise supervision) from the pairs behind the dataset's revision samples; tokenized "
        "(Parquet for `model`) or hf (a zip of a datasets folder): docs/datasets.md.",
    ),
    model: str | None = ModelQuery,
    max_length: int | None = MaxLengthQuery,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    body: AsyncIterator[bytes]
    counter = svc.metrics.export_rows.labels(format)
    if (
        format not in PAIR_FORMATS
        and format not in MODEL_FORMATS
        and export_lines.renders_lines(svc.store.engine, format)
    ):  # PostgreSQL renders the lines; the manifest's entries are read as two lists
        async with svc.store.engine.connect() as conn:
            row = await _owned_dataset(conn, project_id, dataset_id)
        rendered = await builds.rendered_dataset(svc.store, svc.store.engine, dataset_id, row["position"])
        body = builds.dataset_body(svc.store.engine, rendered, format, counter)
    else:
        row, manifest = await _dataset(svc, project_id, dataset_id)
        if format in PAIR_FORMATS:
            body = pair_exports.dataset_body(svc.store, manifest, format, counter)
        elif format in MODEL_FORMATS:
            default = None
            if model is None and format == "tokenized":  # the project's default model, its newest run's
                default = await model_exports.newest_run_model(svc.store.engine, project_id)
            tokenizer = choose_tokenizer(format, model, max_length, svc.settings.model_root_paths, default)
            samples = _count(builds.iter_dataset_samples(svc.store.engine, manifest), svc, format)
            body = await model_exports.model_export_body(format, samples, tokenizer)
        else:
            batches = builds.dataset_sample_batches(svc.store.engine, manifest, plain=True)
            counted = _count_batches(batches, svc, format)
            body = parquet_bytes(counted) if format == "parquet" else jsonl_bytes(counted, format)
    media_type, suffix = _MEDIA[format]
    name = f"{row['name']}-v{row['version']}-{format}.{suffix}"
    headers = {
        "Content-Disposition": f'attachment; filename="{name}"',
        "X-Dataset-Id": dataset_id,
        "X-Dataset-Entries-Sha256": row["entries_sha256"],
    }
    return StreamingResponse(body, media_type=media_type, headers=headers)


@router.post(
    "/datasets/{dataset_id}/rebuild",
    response_model=RebuildOut,
    summary="Re-run a dataset's query up to its log position and compare with its manifest",
)
async def rebuild_dataset(
    dataset_id: str = DatasetId,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    _row, manifest = await _dataset(svc, project_id, dataset_id)
    problems = await builds.rebuild_problems(svc.store.engine, project_id, manifest)
    return RebuildOut(
        dataset_id=dataset_id,
        identical=not problems,
        problems=list(problems),
        entries_sha256=manifest.entries_sha256,
    )
