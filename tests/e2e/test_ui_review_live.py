"""Review round two in a real browser (Playwright on Debian's chromium) over the real API app.

The real app is served on a fresh PostgreSQL database (``tests/e2e/ui_seed.py``, no workers): a
project, a run, a small tree with a pair and critiqued pairs of different priorities are appended
to the event store as the search and critic workers append them. Checked: the review queue lists
the pairs in the API's priority order (highest first) and sorts by any column header; a reviewer
accepts the critic's t' with one key (``a``) and corrects another pair with two clicks (a bad step
of the diff, then Re-splice), each time moving on to the next pair still to review, with the counts
and the aria-live region following; queue rows take the keyboard focus and open with Enter; the
Review and Traces pages are live (a pair appended and a trace uploaded while they are open appear
without a reload, a pair another reviewer accepts turns reviewed); and axe-core (shipped in the
axe-playwright-python wheel) finds no critical or serious violation on any page.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, sync_playwright

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import run_stream
from core.domain.stats import wilson_interval
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, login, no_literals, shot
from tests.e2e.ui_seed import (
    SeededProject,
    SyntheticTree,
    append_events,
    pair_events,
    seed,
    serve_app,
    splice_as_worker,
    tree_events,
)
from tests.unit.test_training_progress import START, evaluated

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong


@dataclass
class Site:
    base: str
    url: str
    project: SeededProject
    tree: SyntheticTree
    pairs: dict[str, str]
    browser: Browser

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.project.key}"}

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, f"{self.base}{path}", headers=self.headers, timeout=30, **kwargs)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with pg_database() as url:
        project = seed(url, "ui-review-live", ("read", "review", "ingest"))
        pid, rid = project.project_id, project.run_id
        tree = tree_events(pid, rid, 60, seed=3)
        seeded = {
            "far": pair_events(pid, rid, "craft-far", critic_index=5, oracle_index=1),
            "near": pair_events(pid, rid, "craft-near", critic_index=3, oracle_index=2),
            "tight": pair_events(pid, rid, "craft-tight", critic_index=4, oracle_index=4, margin=0.05),
            "fallback": pair_events(
                pid, rid, "craft-fallback", critic_index=5, oracle_index=None, fallback=True
            ),
            "uncertain": pair_events(
                pid, rid, "craft-unsure", critic_index=2, oracle_index=2, uncertain=True
            ),
        }
        append_events(url, [tree.events, *(events for _, events in seeded.values()), evaluations(project)])
        splice_as_worker(url, seeded["fallback"][0])  # a sample for the sample page
        with serve_app(url) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Site(base, url, project, tree, {k: v[0] for k, v in seeded.items()}, browser)
            finally:
                browser.close()


def evaluations(project: SeededProject) -> list[NewEvent]:
    """The run's two iterations evaluated (iteration 0 with the start model's figures)."""
    rid, stream = project.run_id, run_stream(project.run_id)
    m = Metadata(producer="train", project_id=project.project_id)
    return [
        NewEvent(stream, ev.IterationEvaluated(rid, 0, "m0", evaluated(0.5, 0.4, start=START)), m),
        NewEvent(stream, ev.IterationStarted(rid, 1, "m0", 0.5, ()), m),
        NewEvent(stream, ev.IterationEvaluated(rid, 1, "m1", evaluated(0.65, 0.6)), m),
    ]


def open_page(site: Site, route: str, width: int = 1400) -> tuple[Page, list[str]]:
    page = site.browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, site.base, site.project.key, route)
    return page, errors


def queue_ids(page: Page) -> list[str]:
    return list(
        page.eval_on_selector_all("#review-queue tbody tr", "rows => rows.map(r => r.dataset.pairId)")
    )


SHOWN = "#review-detail[data-shown='{}'] #pair-diff tbody tr"


def test_the_queue_is_in_priority_order_and_sorts_by_its_columns(site: Site) -> None:
    page, errors = open_page(site, "/review")
    page.wait_for_selector("#review-queue tbody tr")
    api_order = [i["pair_id"] for i in site.api("GET", "/v1/review/queue").json()["items"]]
    assert queue_ids(page) == api_order and len(api_order) == 5
    shown = page.eval_on_selector_all(
        "#review-queue tbody tr", "rows => rows.map(r => Number(r.dataset.priority))"
    )
    assert shown == sorted(shown, reverse=True) and shown[0] > shown[-1]
    assert page.locator("#review-queue th[data-key=rank]").get_attribute("aria-sort") == "ascending"
    # the most urgent: the far disagreement (0.9 + margin) or the near-tie verdict (~0.95 + ...)
    assert api_order[0] in (site.pairs["far"], site.pairs["tight"])
    assert api_order.index(site.pairs["far"]) < api_order.index(site.pairs["near"])

    page.click("#review-queue th[data-key=task] button")
    tasks = page.eval_on_selector_all("#review-queue tbody td.task", "els => els.map(e => e.textContent)")
    assert tasks == sorted(tasks) and tasks != [
        page.locator(f"#review-queue tr[data-pair-id='{p}'] td.task").inner_text() for p in api_order
    ]
    assert page.locator("#review-queue th[data-key=task]").get_attribute("aria-sort") == "ascending"
    page.click("#review-queue th[data-key=task] button")
    tasks_down = page.eval_on_selector_all(
        "#review-queue tbody td.task", "els => els.map(e => e.textContent)"
    )
    assert tasks_down == sorted(tasks, reverse=True)
    assert "sort=-task" in page.url
    page.click("#review-queue th[data-key=priority] button")  # most urgent first again
    assert queue_ids(page) == api_order

    # rows take the keyboard focus and open with Enter
    row = page.locator(f"#review-queue tr[data-pair-id='{api_order[2]}']")
    row.focus()
    assert page.evaluate("document.activeElement.dataset.pairId") == api_order[2]
    page.keyboard.press("Enter")
    page.wait_for_selector(SHOWN.format(api_order[2]))
    no_literals(page, "review (sorted)")
    assert not errors, errors
    page.close()


def test_accept_with_one_key_and_correct_with_two_clicks(site: Site, tmp_path: Path) -> None:
    page, errors = open_page(site, "/review?reviewed=false")
    page.wait_for_selector("#review-queue tbody tr")
    order = queue_ids(page)
    first, second = order[0], order[1]
    page.wait_for_selector(SHOWN.format(first))
    reviewed = int(page.locator("#review-reviewed-count").inner_text())
    remaining = int(page.locator("#review-remaining-count").inner_text())

    # 1 action: "a" accepts the critic's t' and moves on
    page.locator("body").press("a")
    page.wait_for_selector(SHOWN.format(second))
    accepted = site.api("GET", f"/v1/pairs/{first}").json()
    assert accepted["reviewed"] is True and len(accepted["accepts"]) == 1
    assert accepted["accepts"][0]["transition_index"] == accepted["critic"]["transition_index"]
    assert accepted["corrections"] == []
    assert page.locator("#review-reviewed-count").inner_text() == str(reviewed + 1)
    assert page.locator("#review-remaining-count").inner_text() == str(remaining - 1)
    assert page.locator(f"#review-queue tr[data-pair-id='{first}']").get_attribute("data-reviewed") == "1"
    page.wait_for_function("() => /accepted/.test(document.querySelector('#announce').textContent)")

    # 2 actions: click a bad step (t' picked), then Re-splice; the queue moves on at once
    detail = site.api("GET", f"/v1/pairs/{second}").json()
    current = detail["transition_index"]
    target = next(i for i in range(detail["shared_steps"], len(detail["bad"]["steps"])) if i != current)
    page.click(f"#review-detail #pair-diff tr.pickable[data-step='{target}'] td.bad")
    assert page.locator("#correct-t").input_value() == str(target)
    page.click("#correct-submit")
    third = order[2]
    page.wait_for_selector(SHOWN.format(third))
    shot(page, tmp_path, "review-accept")
    (correction,) = site.api("GET", f"/v1/pairs/{second}").json()["corrections"]
    assert (correction["old_transition_index"], correction["new_transition_index"]) == (current, target)
    assert page.locator("#review-reviewed-count").inner_text() == str(reviewed + 2)
    # the splice worker re-splices it: the page says so in its live region, without leaving the queue
    splice_as_worker(site.url, second)
    page.wait_for_function(
        "() => /re-spliced at t'=/.test(document.querySelector('#announce').textContent)", timeout=TIMEOUT
    )
    assert page.locator("#review-detail").get_attribute("data-shown") == third
    no_literals(page, "review (after two reviews)")
    assert not errors, errors
    page.close()


def test_review_and_traces_pages_are_live(site: Site) -> None:
    page, errors = open_page(site, "/review")
    page.wait_for_selector("#review-queue tbody tr")
    page.evaluate("window.__sameDocument = true")
    before = len(queue_ids(page))
    total = page.locator("#review-total").inner_text()
    # a pair the critic judges while the page is open appears; its priority puts it first
    pair_id, events = pair_events(
        site.project.project_id, site.project.run_id, "craft-late", critic_index=5, oracle_index=0, margin=0.0
    )
    append_events(site.url, [events])
    page.wait_for_selector(f"#review-queue tr[data-pair-id='{pair_id}']", timeout=30_000)
    assert queue_ids(page)[0] == pair_id and len(queue_ids(page)) == before + 1
    assert page.locator("#review-total").inner_text() != total
    # another reviewer accepts a pair: it turns reviewed here, the counts follow
    other = site.pairs["uncertain"]
    response = site.api("POST", f"/v1/pairs/{other}/accept", json={"note": "second reviewer"})
    if response.status_code != 201:
        assert response.status_code == 422, response.text
    page.wait_for_selector(f"#review-queue tr[data-pair-id='{other}'][data-reviewed='1']", timeout=30_000)
    assert page.evaluate("window.__sameDocument === true")

    # traces: a trace uploaded while the page is open appears without a reload
    page.goto(f"{site.base}/ui/#/traces")
    page.wait_for_selector("#traces")
    page.evaluate("window.__sameDocument = true")
    rows = page.locator("#traces tbody tr[data-trace-id]").count()
    body = {
        "format": "openai",
        "traces": [
            {
                "messages": [
                    {"role": "user", "content": "Open the door."},
                    {"role": "assistant", "content": "Thought: go.\nAction: open door"},
                    {"role": "user", "content": "The door opens."},
                ],
                "outcome": "success",
                "task_key": "live-door",
            }
        ],
    }
    uploaded = site.api("POST", "/v1/traces", json=body)
    assert uploaded.status_code == 202, uploaded.text
    page.wait_for_function(
        "(n) => document.querySelectorAll('#traces tbody tr[data-trace-id]').length === n + 1",
        arg=rows,
        timeout=30_000,
    )
    assert "live-door" in page.locator("#traces").inner_text()
    assert page.evaluate("window.__sameDocument === true")
    assert not errors, errors
    page.close()


def test_the_run_page_shows_the_start_model_then_each_iteration(site: Site, tmp_path: Path) -> None:
    page, errors = open_page(site, f"/runs/{site.project.run_id}")
    page.wait_for_selector("#progress-table tbody tr")
    heads = page.eval_on_selector_all("#progress-table thead th", "els => els.map(e => e.innerText)")
    assert heads == ["figure", "start", "iteration 0", "iteration 1"]
    rows = page.eval_on_selector_all("#progress-table tbody tr", "els => els.map(e => e.dataset.metric)")
    assert rows == ["success", "recovery", "dead_loops", "invalid_actions"]

    def cell(metric: str, model: str) -> Any:
        return page.locator(f"#progress-table tr[data-metric={metric}] td[data-model='{model}']")

    for model, successes in (("start", 5), ("iteration 0", 10), ("iteration 1", 13)):
        interval = wilson_interval(successes, 20)
        assert interval.low is not None and interval.high is not None
        shown = cell("success", model)
        assert (shown.get_attribute("data-count"), shown.get_attribute("data-n")) == (str(successes), "20")
        text = shown.inner_text()
        pct = lambda v: f"{100 * v:.0f}%"  # noqa: E731
        assert f"{pct(successes / 20)} [{pct(interval.low)}–{pct(interval.high)}]" in text, text
        assert f"{successes}/20" in text
    assert cell("recovery", "start").inner_text() == "–"  # the start's failures define the recovery set
    assert cell("recovery", "iteration 1").get_attribute("data-count") == "6"
    # the plots: one point per model at its own x (none on the y-axis), an interval line each
    plot = page.locator("svg.progress-plot[data-metric=success]")
    xs = plot.locator("circle.point").evaluate_all("els => els.map(e => Number(e.getAttribute('cx')))")
    axis_x = float(plot.locator("line.axis").nth(1).get_attribute("x1") or 0)
    assert len(xs) == 3 and len(set(xs)) == 3 and min(xs) > axis_x + 5
    assert plot.locator("line.interval").count() == 3
    assert "start 25%" in (plot.get_attribute("aria-label") or "")
    no_literals(page, "run (progress)")
    shot(page, tmp_path, "run-progress", "#progress")
    assert not errors, errors
    page.close()


def axe_problems(page: Page) -> list[str]:
    """axe-core's critical and serious violations on the page, one line each."""
    results = Axe().run(page)
    out = []
    for violation in results.response["violations"]:
        if violation["impact"] in ("critical", "serious"):
            targets = [node["target"] for node in violation["nodes"]][:5]
            out.append(f"{violation['impact']} {violation['id']}: {violation['help']} {targets}")
    return out


def test_axe_finds_no_critical_or_serious_violation_on_any_page(site: Site) -> None:
    sample_id = site.api("GET", f"/v1/pairs/{site.pairs['fallback']}").json()["sample_id"]
    traces = site.api("GET", "/v1/traces").json()["items"]
    routes = {
        "runs": ("/runs", "#runs tbody tr"),
        "run": (f"/runs/{site.project.run_id}", "#run-status"),
        "tree": (f"/trees/{site.tree.tree_id}?pair={site.tree.pair_id}", "#tree-canvas circle.node"),
        "pair": (f"/pairs/{site.tree.pair_id}", "#pair-diff tbody tr"),
        "sample": (f"/samples/{sample_id}", "#messages li"),
        "traces": ("/traces", "#traces"),
        "datasets": ("/datasets", "#datasets"),
        "review": ("/review", "#review-detail[data-shown] #pair-diff tbody tr"),
    }
    if traces:
        routes["trace"] = (f"/traces/{traces[0]['trace_id']}", "#trace-steps, #trace-facts")
    found: dict[str, list[str]] = {}
    page, errors = open_page(site, "/runs")
    for name, (route, ready) in routes.items():
        page.goto(f"{site.base}/ui/#{route}")
        page.wait_for_selector(ready)
        problems = axe_problems(page)
        if problems:
            found[name] = problems
    # the key form (no key yet)
    fresh = site.browser.new_page()
    fresh.goto(f"{site.base}/ui/#/runs")
    fresh.wait_for_selector("#key-form")
    if problems := axe_problems(fresh):
        found["key form"] = problems
    fresh.close()
    assert found == {}, "\n".join(f"{k}: {line}" for k, lines in found.items() for line in lines)
    assert not errors, errors
    page.close()
