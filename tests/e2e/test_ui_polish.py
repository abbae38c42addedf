"""The review UI's remaining rough edges (issue 52, items 4, 5, 6 and 8) in a real browser (Playwright
on Debian's chromium) over the real API app on a fresh PostgreSQL database (``tests/e2e/ui_seed.py``,
no workers): a project with a read/review/ingest key and a read-only key, a trained run whose
iteration 0 is evaluated, a 400-node tree with a pair, critiqued pairs and a trace.

Checked: a fresh run page follows the event stream from the project's newest event when it loaded
(not from 0), fetches the quality once and redraws only for an event that comes later (the run
completing: its bar turns the completed colour, on the run and the runs page); at 800 px the runs and
iterations tables scroll inside their own container while the page does not scroll sideways; the
tree lists its bad leaves and jumps to them, marks good and bad leaves by shape as well as colour and
keeps "fit" readable on a large tree; the quality charts' titles, legends and bar values do not
overlap, empty histogram bins are kept and the baselines are explained; the traces status filter
offers every status; a read-only key sees no correction form and no Create button; no request of
any page answers 404 (the favicon included); and axe-core finds no critical or serious violation in
the new states (the 800 px run page, the tree's leaf list, the captioned charts, the read-only pair).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import Browser, Page, Request, sync_playwright

from api.keys import generate_key
from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, project_stream, run_stream
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, login, no_literals, shot
from tests.e2e.test_ui_review_live import axe_problems, evaluations
from tests.e2e.ui_seed import (
    SeededProject,
    SyntheticTree,
    append_events,
    pair_events,
    seed,
    serve_app,
    tree_events,
)

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong


@dataclass
class Site:
    base: str
    url: str
    project: SeededProject
    read_only_key: str
    tree: SyntheticTree
    pairs: list[str]
    browser: Browser

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.project.key}"}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=30, **kwargs)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with pg_database() as url:
        project = seed(url, "ui-polish", ("read", "review", "ingest"))
        pid, rid = project.project_id, project.run_id
        # a read-only key of the same project (its ApiKeyIssued, as the keys route appends it)
        reader = generate_key()
        issued = ev.ApiKeyIssued(pid, new_id(), reader.prefix, reader.salt, reader.key_hash, ("read",))
        reader_event = NewEvent(project_stream(pid), issued, Metadata(producer="api", project_id=pid))
        tree = tree_events(pid, rid, 400, seed=5)
        pairs = [
            pair_events(pid, rid, "craft-a", critic_index=5, oracle_index=1),
            pair_events(pid, rid, "craft-b", critic_index=2, oracle_index=2),
            pair_events(pid, rid, "craft-c", critic_index=3, oracle_index=None, fallback=True),
        ]
        append_events(url, [[reader_event], tree.events, *(e for _, e in pairs), evaluations(project)])
        with serve_app(url) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Site(base, url, project, reader.key, tree, [p for p, _ in pairs], browser)
            finally:
                browser.close()


def open_page(site: Site, route: str, width: int = 1400, key: str | None = None) -> tuple[Page, list[str]]:
    page = site.browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    login(page, site.base, key or site.project.key, route)
    return page, errors


def after_of(url: str) -> int:
    return int(parse_qs(urlparse(url).query)["after"][0])


def test_a_fresh_run_page_follows_from_the_current_position_and_fetches_the_quality_once(site: Site) -> None:
    page = site.browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    requests: list[str] = []

    def seen(request: Request) -> None:
        requests.append(request.url)

    page.on("request", seen)
    position = site.api("GET", "/v1/events/position").json()["position"]
    assert position > 0
    run_id = site.project.run_id
    login(page, site.base, site.project.key, f"/runs/{run_id}")
    page.wait_for_selector("#quality[data-loaded='1']")
    for _ in range(600):  # the stream's request (a streamed response never ends: no resource entry)
        if any("/v1/events?" in u for u in requests):
            break
        page.wait_for_timeout(100)
    streams = [u for u in requests if "/v1/events?" in u]
    # the runs page (after login) and the run page: each from the position it loaded at, not 0
    assert {after_of(u) for u in streams} == {position}, streams
    # nothing came after the page's position: no redraw, the quality read once
    page.evaluate("document.querySelector('#run-status').dataset.first = 'yes'")
    page.wait_for_timeout(2500)  # more than the page's debounce: a replay would have redrawn it
    assert page.locator("#run-status[data-first='yes']").count() == 1
    quality = [u for u in requests if u.endswith("/iterations/1/quality")]
    assert len(quality) == 1, quality
    # an event after it: the page redraws once, live (the run completes; its bar turns "completed")
    meta = Metadata(producer="orchestrator", project_id=site.project.project_id)
    append_events(site.url, [[NewEvent(run_stream(run_id), ev.RunCompleted(run_id, "m1"), meta)]])
    page.wait_for_selector("#run-status.completed")
    page.wait_for_selector("#quality[data-loaded='1']")
    assert len([u for u in requests if u.endswith("/iterations/1/quality")]) == 2
    bar = page.locator("#iterations tr[data-iteration='1'] .progress")
    assert "completed" in (bar.get_attribute("class") or "")
    page.goto(f"{site.base}/ui/#/runs")
    runs_bar = page.locator(f"#runs tr[data-run-id='{run_id}'] .progress")
    runs_bar.wait_for()
    assert runs_bar.get_attribute("class") == "progress completed"
    colours = page.evaluate(
        """async () => {
          const { progressBar } = await import('/ui/static/pages/runs.js');
          const out = {};
          for (const status of ['completed', 'evaluated', 'running']) {
            const bar = progressBar(2, 4, status);
            document.body.append(bar);
            out[status] = getComputedStyle(bar.querySelector('.bar')).backgroundColor;
            bar.remove();
          }
          return out;
        }"""
    )
    shown = page.locator(f"#runs tr[data-run-id='{run_id}'] .progress .bar")
    assert shown.evaluate("e => getComputedStyle(e).backgroundColor") == colours["completed"]
    assert colours["evaluated"] == colours["completed"] != colours["running"], colours
    no_literals(page, "runs")
    assert not errors, errors
    page.close()


WIDTHS_JS = """(box) => ({
  page: document.documentElement.scrollWidth, window: window.innerWidth,
  box: box.clientWidth, table: box.querySelector('table').scrollWidth,
  overflow: getComputedStyle(box).overflowX,
})"""


def test_at_800_px_the_runs_and_iterations_tables_scroll_inside_a_box(site: Site) -> None:
    page, errors = open_page(site, "/runs", width=800)
    row = page.locator(f"#runs tr[data-run-id='{site.project.run_id}']")
    row.wait_for()
    runs = page.locator(".table-scroll:has(> #runs)").evaluate(WIDTHS_JS)
    # the table is wider than the window: it scrolls in its box, the page does not scroll sideways
    assert runs["table"] > runs["box"] and runs["overflow"] == "auto", runs
    assert runs["page"] <= runs["window"], runs
    box = page.locator(".table-scroll:has(> #runs)")
    assert box.get_attribute("tabindex") == "0" and box.get_attribute("aria-label")
    box.focus()
    page.keyboard.press("ArrowRight")  # the box scrolls with the keyboard
    page.wait_for_function("() => document.querySelector('.table-scroll:has(> #runs)').scrollLeft > 0")
    assert page.evaluate("window.scrollX") == 0

    page.goto(f"{site.base}/ui/#/runs/{site.project.run_id}")
    page.wait_for_selector("#iterations tbody tr")
    page.wait_for_selector("#quality[data-loaded]")
    iterations = page.locator(".table-scroll:has(> #iterations)").evaluate(WIDTHS_JS)
    assert iterations["table"] > iterations["box"] and iterations["overflow"] == "auto", iterations
    for table in ("#trees", "#pairs", "#samples", "#progress-table"):
        assert page.locator(f".table-scroll:has(> {table})").count() == 1, table
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), iterations
    page.keyboard.press("End")
    assert page.evaluate("window.scrollX") == 0
    assert axe_problems(page) == []  # the scroll boxes are named, focusable regions
    no_literals(page, "run at 800 px")
    assert not errors, errors
    page.close()


def leaf_kinds(nodes: list[dict[str, Any]], alpha: float) -> dict[str, str]:
    """Each leaf's kind as the tree page draws it: a node without children that was visited or is
    done, good when its mean value (its reward when unvisited) is at least alpha."""
    parents = {n["parent_id"] for n in nodes}
    out = {}
    for n in nodes:
        if n["node_id"] in parents or not (n["visits"] > 0 or n["done"]):
            continue
        reward = n["value_sum"] / n["visits"] if n["visits"] else n["reward"]
        out[n["node_id"]] = "good" if reward >= alpha else "bad"
    return out


JUMPED = "(id) => document.querySelector('#tree-canvas').dataset.jumped === id"
NODE_IDS = "els => els.map(e => e.dataset.nodeId)"


def test_the_tree_lists_and_jumps_to_bad_leaves_marks_them_by_shape_and_fits_readably(
    site: Site, tmp_path: Path
) -> None:
    tree = site.api("GET", f"/v1/trees/{site.tree.tree_id}").json()
    kinds = leaf_kinds(tree["nodes"], 0.5)  # the seeded iteration's alpha
    bad = {k for k, v in kinds.items() if v == "bad"}
    good = {k for k, v in kinds.items() if v == "good"}
    assert len(bad) >= 5 and good
    page, errors = open_page(site, f"/trees/{site.tree.tree_id}")
    page.wait_for_selector("#tree-canvas circle.node")
    # the list (built when opened): every bad leaf once, in the order the rows are drawn
    assert page.locator("#leaf-list li").count() == 0
    page.click("#leaves summary")
    page.wait_for_selector("#leaf-list li[data-node-id]")  # <details>' toggle event comes as a task
    listed = page.eval_on_selector_all("#leaf-list li[data-node-id]", NODE_IDS)
    assert set(listed) == bad and len(listed) == len(bad)
    assert page.locator("#leaf-count").inner_text() == f"{len(bad)} bad leaves"
    circle = "#tree-canvas circle[data-node-id='{}']"
    ys = [float(page.locator(circle.format(i)).get_attribute("cy") or 0) for i in listed]
    assert ys == sorted(ys)
    # next / prev step through them; each jump selects the leaf and brings it into the view
    page.click("#next-leaf")
    page.wait_for_function(JUMPED, arg=listed[0])
    page.click("#next-leaf")
    page.wait_for_function(JUMPED, arg=listed[1])
    assert page.locator("#leaf-count").inner_text() == f"2 of {len(bad)} bad leaves"
    page.click("#prev-leaf")
    page.wait_for_function(JUMPED, arg=listed[0])
    page.click(f"#leaf-list li[data-node-id='{listed[-1]}'] a")
    page.wait_for_function(JUMPED, arg=listed[-1])
    leaf = page.locator(f"#tree-canvas circle[data-node-id='{listed[-1]}']")
    assert "selected" in (leaf.get_attribute("class") or "")
    assert "bad leaf" in (leaf.get_attribute("aria-label") or "")
    canvas, spot = page.locator("#tree-canvas").bounding_box(), leaf.bounding_box()
    assert canvas and spot
    assert canvas["x"] <= spot["x"] and spot["x"] + spot["width"] <= canvas["x"] + canvas["width"]
    assert canvas["y"] <= spot["y"] and spot["y"] + spot["height"] <= canvas["y"] + canvas["height"]
    shot(page, tmp_path, "tree-leaves")
    depth = next(n["depth"] for n in tree["nodes"] if n["node_id"] == listed[-1])
    assert page.locator("#node-stats").inner_text().startswith(f"depth {depth} ")
    # the good leaves too
    page.select_option("#leaf-kind", "good")
    page.wait_for_selector("#leaf-list[data-kind=good]")
    good_listed = page.eval_on_selector_all("#leaf-list li[data-node-id]", NODE_IDS)
    assert set(good_listed) == good
    assert axe_problems(page) == []

    # shape as well as colour: one cross per bad leaf drawn, one check per good leaf
    page.click("#zoom-fit")
    drawn = page.eval_on_selector_all(
        "#tree-canvas circle.node.leaf:not(.folded)", "els => els.map(e => e.dataset.nodeId)"
    )
    crosses = (page.locator("#tree-canvas path.leaf-mark.bad").get_attribute("d") or "").count("M")
    checks = (page.locator("#tree-canvas path.leaf-mark.good").get_attribute("d") or "").count("M")
    assert crosses == len([i for i in drawn if i in bad]) == len(bad)
    assert checks == len([i for i in drawn if i in good]) == len(good)
    stroke = page.locator("#tree-canvas path.leaf-mark.bad").evaluate("e => getComputedStyle(e).stroke")
    assert stroke == "rgb(17, 24, 39)"  # a dark mark on any node colour (a white halo under it)

    # "fit" on a tree hundreds of rows tall: a readable scale, not a sliver, and a note saying so
    assert page.locator("#tree-canvas").get_attribute("data-fit") == "readable"
    assert float(page.locator("#tree-canvas").get_attribute("data-scale") or 0) >= 0.45
    root = page.locator(f"#tree-canvas circle[data-node-id='{site.tree.root_id}']").bounding_box()
    assert root and root["width"] >= 6  # a node is at least 6 px across
    canvas = page.locator("#tree-canvas").bounding_box()
    assert canvas and canvas["x"] <= root["x"] <= canvas["x"] + canvas["width"]
    assert canvas["y"] <= root["y"] <= canvas["y"] + canvas["height"]
    assert page.locator("#fit-note").is_visible() and "rows tall" in page.locator("#fit-note").inner_text()
    # folded small enough to be read at once, "fit" shows all of what is drawn and no note
    page.check("#fold-unvisited")
    page.check("#fold-closed")
    page.click(f"#leaf-list li[data-node-id='{good_listed[0]}'] a")  # select a good leaf, then
    # "-" toggles the root's fold: the first press shows the unvisited children the toolbar hid,
    # the second folds all but the selected leaf's path
    root_circle = page.locator(f"#tree-canvas circle[data-node-id='{site.tree.root_id}']")
    root_circle.press("-")
    root_circle.press("-")
    page.wait_for_function("() => Number(document.querySelector('#tree-canvas').dataset.shown) < 40")
    page.click("#zoom-fit")
    assert page.locator("#tree-canvas").get_attribute("data-fit") == "whole"
    assert page.locator("#fit-note").is_hidden()
    canvas = page.locator("#tree-canvas").bounding_box()
    assert canvas
    for box in page.locator("#tree-canvas circle.node").evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.right, r.bottom]; })"
    ):
        assert canvas["x"] <= box[0] and box[2] <= canvas["x"] + canvas["width"], box
        assert canvas["y"] <= box[1] and box[3] <= canvas["y"] + canvas["height"], box
    no_literals(page, "tree")
    assert not errors, errors
    page.close()


OVERLAPS_JS = """(svg) => {
  const box = (e) => { const b = e.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
  const hit = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
  const title = [...svg.querySelectorAll('text.chart-title')].map(box);
  const legend = [...svg.querySelectorAll('text.legend, rect.legend-swatch')].map(box);
  const plot = [...svg.querySelectorAll('rect.bar, text.bar-value')].map(box).filter((b) => b[3] > b[1]);
  const out = [];
  for (const t of title) for (const o of [...legend, ...plot]) if (hit(t, o)) out.push(['title', t, o]);
  for (const l of legend) for (const o of plot) if (hit(l, o)) out.push(['legend', l, o]);
  return out;
}"""


def test_quality_charts_keep_empty_bins_do_not_overlap_and_explain_the_baselines(site: Site) -> None:
    page, errors = open_page(site, f"/runs/{site.project.run_id}")
    page.wait_for_selector("#quality-iteration")
    page.select_option("#quality-iteration", "0")
    page.wait_for_selector('#quality[data-loaded="0"] #chart-t-prime')
    api = site.api("GET", f"/v1/runs/{site.project.run_id}/iterations/0/quality").json()
    # one bin per k from the smallest to the largest, an empty one (0 critic, 0 oracle) kept and drawn
    labels = [b["label"] for b in api["t_prime"]]
    assert labels == [str(k) for k in range(int(labels[0]), int(labels[-1]) + 1)], labels
    empty = [b["label"] for b in api["t_prime"] if b["critic"] == 0 and b["oracle"] == 0]
    assert empty, api["t_prime"]
    drawn = page.locator("#chart-t-prime rect.bar").evaluate_all(
        "rs => rs.map(r => [r.dataset.label, r.dataset.series, Number(r.dataset.value)])"
    )
    assert [label for label, series, _ in drawn if series == "critic"] == labels
    assert {(label, series): value for label, series, value in drawn} == {
        **{(b["label"], "critic"): b["critic"] for b in api["t_prime"]},
        **{(b["label"], "oracle"): b["oracle"] for b in api["t_prime"]},
    }
    for chart in (
        "chart-t-prime",
        "chart-agreement",
        "chart-actions",
        "chart-margins",
        "chart-revision-lengths",
    ):
        assert page.locator(f"#{chart}").evaluate(OVERLAPS_JS) == [], chart
    # the t' chart has two series: its legend sits on its own line under the title
    assert page.locator("#chart-t-prime text.legend").count() == 2
    note = page.locator("#baselines-note").inner_text()
    assert "direct: always the last bad action" in note and "first step: always the first bad action" in note
    assert page.locator("#chart-agreement").get_attribute("aria-describedby") == "baselines-note"
    assert page.locator("#chart-agreement rect.bar[data-label='direct']").count() == 1
    assert axe_problems(page) == []
    no_literals(page, "quality")
    assert not errors, errors
    page.close()


def test_the_traces_status_filter_offers_every_status(site: Site) -> None:
    uploaded = site.api(
        "POST",
        "/v1/traces",
        json={
            "format": "openai",
            "traces": [
                {
                    "messages": [
                        {"role": "user", "content": "Open the door."},
                        {"role": "assistant", "content": "Thought: go.\nAction: open door"},
                    ],
                    "outcome": "success",
                    "task_key": "polish-door",
                }
            ],
        },
    )
    assert uploaded.status_code == 202, uploaded.text
    page, errors = open_page(site, "/traces")
    page.wait_for_selector("#traces tbody tr[data-trace-id]")
    options = page.eval_on_selector_all("#f-status option", "os => os.map(o => o.value)")
    assert {"unpaired", "rejected", "revised", "critiqued", "no_error_found", "ingested"} <= set(options)
    for status in ("unpaired", "rejected", "ingested"):
        page.select_option("#f-status", status)
        wanted = f"status={status}"
        with page.expect_response(lambda r, wanted=wanted: "/v1/traces?" in r.url and wanted in r.url) as got:
            page.click("#trace-filters button[type=submit]")
        assert got.value.status == 200
        want = {
            t["trace_id"] for t in site.api("GET", "/v1/traces", params={"status": status}).json()["items"]
        }
        page.wait_for_function(
            "(n) => document.querySelectorAll('#traces tbody tr[data-trace-id]').length === n", arg=len(want)
        )
        shown = page.eval_on_selector_all(
            "#traces tbody tr[data-trace-id]", "rs => rs.map(r => r.dataset.traceId)"
        )
        assert set(shown) == want and f"status={status}" in page.url
    assert not errors, errors
    page.close()


def test_a_read_only_key_sees_no_correction_form_and_no_create_button(site: Site) -> None:
    pair_id = site.pairs[0]
    # the key that may review: the form and Accept are there
    page, errors = open_page(site, f"/pairs/{pair_id}")
    page.wait_for_selector("#pair-diff tbody tr")
    assert page.locator("#correct-submit").count() == 1 and page.locator("#accept-submit").count() == 1
    assert "key: ingest, read, review" in page.locator("#who").inner_text()
    page.goto(f"{site.base}/ui/#/datasets")
    page.wait_for_selector("#datasets")
    page.click("#builder summary")
    assert page.locator("#create-dataset").count() == 0  # this key lacks "run" too
    page.close()

    page, errors = open_page(site, f"/pairs/{pair_id}", key=site.read_only_key)
    page.wait_for_selector("#pair-diff tbody tr")
    assert "key: read" in page.locator("#who").inner_text()
    assert page.locator("#correct-submit, #accept-submit, #correct-t").count() == 0
    note = page.locator(".needs-scope[data-scope=review]")
    assert "lacks the review scope" in note.inner_text()
    assert page.locator("#pair-diff tr.pickable").count() == 0  # no step to pick either
    assert axe_problems(page) == []
    page.goto(f"{site.base}/ui/#/review")
    page.wait_for_selector("#review-detail[data-shown] #pair-diff tbody tr")
    assert page.locator("#review-detail #accept-submit, #review-detail #correct-submit").count() == 0
    assert page.locator("#review-detail .needs-scope[data-scope=review]").count() == 1
    page.locator("body").press("a")  # the accept key does nothing for this key
    page.wait_for_timeout(500)
    assert (
        site.api("GET", f"/v1/pairs/{page.locator('#review-detail').get_attribute('data-shown')}").json()[
            "accepts"
        ]
        == []
    )
    page.goto(f"{site.base}/ui/#/datasets")
    page.wait_for_selector("#datasets")
    page.click("#builder summary")
    assert page.locator("#create-dataset").count() == 0
    assert page.locator(".needs-scope[data-scope=run]").is_visible()
    page.goto(f"{site.base}/ui/#/runs")
    page.wait_for_selector(f"#runs tr[data-run-id='{site.project.run_id}']")
    assert page.locator("button.cancel-run").count() == 0
    assert not errors, errors  # no 403 was ever sent for a control the key could not use
    page.close()


def test_no_page_asks_for_anything_that_is_not_there_favicon_included(site: Site) -> None:
    icon = httpx.get(f"{site.base}/favicon.ico", timeout=30)
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg")
    page, errors = open_page(site, "/runs")
    page.wait_for_selector("#runs tbody tr")
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href and httpx.get(f"{site.base}{href}", timeout=30).status_code == 200
    for route, ready in (
        (f"/runs/{site.project.run_id}", "#quality[data-loaded]"),
        (f"/trees/{site.tree.tree_id}", "#tree-canvas circle.node"),
        (f"/pairs/{site.pairs[0]}", "#pair-diff tbody tr"),
        ("/traces", "#traces"),
        ("/datasets", "#datasets"),
        ("/review", "#review-detail[data-shown] #pair-diff tbody tr"),
    ):
        page.goto(f"{site.base}/ui/#{route}")
        page.wait_for_selector(ready)
    assert not errors, errors  # every response below 400 (open_page records the others)
    page.close()
