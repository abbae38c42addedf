"""Every export format is offered everywhere (issue 28): the API's download routes serve the CLI's
model formats (tokenized, hf), and `agentr export`, `agentr dataset download` and `agentr datasets
download` name every format of the route they download from in --help."""

from __future__ import annotations

import re
from typing import get_args

from typer.testing import CliRunner

from agentr.cli import app
from agentr.cli.export_formats import LOCAL_FORMATS, PAIR_FORMATS
from api.dataset_schemas import DatasetFormat
from api.schemas import ExportFormat


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def _names(text: str, formats: tuple[str, ...]) -> list[str]:
    return [f for f in formats if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]


def test_the_api_serves_the_model_formats() -> None:
    assert set(LOCAL_FORMATS) <= set(get_args(ExportFormat))
    assert set(LOCAL_FORMATS) <= set(get_args(DatasetFormat))


def test_each_download_command_lists_every_format_in_help() -> None:
    export = ("openai", "sharegpt", "parquet", *PAIR_FORMATS, *LOCAL_FORMATS)
    assert _names(_help("export"), export) == []
    assert _names(_help("dataset", "download"), get_args(ExportFormat)) == []
    assert _names(_help("datasets", "download"), get_args(DatasetFormat)) == []
