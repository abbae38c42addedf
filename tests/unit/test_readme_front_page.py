"""The README is a front page (issue #46): at most 250 lines, the two commands first, and every
relative link in it, ARCHITECTURE.md and docs/ points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TWO_COMMANDS = [
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[ml]" && .venv/bin/agentr run',
    ".ci/test",
]


def test_readme_is_a_front_page_with_the_two_commands_first() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block is not None
    assert first_block.group(1).strip().splitlines() == TWO_COMMANDS
    assert text.index("```bash") < text.index("\n## "), "the commands come before any section"


def test_every_relative_link_in_the_docs_resolves() -> None:
    files = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for path in files:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if "://" not in target and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert broken == []
