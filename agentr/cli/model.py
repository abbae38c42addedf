"""Owns the ``agentr model`` commands: build the tiny local model, import a GGUF file or model folder
into a plain safetensors folder, and serve a model over HTTP."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console

console = Console(stderr=True)
model_app = typer.Typer(
    help="Local models: build the tiny test model, import GGUF / hub folders, serve a model folder.",
    no_args_is_help=True,
)


@model_app.command("init-tiny")
def init_tiny(
    path: Path = typer.Argument(..., help="Folder to write the tokenizer and model into."),
    hidden: int = typer.Option(256, help="Hidden size."),
    layers: int = typer.Option(4, help="Transformer layers."),
    heads: int = typer.Option(4, help="Attention heads (must divide hidden)."),
    vocab_size: int = typer.Option(2048, help="BPE vocabulary size."),
    seed: int = typer.Option(0, help="Seed for the random initial weights."),
    force: bool = typer.Option(False, "--force", help="Overwrite a folder that already holds a model."),
) -> None:
    """Build a tiny Llama model with a BPE tokenizer trained offline on environment text."""
    from core.llm.tiny import build_tiny_model, default_corpus

    if (path / "config.json").exists() and not force:
        console.print(f"[red]{path} already holds a model[/red]; pass --force to overwrite it")
        raise typer.Exit(2)
    with console.status("collecting environment text..."):
        texts = list(default_corpus())
    with console.status(
        f"training a {vocab_size}-token BPE tokenizer on {len(texts)} texts and building the model..."
    ):
        try:
            build_tiny_model(
                path, texts, hidden=hidden, layers=layers, heads=heads, vocab_size=vocab_size, seed=seed
            )
        except ValueError as exc:
            console.print(f"[red]cannot build the tiny model:[/red] {exc}")
            raise typer.Exit(2) from exc
    console.print(f"tiny model written to [bold]{path}[/bold]")


@model_app.command("import")
def import_cmd(
    src: Path = typer.Argument(..., help="A .gguf file or a hub-style model folder."),
    out: Path = typer.Argument(..., help="New folder for the plain safetensors model."),
    dtype: str = typer.Option("float32", help="float32, bfloat16 or float16 for the saved weights."),
    chat_template: Path | None = typer.Option(
        None, "--chat-template", help="A Jinja chat template file to use instead of the source's."
    ),
) -> None:
    """Turn a GGUF file (de-quantised) or a model folder into a plain safetensors model folder with
    its tokenizer and chat template, loadable by `agentr run --model OUT` and `agentr model serve`."""
    from transformers.utils import logging as hf_logging

    from core.llm.model_import import ModelImportError, import_model

    hf_logging.disable_progress_bar()
    try:
        with console.status(f"importing {src}..."):
            report = import_model(src, out, dtype=dtype, chat_template=chat_template)
    except (ModelImportError, OSError) as exc:
        console.print(f"[red]cannot import {src}:[/red] {exc}")
        raise typer.Exit(2) from exc
    console.print(
        f"imported {report.kind} ({report.architecture}, {report.parameters / 1e6:.1f}M parameters, "
        f"{report.dtype}) to [bold]{report.out}[/bold]"
    )


@model_app.command("serve")
def serve(
    path: Path = typer.Argument(..., help="Model folder (save_pretrained layout with a chat template)."),
    port: int = typer.Option(8001, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    name: str = typer.Option("", help="Model id clients send (default: the folder's name)."),
    device: str = typer.Option("", help="cuda, cuda:1, cpu... (default: CUDA when present)."),
    dtype: str = typer.Option("", help="float32, bfloat16 or float16 (default: bf16 on CUDA, fp32 on CPU)."),
) -> None:
    """Serve a model folder as an OpenAI-compatible API (chat completions, completions, models)."""
    import uvicorn

    from core.llm.hf import HFPolicy
    from core.llm.ports import PolicyError
    from core.llm.server import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with console.status(f"loading {path}..."):
            policy = HFPolicy.from_folder(path, device=device or None, dtype=dtype or None)
    except PolicyError as exc:
        console.print(f"[red]cannot serve:[/red] {exc}")
        raise typer.Exit(2) from exc
    model_name = name or path.resolve().name
    console.print(f"serving [bold]{model_name}[/bold] ({policy.model_version}) on http://{host}:{port}/v1")
    uvicorn.run(create_app(policy, model_name), host=host, port=port, log_level="info")


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
