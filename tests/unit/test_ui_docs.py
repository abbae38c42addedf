"""docs/ui.md shows every page of the web UI with a screenshot the browser tests took: every image
it names is in docs/, every docs/ui-*.png is named, every page has one, and each name is one a
browser test shoots (``shot(page, folder, NAME)`` writes ``ui-NAME.png`` under AGENTR_UI_SCREENSHOTS)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("runs", "run", "quality", "tree", "pair", "sample", "traces", "trace", "review-queue", "datasets")


def _named() -> set[str]:
    text = (ROOT / "docs" / "ui.md").read_text(encoding="utf-8")
    return set(re.findall(r"\]\((ui-[a-z0-9-]+\.png)\)", text))


def test_every_image_named_exists_and_every_screenshot_is_named() -> None:
    named = _named()
    on_disk = {p.name for p in (ROOT / "docs").glob("ui-*.png")}
    assert named == on_disk, {"named, missing": named - on_disk, "on disk, not named": on_disk - named}
    assert {f"ui-{page}.png" for page in PAGES} <= named


def test_every_screenshot_comes_from_a_browser_test() -> None:
    shot = re.compile(r"""shot\(\s*\w+,\s*\w+,\s*"([a-z0-9-]+)\"""")
    taken = {
        f"ui-{name}.png"
        for path in (ROOT / "tests" / "e2e").glob("test_ui_*.py")
        for name in shot.findall(path.read_text(encoding="utf-8"))
    }
    assert _named() <= taken, _named() - taken
