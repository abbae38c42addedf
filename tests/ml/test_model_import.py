"""`agentr model import` on a hub-style folder and on bad input: a plain safetensors folder that
loads through the normal path, and clear refusals of a GGUF of an unsupported architecture, a file
that is not GGUF, a source without a chat template and an output folder in use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentr.cli import app
from core.llm.hf import HFPolicy
from core.llm.model_import import IMPORT_FILE, ModelImportError, import_model, read_import
from core.llm.tiny import build_tiny_model

TEXTS = ["Goal: craft stick.", "Thought: planks.\nAction: get 2 oak planks"] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300
    )


def fake_gguf(path: Path, architecture: str) -> Path:
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), architecture)
    writer.add_name("fake")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_folder_imports_to_a_plain_folder_that_loads(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "imported"
    report = import_model(tiny, out)
    assert report.kind == "folder" and report.architecture == "llama"
    assert (out / "model.safetensors").is_file() and read_import(out) == report
    a, b = HFPolicy.from_folder(tiny, device="cpu"), HFPolicy.from_folder(out, device="cpu")
    ids = torch.tensor([a.encode("Goal: craft stick.")])
    with torch.inference_mode():
        assert torch.equal(a.model(input_ids=ids).logits, b.model(input_ids=ids).logits)
    assert b.tokenizer.chat_template == a.tokenizer.chat_template
    with pytest.raises(ModelImportError, match="exists and is not empty"):
        import_model(tiny, out)


def test_bad_sources_are_refused_by_name(tiny: Path, tmp_path: Path) -> None:
    unsupported = fake_gguf(tmp_path / "rwkv.gguf", "rwkv7")
    with pytest.raises(ModelImportError, match="GGUF architecture 'rwkv7' is not supported") as err:
        import_model(unsupported, tmp_path / "out1")
    assert "llama" in str(err.value)  # the supported ones are listed
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelImportError, match="not a readable GGUF file"):
        import_model(garbage, tmp_path / "out2")
    with pytest.raises(ModelImportError, match="not a .gguf file"):
        import_model(tiny / "config.json", tmp_path / "out3")
    with pytest.raises(ModelImportError, match="does not exist"):
        import_model(tmp_path / "missing", tmp_path / "out4")
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in tiny.iterdir():
        (bare / path.name).write_bytes(path.read_bytes())
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ModelImportError, match="carries no chat template"):
        import_model(bare, tmp_path / "out5")
    assert not any((tmp_path / f"out{i}").exists() for i in range(1, 6))
    # --chat-template supplies one
    template = tmp_path / "chatml.jinja"
    template.write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    report = import_model(bare, tmp_path / "out6", chat_template=template)
    assert (Path(report.out) / IMPORT_FILE).is_file()


def test_the_command_exits_2_naming_the_problem(tmp_path: Path) -> None:
    unsupported = fake_gguf(tmp_path / "rwkv.gguf", "rwkv7")
    result = CliRunner().invoke(app, ["model", "import", str(unsupported), str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "not supported" in " ".join(result.output.split())
