"""Owns the sample routes: one sample, and the exact tokens and labels the trainer trains it on.

``GET /v1/samples/{sample_id}`` (``read``): the sample's messages with their loss weights, each with
why it has its weight (``why``, set by the code that built the sample), the vocabulary of reasons
(``weight_reasons``, from core.domain.weight_reasons) and its provenance.

``GET /v1/samples/{sample_id}/tokens`` (``read``): the sample rendered through a model's chat template by
the trainer's own code (``train_service.tokenize.tokenize_sample``, with the run's
``train.max_length``), so the labels are the ones training uses: one entry per token with its id,
its text, whether it carries loss, and the assistant message whose turn holds it with that message's
reason (``message`` / ``why``; null for template text and context). The model is the iteration's
(the weights it trains from, ``RunConfig.train_weights``) unless ``model`` names another model of
the project's runs (their models, iteration models and checkpoints); anything else is refused, so
the API never opens a folder a run did not name. A sample of no run (a trace's) defaults to the
project's default model: the model of its newest run. Tokenizers are loaded once per folder and kept
(a few). A sample with tool calls rendered by a template that drops them
(``core.llm.chat_template.tool_call_problem``) says so: ``template_drops_tool_calls`` is true and
``tool_call_problem`` names the model and why (its calls are not among the trained tokens; the
sample page shows the warning).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, Field

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, field_error
from api.model_exports import model_problem, open_tokenizer
from api.reads import found
from api.routes.trees import sample_out
from api.schemas import ERROR_RESPONSES, ID_PATTERN
from api.schemas.trees import SampleDetailOut
from core.domain.config import RunConfig
from core.domain.trajectory import TrainingSample
from core.domain.weight_reasons import REASONS, TRAINED
from core.store.queries import runs as run_reads
from core.store.queries import samples as sample_reads

router = APIRouter(prefix="/v1/samples", tags=["samples"], responses=ERROR_RESPONSES)

_TOKENIZERS: OrderedDict[str, Any] = OrderedDict()
_TOKENIZERS_LOCK = threading.Lock()
_MAX_TOKENIZERS = 4


class TokenOut(BaseModel):
    id: int
    text: str = Field(description="The token's text as the tokenizer decodes it alone.")
    trained: bool = Field(description="True when the token's label is its id (it carries loss).")
    message: int | None = Field(
        None,
        description=(
            "The index (into the sample's messages) of the assistant message whose rendered turn holds "
            "the token; null for the chat template's own text and the context messages."
        ),
    )
    why: str | None = Field(
        None,
        description=(
            "That assistant message's reason for its weight (`why`, core.domain.weight_reasons); null "
            'where `message` is, "" when the sample has no recorded reasons.'
        ),
    )


class SampleTokensOut(BaseModel):
    sample_id: str
    model: str = Field(description="The model whose tokenizer and chat template rendered the sample.")
    weights: str = Field(description="The local folder the tokenizer was loaded from.")
    max_length: int
    total_tokens: int
    trained_tokens: int
    input_ids: list[int]
    labels: list[int] = Field(description="-100 where no loss is computed, else the token id.")
    tokens: list[TokenOut]
    template_drops_tool_calls: bool = Field(
        False, description="True when the sample calls tools and the model's chat template drops the calls."
    )
    tool_call_problem: str | None = Field(
        None, description="Why the calls are not trained (names the model), when template_drops_tool_calls."
    )


@router.get(
    "/{sample_id}",
    response_model=SampleDetailOut,
    summary="One sample: messages, weights and why, provenance",
)
async def get_sample(
    sample_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    row = found(await sample_reads.sample(svc.store, principal.project(), sample_id), "sample", sample_id)
    return SampleDetailOut(
        **sample_out(row).model_dump(), weight_reasons=dict(REASONS), trained_reasons=list(TRAINED)
    )


def _tokenizer(folder: str) -> Any:
    with _TOKENIZERS_LOCK:
        if folder in _TOKENIZERS:
            _TOKENIZERS.move_to_end(folder)
            return _TOKENIZERS[folder]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    with _TOKENIZERS_LOCK:
        _TOKENIZERS[folder] = tokenizer
        while len(_TOKENIZERS) > _MAX_TOKENIZERS:
            _TOKENIZERS.popitem(last=False)
    return tokenizer


async def _project_models(svc: ApiServices, project_id: str) -> dict[str, RunConfig]:
    """Every model the project's runs name (run model, iteration models, checkpoints) -> its run's config,
    the newest run's model first (the project's default model)."""
    named = await run_reads.project_models(svc.store, project_id)
    configs = {run_id: RunConfig.from_data(config) for run_id, config in named.configs}
    models: dict[str, RunConfig] = {}
    for config in configs.values():
        if config.model:
            models.setdefault(config.model, config)
    for run_id, model_ref, checkpoint in named.iteration_models:
        for ref in (model_ref, checkpoint):
            if ref:
                models.setdefault(ref, configs[run_id])
    return models


class _Rendered(NamedTuple):
    ids: list[int]
    labels: list[int]
    texts: list[str]
    owners: list[int | None]  # per token: the assistant message holding it (an index into messages)
    tool_problem: str | None


def _owners(tokenizer: Any, sample: TrainingSample, count: int) -> list[int | None]:
    """For each of the first ``count`` tokens, the index of the assistant message whose rendered turn
    holds it, by the same spans and overlap rule ``train_service.tokenize.tokenize_sample`` labels
    with (so every trained token has an owner, and its label came from that message's weight)."""
    from core.llm.chat_template import conversation_spans, hf_messages, hf_tools

    text, spans = conversation_spans(tokenizer, hf_messages(sample.messages), hf_tools(sample.tools or None))
    assistant = [i for i, m in enumerate(sample.messages) if m.role == "assistant"]
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    owners: list[int | None] = []
    span = 0
    for start, end in offsets[:count]:
        while span < len(spans) and start >= spans[span][1]:
            span += 1
        inside = span < len(spans) and end > spans[span][0] and end > start
        owners.append(assistant[span] if inside else None)
    return owners


def _render(folder: str, sample: TrainingSample, max_length: int) -> _Rendered:
    """Token ids, labels, texts and owning messages of ``sample``, and why its tool calls are not
    trained (or None)."""
    from core.llm.chat_template import calls_tools, tool_call_problem
    from train_service.tokenize import tokenize_sample

    tokenizer = open_tokenizer(folder, _tokenizer)
    tokenized = tokenize_sample(tokenizer, sample, max_length)
    texts = [tokenizer.decode([token]) for token in tokenized.input_ids]
    owners = _owners(tokenizer, sample, len(tokenized.input_ids))
    problem = tool_call_problem(tokenizer) if calls_tools(sample.messages) else None
    return _Rendered(tokenized.input_ids, tokenized.labels, texts, owners, problem)


@router.get(
    "/{sample_id}/tokens",
    response_model=SampleTokensOut,
    summary="The sample through a model's chat template: tokens and the trainer's loss labels",
)
async def get_sample_tokens(
    sample_id: str = Path(pattern=ID_PATTERN),
    model: str | None = Query(
        None,
        min_length=1,
        max_length=1000,
        description="A model of the project's runs (default: the iteration's).",
    ),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    row = found(await sample_reads.sample(svc.store, project_id, sample_id), "sample", sample_id)
    iteration_model = None
    if row["run_id"] is not None:
        at = await run_reads.iteration(svc.store, row["run_id"], row["iteration"])
        iteration_model = at["model_ref"] if at is not None else None
    known = await _project_models(svc, project_id)
    # a sample of no run (a trace's) defaults to the project's default model: its newest run's
    chosen = model or iteration_model or next(iter(known), None)
    if chosen is None:
        raise field_error(
            "query.model", "this sample belongs to no run and the project has no run: name a model"
        )
    if chosen not in known:
        names = ", ".join(sorted(known)[:5]) or "none"
        raise field_error("query.model", f"{chosen!r} is not a model of this project's runs (known: {names})")
    config = known[chosen]
    try:
        weights = config.train_weights(chosen)
    except ValueError as exc:
        raise field_error("query.model", str(exc)) from None
    max_length = int(config.train.get("max_length") or 0) or _default_max_length()
    sample = row_to_sample(row)
    try:
        rendered = await asyncio.to_thread(_render, weights, sample, max_length)
    except ImportError:
        raise ApiError(
            503, "token rendering needs the ml extra (transformers): pip install 'agentr[ml]'"
        ) from None
    except (OSError, ValueError) as exc:  # ValueError: TemplateError, the turns cannot be marked
        named = repr(model) if model is not None else "the default model"
        raise field_error("query.model", model_problem(exc, weights, named)) from None
    tokens = [
        TokenOut(
            id=i,
            text=t,
            trained=label != -100,
            message=owner,
            why=None if owner is None else sample.messages[owner].why,
        )
        for i, t, label, owner in zip(
            rendered.ids, rendered.texts, rendered.labels, rendered.owners, strict=True
        )
    ]
    return SampleTokensOut(
        sample_id=sample_id,
        model=chosen,
        weights=weights,
        max_length=max_length,
        total_tokens=len(rendered.ids),
        trained_tokens=sum(1 for t in tokens if t.trained),
        input_ids=rendered.ids,
        labels=rendered.labels,
        tokens=tokens,
        template_drops_tool_calls=rendered.tool_problem is not None,
        tool_call_problem=rendered.tool_problem,
    )


def _default_max_length() -> int:
    from train_service.sft import SFTConfig

    return SFTConfig().max_length
