"""A correction on a failed trace's page redraws the trace (issue 30, item 2), in a real browser
(Playwright on Debian's chromium) over the real API app on PostgreSQL.

A failed and a successful trace of one task key, their pair and the critic's verdicts are appended
to the event store as the critic worker appends them; the pair is spliced by the splice worker's own
handler (``ui_seed.splice_as_worker``). No worker runs: once the page has sent its correction (and is
polling for it), the test does the splice worker's job on it through the real correction handler.
Without reloading, the page must then show the trace's new t' (the facts line and the steps table),
a row for the correction in the corrections table, the re-spliced sample (human-corrected) and the
"Re-spliced at t'=..." confirmation above the form; no literal null / undefined / NaN.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.sync_api import sync_playwright

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import derived_id, new_id, pair_stream, trace_stream
from tests.api.seed import trajectory
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import login, no_literals
from tests.e2e.ui_seed import (
    CHROMIUM,
    CHROMIUM_ARGS,
    SeededProject,
    append_events,
    require_chromium,
    seed,
    serve_app,
    splice_as_worker,
    watched_page,
)

require_chromium()

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong
FAILED = ["get 1 oak logs", "get 2 sticks", "craft 1 stick", "inventory"]
SUCCEEDED = ["get 1 oak logs", "craft 4 oak planks", "craft 4 sticks"]
CRITIC_T, REVIEWER_T = 1, 2  # the critic's first error; the step the reviewer moves it to
SAMPLE = "h2:text-is('Sample') + p"  # the trace's sample line (#trace-sample since 8c5240d)


@dataclass
class Site:
    base: str
    url: str  # the database
    project: SeededProject
    trace_id: str
    pair_id: str


def trace_pair_events(project_id: str, failed_id: str, ok_id: str) -> tuple[str, list[list[NewEvent]]]:
    """The two traces as ingested, and what the critic worker appends for them (the failed trace's
    critique, their pair and its first error at ``CRITIC_T``), in the critic's batches."""
    bad, good = trajectory(FAILED, 0.0), trajectory(SUCCEEDED, 1.0)
    pair_id = derived_id("trace-pair", failed_id)  # the critic's id for a failed trace's pair
    api = Metadata(producer="api", project_id=project_id)
    critic = Metadata(producer="critic", project_id=project_id)
    verdicts = tuple(
        ev.StepVerdict(i, "bad" if i == CRITIC_T else "good", method="rule") for i in range(CRITIC_T + 1)
    )
    ingested = [
        NewEvent(
            trace_stream(trace_id),
            ev.TraceIngested(trace_id, project_id, "stick", path, outcome, "openai"),
            api,
        )
        for trace_id, path, outcome in ((failed_id, bad, "failure"), (ok_id, good, "success"))
    ]
    found = ev.PairFound(
        pair_id=pair_id, source="trace", task_key="stick", bad=bad, good=good, shared_steps=1,
        bad_leaf_id=failed_id, good_leaf_id=ok_id,
    )  # fmt: skip
    critiqued = [
        NewEvent(trace_stream(failed_id), ev.TraceCritiqued(failed_id, "rules", CRITIC_T, verdicts), critic),
        NewEvent(pair_stream(pair_id), found, critic),
        NewEvent(pair_stream(pair_id), ev.FirstErrorMarked(pair_id, "rules", CRITIC_T, verdicts[1:]), critic),
    ]
    return pair_id, [ingested, critiqued]


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with pg_database() as url:
        project = seed(url, "ui-trace-correction")  # key scopes read + review
        failed_id, ok_id = new_id(), new_id()
        pair_id, batches = trace_pair_events(project.project_id, failed_id, ok_id)
        append_events(url, batches)
        (first,) = splice_as_worker(url, pair_id)
        assert isinstance(first, ev.RevisionMaterialized), first
        assert first.sample.provenance["transition_index"] == CRITIC_T
        with serve_app(url) as base:
            yield Site(base, url, project, failed_id, pair_id)


def test_a_finished_correction_redraws_the_trace_page(site: Site) -> None:
    headers = {"Authorization": f"Bearer {site.project.key}"}
    before = httpx.get(f"{site.base}/v1/traces/{site.trace_id}", headers=headers, timeout=30).json()
    assert (before["status"], before["transition_index"]) == ("revised", CRITIC_T)
    assert "origin" not in before["sample"]["provenance"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, errors = watched_page(browser)
            page.set_default_timeout(TIMEOUT)
            login(page, site.base, site.project.key, f"/traces/{site.trace_id}")
            page.wait_for_selector("#correct-form")
            # as the critic left it: t' at its step, the first sample, no correction yet
            assert f"first error at step {CRITIC_T}" in page.locator("#trace-facts").inner_text()
            assert page.locator("#trace-steps tr.transition").get_attribute("data-step") == str(CRITIC_T)
            messages = len(before["sample"]["messages"])
            assert page.locator(SAMPLE).inner_text().endswith(f"· {messages} messages")
            assert page.locator("#corrections").count() == 0
            assert page.locator("#trace-correction-result").count() == 0
            page.evaluate("window.__sameDocument = true")  # gone if the page were reloaded

            reflection = "I should have made planks before sticks."
            page.select_option("#correct-t", str(REVIEWER_T))
            page.fill("#correct-reflection", reflection)
            page.click("#correct-submit")
            # the page polls the pending correction; the splice worker's job is done on it now
            page.wait_for_selector("#correct-status:has-text('Re-splicing')")
            (respliced,) = splice_as_worker(site.url, site.pair_id)
            assert isinstance(respliced, ev.SampleRespliced), respliced

            result = page.locator("#trace-correction-result")
            result.wait_for()
            assert result.inner_text() == f"Re-spliced at t'={REVIEWER_T}."
            assert result.get_attribute("data-status") == "respliced"
            assert page.evaluate("window.__sameDocument") is True  # redrawn in place, not reloaded
            after = httpx.get(f"{site.base}/v1/traces/{site.trace_id}", headers=headers, timeout=30).json()
            assert after["transition_index"] == REVIEWER_T
            assert after["sample"]["provenance"]["origin"] == "human-corrected"
            # the new t', in the facts line and the steps table
            assert f"first error at step {REVIEWER_T}" in page.locator("#trace-facts").inner_text()
            assert page.locator("#trace-steps tr.transition").get_attribute("data-step") == str(REVIEWER_T)
            # the correction's row
            rows = page.locator("#corrections tbody tr")
            assert rows.count() == 1
            row = rows.first.inner_text()
            assert f"{CRITIC_T} → {REVIEWER_T}" in row and reflection in row and "respliced" in row, row
            # the re-spliced sample (one more bad step kept: two more messages)
            assert len(after["sample"]["messages"]) == messages + 2
            sample = page.locator(SAMPLE).inner_text()
            assert sample.endswith(f"· {messages + 2} messages · human-corrected"), sample
            assert page.locator(f"{SAMPLE} a").get_attribute("href") == f"#/samples/{after['sample_id']}"
            # the form is drawn again for the next correction, its t' the new one
            assert page.locator("#correct-t").input_value() == str(REVIEWER_T)
            no_literals(page, "trace after a correction")
            # the trace's sample page names where it came from, not a run's "iteration 0"
            page.click(f"{SAMPLE} a")
            page.wait_for_selector("#sample-source")
            facts = page.locator("#sample-source").locator("xpath=..").inner_text()
            assert "from a production trace (no run)" in facts and "iteration" not in facts, facts
            assert errors == []
        finally:
            browser.close()
