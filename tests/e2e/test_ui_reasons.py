"""The sample page says why each message and token is trained (issue 30, item 6), in a real browser
(Playwright on Debian's chromium) over the real API app on PostgreSQL: a revision built by the splice
code itself (a shared step, a bad step through t', a good continuation whose first step the
environment rejected) shows beside every "weight 0/1" the reason the splice recorded (the same as
the API's ``why``; weight 1 exactly with a trained reason), every trained token's tooltip names its
message and reason, and a sample stored before reasons existed says "reason not recorded". The
project, its run (model: a real tiny-model folder) and the samples are appended to the event store as
the API and the splicer append them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from core.domain.events import NewEvent
from core.domain.good_samples import revision_masks
from core.domain.ids import new_id
from core.domain.splice import revision_sample, splice_path
from core.domain.trajectory import TrainingSample
from core.domain.weight_reasons import TRAINED
from core.llm.tiny import build_tiny_model
from tests.api.seed import revision_event, trajectory
from tests.api.seed import revision_sample as unreasoned_sample
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import login, no_literals, shot
from tests.e2e.ui_seed import (
    CHROMIUM,
    CHROMIUM_ARGS,
    append_events,
    project_events,
    require_chromium,
    serve_app,
    watched_page,
)

require_chromium()

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong
TEXTS = ["Answer with Thought: ... Action: ... Goal: craft stick. obs get 1 oak logs craft 4 planks"] * 20


@dataclass
class Seeded:
    key: str
    spliced: TrainingSample
    old_id: str
    events: list[NewEvent]


def spliced_sample(sample_id: str) -> TrainingSample:
    bad = trajectory(["get 1 oak logs", "get 9 sand", "inventory"], 0.0)
    good = trajectory(["get 1 oak logs", "craft 4 stick", "craft 4 oak planks", "craft 4 stick"], 1.0)
    rejected = replace(good.steps[1], observation="Could not execute craft 4 stick", valid=False)
    good = replace(good, steps=(good.steps[0], rejected, *good.steps[2:]))
    path = splice_path(bad, good, shared_steps=1, transition=2)
    masked, record = revision_masks(path)
    return revision_sample(
        sample_id, bad, good, path, "I fetched sand I did not need.", {"loss_masked": record}, masked=masked
    )


def seeded(model: str) -> Seeded:
    project, events = project_events("reasons-ui", ("read",), model)
    spliced, old_id = spliced_sample(new_id()), new_id()
    pair_id = new_id()
    for sample in (spliced, unreasoned_sample(old_id, 0)):
        events.append(revision_event(project.project_id, pair_id, project.run_id, sample))
    return Seeded(project.key, spliced, old_id, events)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded]]:
    folder = tmp_path_factory.mktemp("models") / "tiny"
    build_tiny_model(folder, TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    seed = seeded(str(folder))
    with pg_database() as url:
        append_events(url, [seed.events])
        with serve_app(url) as base:
            yield base, seed


def test_the_sample_page_shows_why_each_message_and_token_is_trained(
    site: tuple[str, Seeded], tmp_path: Path
) -> None:
    base, seed = site
    sample_id = seed.spliced.sample_id
    api = httpx.get(
        f"{base}/v1/samples/{sample_id}", headers={"Authorization": f"Bearer {seed.key}"}, timeout=30
    ).json()
    expected = [m.why for m in seed.spliced.messages]
    assert [m["why"] for m in api["sample"]["messages"]] == expected
    assert {"masked_invalid", "continuation", "bad_step", "shared_prefix"} <= set(expected)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, errors = watched_page(browser)
            login(page, base, seed.key, f"/samples/{sample_id}")
            page.wait_for_selector("#tokens .tok", timeout=TIMEOUT)
            rows = page.eval_on_selector_all(
                "#messages li",
                """els => els.map(e => ({weight: Number(e.dataset.weight), why: e.dataset.why,
                    tag: e.querySelector('.tag.why').textContent,
                    title: e.querySelector('.tag.why').title}))""",
            )
            assert [r["why"] for r in rows] == expected
            assert [r["tag"] for r in rows] == [why.replace("_", " ") for why in expected]
            for row in rows:
                assert (row["weight"] == 1) == (row["why"] in TRAINED), row
                assert row["title"] == api["weight_reasons"][row["why"]]  # the meaning, as a tooltip
            tokens = page.eval_on_selector_all(
                "#tokens .tok",
                "els => els.map(e => ({trained: e.dataset.trained === '1', why: e.dataset.why, "
                "message: e.dataset.message, title: e.title}))",
            )
            trained = [t for t in tokens if t["trained"]]
            assert trained and all(t["why"] in TRAINED for t in trained)
            assert all(f"message {t['message']}: {t['why'].replace('_', ' ')}" in t["title"] for t in trained)
            masked_turn = str(expected.index("masked_invalid"))
            assert any(t["message"] == masked_turn and not t["trained"] for t in tokens)
            no_literals(page, "sample (reasons)")
            shot(page, tmp_path, "sample-reasons")

            page.goto(f"{base}/ui/#/samples/{seed.old_id}")
            page.wait_for_selector("#messages:has-text('oak planks')", timeout=TIMEOUT)
            tags = page.locator("#messages .tag.why").all_inner_texts()
            assert tags and set(tags) == {"reason not recorded"}
            no_literals(page, "sample (no reasons)")
            assert errors == []
        finally:
            browser.close()


def test_a_masked_step_and_the_steps_it_did_not_touch_keep_their_kinds() -> None:
    """The seed is what the splice worker writes: its rejected continuation step is the masked one."""
    sample = spliced_sample("s")
    turns = [(m.weight, m.why) for m in sample.messages if m.role == "assistant"]
    assert turns == [
        (0, "shared_prefix"),
        (0, "bad_step"),
        (0, "bad_step"),
        (0, "masked_invalid"),
        (1, "continuation"),
        (1, "continuation"),
    ]
