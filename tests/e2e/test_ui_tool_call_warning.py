"""The sample inspector warns when a sample's tool calls are not trained (issue 27, item 8): in a real
browser (Playwright on Debian's chromium) over the real API app on PostgreSQL, a revision whose
corrective step is a ``get_order_details`` call, rendered through a plain ChatML on the tiny
tokenizer (which drops ``tool_calls``; tests/ml/templates/chatml_drops_tool_calls.jinja), shows a
visible alert naming the model; a sample without tool calls shows none. The
project, its run (model: a real tiny-model folder) and the samples are appended to the event store
as the API and the splicer append them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from core.domain.events import NewEvent
from core.domain.ids import new_id
from core.llm.tiny import build_tiny_model
from tests.api.seed import revision_event, revision_sample
from tests.api.test_api_tool_call_template import TEXTS, tool_revision
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import login
from tests.e2e.ui_seed import (
    CHROMIUM,
    CHROMIUM_ARGS,
    append_events,
    project_events,
    require_chromium,
    serve_app,
    watched_page,
)
from train_service.tokenized_export import load_tokenizer

require_chromium()

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong
DROPPING = Path(__file__).parents[1] / "ml" / "templates" / "chatml_drops_tool_calls.jinja"


@dataclass
class Seeded:
    key: str
    model: str
    tool_sample: str
    plain_sample: str
    events: list[NewEvent]


def seeded(model: str) -> Seeded:
    project, events = project_events("tool-ui", ("read",), model)
    pair_id, tool_id, plain_id = new_id(), new_id(), new_id()
    for sample in (tool_revision(tool_id), revision_sample(plain_id, 0)):
        events.append(revision_event(project.project_id, pair_id, project.run_id, sample))
    return Seeded(project.key, model, tool_id, plain_id, events)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded]]:
    folder = tmp_path_factory.mktemp("models") / "tiny"
    build_tiny_model(folder, TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    tokenizer = load_tokenizer(str(folder))
    tokenizer.chat_template = DROPPING.read_text()
    tokenizer.save_pretrained(folder)
    seed = seeded(str(folder))
    with pg_database() as url:
        append_events(url, [seed.events])
        with serve_app(url) as base:
            yield base, seed


def test_sample_page_warns_when_the_template_drops_tool_calls(site: tuple[str, Seeded]) -> None:
    base, seed = site
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, errors = watched_page(browser)
            login(page, base, seed.key, f"/samples/{seed.tool_sample}")
            warning = page.locator("#tool-call-warning")
            warning.wait_for(state="visible", timeout=TIMEOUT)
            text = " ".join(warning.inner_text().split())
            assert text.startswith("Tool calls are not trained:"), text
            assert "drops tool calls" in text and seed.model in text
            assert warning.get_attribute("role") == "alert"
            page.wait_for_selector("#tokens-summary")  # the tokens are still shown below it

            page.goto(f"{base}/ui/#/samples/{seed.plain_sample}")
            page.wait_for_selector("#messages:has-text('oak planks')", timeout=TIMEOUT)  # the new page
            page.wait_for_selector("#tokens-summary", timeout=TIMEOUT)
            assert page.locator("#tool-call-warning").count() == 0
            assert errors == []
        finally:
            browser.close()
