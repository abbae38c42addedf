"""The tree view at a thousand nodes and the review queue, in a real browser (Playwright on Debian's
chromium).

The real API app is served on a fresh PostgreSQL database (``tests/e2e/ui_seed.py``); a project, a
run and a 1,000-node tree with a pair of its leaves are appended to the event store as the search
and critic workers append them. The page must: draw every node, centre the chosen pair (each of its
nodes inside the canvas), find a node by its observation text and jump to it, fold unvisited
branches, draw action labels once zoomed in, move the keyboard focus parent / child / sibling and
open a node with Enter, keep the canvas wide at 800 px (the panel goes below), move the view from
the minimap, and grow live from the event stream while the tree is searched (NodesExpanded and
RolloutFinished applied, the tree itself not fetched again). The review page lists the disputed
pairs (critic t' != oracle, fallback, uncertain, low margin; not the ones critic and oracle agree
on), says how many are reviewed and remaining, and steps through them with j / k, each pair's diff
shown beside the queue; a reason filter narrows it. No literal null / undefined / NaN.
Everything waits on conditions (generous timeouts), never on fixed sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, tree_stream
from core.domain.review import review_priority, review_signals
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, login, no_literals, shot
from tests.e2e.ui_seed import (
    SeededProject,
    SyntheticTree,
    append_events,
    correction_event,
    pair_events,
    seed,
    serve_app,
    tree_events,
)

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong


@dataclass
class Site:
    base: str
    url: str  # the database
    project: SeededProject
    big: SyntheticTree
    disputed: list[str]  # the review queue's pairs, in priority order (the tree's pair: critic = oracle)
    fallback: str
    browser: Browser


def queue_rank(events: list[NewEvent]) -> tuple[float, str]:
    """The review queue's order of a seeded pair: its priority, highest first, then its id."""
    marked = events[1].event
    assert isinstance(marked, ev.FirstErrorMarked)
    return -review_priority(review_signals(marked)), marked.pair_id


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with pg_database() as url:
        project = seed(url, "ui-tree")
        big = tree_events(project.project_id, project.run_id, 1000, seed=7)
        pid, rid = project.project_id, project.run_id
        seeded = {
            "disagree": pair_events(pid, rid, "craft-a", critic_index=3, oracle_index=2),
            "fallback": pair_events(pid, rid, "craft-b", critic_index=5, oracle_index=None, fallback=True),
            "uncertain": pair_events(pid, rid, "craft-c", critic_index=2, oracle_index=2, uncertain=True),
            "low": pair_events(pid, rid, "craft-d", critic_index=4, oracle_index=4, margin=0.1),
            "agree": pair_events(pid, rid, "craft-e", critic_index=3, oracle_index=3),
        }
        corrected = correction_event(pid, seeded["disagree"][0], 3, 2)
        rank = lambda name: queue_rank(seeded[name][1])  # noqa: E731
        append_events(url, [big.events, *(events for _, events in seeded.values()), [corrected]])
        disputed = [seeded[k][0] for k in sorted(("disagree", "fallback", "uncertain", "low"), key=rank)]
        with serve_app(url) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Site(base, url, project, big, disputed, seeded["fallback"][0], browser)
            finally:
                browser.close()


def open_page(
    site: Site, route: str, width: int = 1400, requests: list[str] | None = None
) -> tuple[Page, list[str]]:
    """A new page logged in with the project's key at ``route``; its page errors (and, when asked,
    every request URL from the start)."""
    page = site.browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    if requests is not None:
        page.on("request", lambda r: requests.append(r.url))
    login(page, site.base, site.project.key, route)
    return page, errors


IN_CANVAS_JS = """(ids) => {
  const box = document.querySelector('#tree-canvas').getBoundingClientRect();
  return ids.filter((id) => {
    const el = document.querySelector(`#tree-canvas circle.node[data-node-id="${id}"]`);
    if (!el) return true;
    const r = el.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    return !(x >= box.left && x <= box.right && y >= box.top && y <= box.bottom);
  });
}"""


def test_a_1000_node_tree_renders_centres_searches_and_navigates(site: Site, tmp_path: Path) -> None:
    big = site.big
    page, errors = open_page(site, f"/trees/{big.tree_id}?pair={big.pair_id}")
    page.wait_for_selector(f'#tree-canvas[data-centred="{big.pair_id}"]')
    assert page.locator("#tree-canvas circle.node").count() == 1000
    # centring on the pair: the divergence node and both paths below it are inside the canvas
    assert page.evaluate(IN_CANVAS_JS, big.pair_nodes) == []
    assert page.locator("#tree-canvas .pair-path.bad").count() >= 1
    assert page.locator("#tree-canvas .pair-path.good").count() >= 1
    assert (
        page.locator("#tree-canvas circle.divergence").get_attribute("data-node-id") == big.divergence_node_id
    )
    page.wait_for_selector(f'#tree-pairs li.current[data-pair-id="{big.pair_id}"]')
    no_literals(page, "tree (1,000 nodes)")
    shot(page, tmp_path, "tree-1000")

    # search by observation text: the one node holding it is found, highlighted, centred and opened
    page.fill("#tree-search", big.needle)
    page.press("#tree-search", "Enter")
    page.wait_for_selector(f'#tree-canvas[data-jumped="{big.needle_node_id}"]')
    assert page.locator("#search-count").inner_text() == "1 of 1"
    current = page.locator("#tree-canvas circle.current-match")
    assert current.get_attribute("data-node-id") == big.needle_node_id
    assert page.evaluate(IN_CANVAS_JS, [big.needle_node_id]) == []
    assert big.needle in page.locator("#node-panel .history").inner_text()

    # zoomed in (the jump zooms to a readable scale): the action labels of the nodes in view
    page.wait_for_function("() => Number(document.querySelector('#tree-canvas').dataset.labels) > 0")
    actions = {r.node_id: r.action for r in big.records}
    shown = page.eval_on_selector_all(
        "#tree-canvas text.label", "els => els.map(e => [e.dataset.nodeId, e.textContent])"
    )
    assert shown and all(actions[node].startswith(text.rstrip("…")) for node, text in shown), shown[:5]

    # keyboard: focus the root, right = a child, down = its next sibling, left = back to the root
    root = big.root_id
    page.focus(f'#tree-canvas circle.node[data-node-id="{root}"]')
    focused = "() => document.activeElement && document.activeElement.dataset.nodeId"
    assert page.evaluate(focused) == root
    page.keyboard.press("ArrowRight")
    child = page.evaluate(focused)
    assert big.parents[child] == root
    page.keyboard.press("ArrowDown")
    sibling = page.evaluate(focused)
    if sibling == child:  # the child was the last one: its previous sibling then
        page.keyboard.press("ArrowUp")
        sibling = page.evaluate(focused)
    assert sibling != child and big.parents[sibling] == root
    page.keyboard.press("Enter")
    page.wait_for_function(
        "(id) => document.querySelector('#node-panel h3')?.innerText.includes(id.slice(0, 8))", arg=sibling
    )
    page.keyboard.press("ArrowLeft")
    assert page.evaluate(focused) == root

    # folding unvisited branches draws fewer nodes and says how many are folded; unfolding restores
    page.check("#fold-unvisited")
    page.wait_for_function("() => document.querySelectorAll('#tree-canvas circle.node').length < 1000")
    assert "folded" in page.locator("#node-count").inner_text()
    page.uncheck("#fold-unvisited")
    page.wait_for_function("() => document.querySelectorAll('#tree-canvas circle.node').length === 1000")

    # the minimap moves the view
    before = page.locator("#tree-canvas").get_attribute("viewBox")
    mini = page.locator("#tree-minimap").bounding_box()
    assert mini is not None
    page.mouse.click(mini["x"] + mini["width"] * 0.5, mini["y"] + mini["height"] * 0.9)
    assert page.locator("#tree-canvas").get_attribute("viewBox") != before
    assert not errors, errors
    page.close()


def test_at_800_px_the_panel_goes_below_the_canvas(site: Site) -> None:
    big = site.big
    page, errors = open_page(site, f"/trees/{big.tree_id}?node={big.needle_node_id}", width=800)
    page.wait_for_selector(f'#tree-canvas circle.node.selected[data-node-id="{big.needle_node_id}"]')
    canvas = page.locator("#tree-canvas").bounding_box()
    panel = page.locator("#node-panel").bounding_box()
    assert canvas is not None and panel is not None
    assert canvas["width"] >= 700, canvas  # the whole width, less the page's padding
    assert panel["y"] >= canvas["y"] + canvas["height"], (canvas, panel)
    assert page.evaluate(IN_CANVAS_JS, [big.needle_node_id]) == []
    no_literals(page, "tree at 800 px")
    assert not errors, errors
    page.close()


def test_a_tree_being_searched_grows_live_without_reloading(site: Site) -> None:
    tree_id, root = new_id(), new_id()
    kids = [new_id() for _ in range(3)]
    meta = Metadata(producer="search", project_id=site.project.project_id)
    stream = tree_stream(tree_id)
    started = ev.TreeStarted(
        tree_id, site.project.run_id, 0, "textcraft", "live", "inst", "task", "tiny", {}, root
    )
    first = [ev.NodeRecord(root, None, 0, "", "", "Goal: grow.")]
    first += [ev.NodeRecord(k, root, 1, f"get {i} oak", "t", "ok") for i, k in enumerate(kids)]
    append_events(
        site.url,
        [[NewEvent(stream, started, meta), NewEvent(stream, ev.NodesExpanded(tree_id, tuple(first)), meta)]],
    )

    requests: list[str] = []
    page, errors = open_page(site, f"/trees/{tree_id}", requests=requests)
    page.wait_for_selector("#tree-canvas circle.node")
    assert page.locator("#tree-canvas circle.node").count() == 4
    # (the page follows /v1/events from the snapshot's position: what is appended from now on is
    # applied whenever the stream connects)

    grand = [new_id() for _ in range(5)]
    more = tuple(
        ev.NodeRecord(g, kids[1], 2, f"craft {i} planks", "t", "ok", 1.0, True) for i, g in enumerate(grand)
    )
    append_events(
        site.url,
        [
            [NewEvent(stream, ev.NodesExpanded(tree_id, more), meta)],
            [NewEvent(stream, ev.RolloutFinished(tree_id, 0, grand[2], 1.0, "done"), meta)],
        ],
    )
    page.wait_for_function("() => document.querySelectorAll('#tree-canvas circle.node').length === 9")
    page.wait_for_function(
        '(id) => document.querySelector(`#tree-canvas circle.node[data-node-id="${id}"]`)'
        "?.dataset.visits === '1'",
        arg=root,
    )
    visits: dict[str, Any] = page.eval_on_selector_all(
        "#tree-canvas circle.node",
        "els => Object.fromEntries(els.map(e => [e.dataset.nodeId, e.dataset.visits]))",
    )
    assert [visits[n] for n in (root, kids[1], grand[2])] == ["1", "1", "1"]
    assert visits[grand[0]] == "0" and visits[kids[0]] == "0"
    assert page.locator("#node-count").inner_text().startswith("9 nodes")
    tree_reads = [u for u in requests if f"/v1/trees/{tree_id}" in u]
    assert len(tree_reads) == 1, tree_reads  # grown from the event stream, not by fetching the tree again
    assert any("/v1/events" in u for u in requests)
    assert not errors, errors
    page.close()


def test_the_review_queue_steps_through_disputed_pairs_with_j_and_k(site: Site, tmp_path: Path) -> None:
    page, errors = open_page(site, "/review")
    page.wait_for_selector("#review-queue tbody tr")
    listed = page.eval_on_selector_all("#review-queue tbody tr", "rows => rows.map(r => r.dataset.pairId)")
    assert listed == site.disputed  # the pair critic and oracle agree on is not there
    assert page.locator("#review-reviewed-count").inner_text() == "1"
    assert page.locator("#review-remaining-count").inner_text() == str(len(site.disputed) - 1)
    shown = "#review-detail[data-shown='{}'] #pair-diff tbody tr"
    page.wait_for_selector(shown.format(site.disputed[0]))
    assert page.locator("#review-position").inner_text() == f"1 of {len(site.disputed)}"
    no_literals(page, "review")
    shot(page, tmp_path, "review-queue")

    page.locator("body").press("j")
    page.wait_for_selector(shown.format(site.disputed[1]))
    page.keyboard.press("j")
    page.wait_for_selector(shown.format(site.disputed[2]))
    assert page.locator("#review-position").inner_text() == f"3 of {len(site.disputed)}"
    assert page.locator("#review-queue tr.current").get_attribute("data-pair-id") == site.disputed[2]
    page.keyboard.press("k")
    page.wait_for_selector(shown.format(site.disputed[1]))
    assert f"pair={site.disputed[1]}" in page.url  # the current pair is in the link
    # typing in a filter field is not a shortcut
    page.fill("#review-task", "j")
    assert page.locator("#review-detail").get_attribute("data-shown") == site.disputed[1]
    page.click("#review-next")
    page.wait_for_selector(shown.format(site.disputed[2]))

    # one reason: only the pair whose critic fell back
    page.select_option("#review-reason", "fallback")
    page.fill("#review-task", "")
    page.click("#review-filters button[type=submit]")
    page.wait_for_function(
        "(id) => { const rows = document.querySelectorAll('#review-queue tbody tr');"
        " return rows.length === 1 && rows[0].dataset.pairId === id; }",
        arg=site.fallback,
    )
    page.wait_for_selector(shown.format(site.fallback))
    assert page.locator("#review-queue td.reasons").inner_text() == "fallback"
    no_literals(page, "review (fallback)")
    assert not errors, errors
    page.close()
