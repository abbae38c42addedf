"""Owns the dataset routes' model-ready downloads: ``tokenized`` (pre-tokenised Parquet) and ``hf``
(a zip archive of a Hugging Face ``datasets`` folder), made by train_service.tokenized_export, the
code ``agentr export`` and the CLI's downloads use, so the files hold the same rows.

The tokenizer's model: ``model`` (query) is resolved inside the server's model roots only
(api.model_refs; a reference outside them is the same 422 whether or not it exists, and a served
model's URL names no tokenizer). Without it, ``tokenized`` uses the default the sample token view
uses (api/routes/samples.py): for an iteration its model (the weights it trains from,
``RunConfig.train_weights``), for a named dataset the project's newest run's model, checked inside
the roots as well; ``hf`` without ``model`` holds the chat samples only, as the CLI's ``hf``.
``max_length`` defaults to the ``train.max_length`` of the run the model comes from, else the SFT
trainer's default (1024).

The samples are collected, then tokenised and written off the event loop (a worker thread) into a
temporary folder; the finished file is opened and the folder removed before the response starts,
so every failure is an answer (422 / 503) rather than a cut stream, and nothing is left on disk.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from api.errors import ApiError, field_error
from api.model_refs import OUTSIDE_ROOTS, resolve_model_ref
from core.domain.config import RunConfig, is_served_model
from core.domain.trajectory import TrainingSample
from core.store import exports
from train_service.tokenized_export import (
    DEFAULT_MAX_LENGTH,
    load_tokenizer,
    write_hf_dataset,
    write_tokenized_parquet,
)

URL_PATTERN = r"^[ \t\n\r\f\v]*[Hh][Tt][Tt][Pp][Ss]?://"
NOT_A_URL = {"type": "string", "pattern": URL_PATTERN}
"""A download's ``model`` is a folder, never a served model's URL (it holds no tokenizer): the
OpenAPI document states it as ``not`` this, beside the path pattern (api.model_refs)."""

MODEL_FORMATS = ("tokenized", "hf")
MEDIA = {"tokenized": ("application/vnd.apache.parquet", "parquet"), "hf": ("application/zip", "zip")}
MODEL_HELP = (
    "tokenized / hf: the model whose tokenizer and chat template make input_ids / labels, a folder "
    "inside the server's model roots (AGENTR_MODEL_ROOTS; not a served model's URL, which holds no "
    "tokenizer). Default for tokenized: the iteration's model (named datasets: the project's newest "
    "run's model); hf without it holds chat samples only."
)
MAX_LENGTH_HELP = (
    "tokenized / hf with a model: tokens per sample, cut from the right as the trainer does "
    "(default: the run's train.max_length, else 1024)."
)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Tokenizer:
    """Where the tokenizer is read (a folder inside the roots; None: hf without tokens), the cut, and
    how an error names the model (as the caller named it: never the resolved server path)."""

    folder: str | None
    max_length: int
    named: str = "the model"


def open_tokenizer(folder: str, load: Callable[[str], Any]) -> Any:
    """``load(folder)``, where any failure is an OSError (transformers raises a ValueError, quoting
    its own advice, for a folder without tokenizer files): ``model_problem`` says it in our words."""
    try:
        return load(folder)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot load a tokenizer from {folder}") from exc


def model_problem(exc: OSError | ValueError, folder: str | None, named: str) -> str:
    """Why the model ``named`` (as the caller named it; resolved to ``folder``) could not serve, in
    words without the server's paths: an OSError (transformers quotes the folder and the files it
    looked for) is a fixed sentence; a ValueError (the chat template's problem, which the caller
    needs) has the resolved folder replaced by the name the caller gave."""
    if isinstance(exc, OSError):
        return f"cannot load the tokenizer of {named}: it is not a model folder with tokenizer files"
    text = str(exc)
    if folder:
        text = text.replace(repr(folder), named).replace(folder, named)
    return f"cannot tokenise the samples with {named}: {text}"


def _max_length(config: RunConfig | None, given: int | None) -> int:
    if given is not None:
        return given
    configured = config.train.get("max_length") if config is not None else None
    return configured if isinstance(configured, int) and configured > 0 else DEFAULT_MAX_LENGTH


def choose_tokenizer(
    fmt: str,
    model: str | None,
    max_length: int | None,
    roots: Sequence[Path],
    default: tuple[str, RunConfig] | None,
    run_config: RunConfig | None = None,
) -> Tokenizer:
    """The tokenizer for a ``fmt`` download: ``model`` when given, else ``default`` (a model
    reference and the config of the run naming it) for ``tokenized``; 422 naming query.model.
    ``run_config``: the config of the run the data belongs to (iteration downloads)."""
    if model is not None:
        if re.match(URL_PATTERN, model):
            raise field_error("query.model", "a served model's URL holds no tokenizer: name its folder")
        resolved = None if "\x00" in model else resolve_model_ref(model, roots)
        if resolved is None:  # the same answer whether or not the path exists
            raise field_error("query.model", OUTSIDE_ROOTS)
        if is_served_model(resolved):
            raise field_error("query.model", "a served model's URL holds no tokenizer: name its folder")
        return Tokenizer(resolved, _max_length(run_config, max_length), repr(model))
    if fmt == "hf":
        return Tokenizer(None, DEFAULT_MAX_LENGTH)
    if default is None:
        raise field_error("query.model", "there is no run whose model could be the default: name a model")
    ref, config = default
    try:
        weights = config.train_weights(ref)
    except ValueError as exc:
        raise field_error("query.model", str(exc)) from None
    resolved = resolve_model_ref(weights, roots)
    if resolved is None:
        raise field_error("query.model", f"the default model {OUTSIDE_ROOTS}: name a model")
    return Tokenizer(resolved, _max_length(config, max_length), "the default model")


async def newest_run_model(engine: AsyncEngine, project_id: str) -> tuple[str, RunConfig] | None:
    """The project's default model (its newest run's) with that run's config, or None."""
    data = await exports.newest_run_config(engine, project_id)
    if data is None:
        return None
    config = RunConfig.from_data(data)
    return (config.model, config) if config.model else None


async def model_export_body(
    fmt: str, samples: AsyncIterator[TrainingSample], tokenizer: Tokenizer
) -> AsyncIterator[bytes]:
    """The ``fmt`` file of ``samples``, built before this returns (so errors are answers), streamed."""
    collected = [sample async for sample in samples]
    try:
        handle = await asyncio.to_thread(_build, fmt, collected, tokenizer)
    except ImportError:
        raise ApiError(503, f"{fmt} downloads need the ml extra: pip install 'agentr[ml]'") from None
    except (OSError, ValueError) as exc:  # ValueError: TemplateError, no assistant turns to mark
        raise field_error("query.model", model_problem(exc, tokenizer.folder, tokenizer.named)) from None
    return _stream(handle)


def _build(fmt: str, samples: list[TrainingSample], tokenizer: Tokenizer) -> IO[bytes]:
    folder = tokenizer.folder
    if folder is not None and not os.path.isdir(folder):  # never a Hugging Face Hub download
        raise OSError("no model folder there")
    loaded = open_tokenizer(folder, load_tokenizer) if folder is not None else None
    tmp = Path(tempfile.mkdtemp(prefix=f"agentr-{fmt}-"))
    try:
        if fmt == "tokenized":
            path = tmp / "data.parquet"
            write_tokenized_parquet(path, loaded, samples, tokenizer.max_length)
        else:
            write_hf_dataset(tmp / "hf", samples, loaded, tokenizer.max_length)
            path = tmp / "hf.zip"
            zip_folder(tmp / "hf", path)
        return path.open("rb")  # stays readable after the folder is removed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def zip_folder(folder: Path, out: Path) -> None:
    """``folder``'s files at the archive's top level: it extracts to the folder itself."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.write(file, file.relative_to(folder).as_posix())


async def _stream(handle: IO[bytes]) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(handle.read, _CHUNK):
            yield chunk
    finally:
        handle.close()
