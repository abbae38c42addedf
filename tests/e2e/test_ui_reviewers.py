"""Several reviewers in a real browser (Playwright on Debian's chromium) over the real API app.

Two review keys of one project (Ann, Bob), each in a browser page of its own, on a fresh PostgreSQL
database (``tests/e2e/ui_seed.py``, no workers: the splice worker's part is done on demand by its
real handlers, ``splice_as_worker``). Checked: Ann claims a pair and Bob's page shows "claimed by"
Ann (and his moving on skips it); Ann corrects the pair, Bob accepts it, and both the queue and the
pair view show "2 of 2 agree", with the overall agreement figure above the queue; Ann undoes her
correction, the splice worker restores the earlier sample and the pair view shows it; "my reviews"
keeps only Ann's pairs; axe-core finds no critical or serious violation on the changed pages; Ann
hands her pair to Bob by picking his name from the project's reviewers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, project_stream
from tests.conftest import pg_database
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, login, no_literals, shot
from tests.e2e.test_ui_review_live import axe_problems
from tests.e2e.ui_seed import SeededProject, append_events, pair_events, seed, serve_app, splice_as_worker

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong


@dataclass
class Site:
    base: str
    url: str
    project: SeededProject
    bob: str  # the second reviewer's key
    pairs: list[str]  # most urgent first
    browser: Browser

    def api(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key or self.project.key}"}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=30, **kwargs)


def second_key(project: SeededProject, label: str) -> tuple[str, list[NewEvent]]:
    """Another review key of the project: its secret and the event the API appends for it."""
    from api.keys import generate_key

    issued = generate_key()
    meta = Metadata(producer="test", project_id=project.project_id)
    event = ev.ApiKeyIssued(
        project.project_id, new_id(), issued.prefix, issued.salt, issued.key_hash, ("read", "review"), label
    )
    return issued.key, [NewEvent(project_stream(project.project_id), event, meta)]


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with pg_database() as url:
        project = seed(url, "ui-reviewers", ("read", "review"))
        pid, rid = project.project_id, project.run_id
        bob, issued = second_key(project, "Bob")
        seeded = [
            pair_events(pid, rid, "craft-first", critic_index=5, oracle_index=1),
            pair_events(pid, rid, "craft-second", critic_index=3, oracle_index=2),
            pair_events(pid, rid, "craft-third", critic_index=4, oracle_index=4, margin=0.05),
        ]
        append_events(url, [issued, *(events for _, events in seeded)])
        for pair_id, _ in seeded:
            splice_as_worker(url, pair_id)
        with serve_app(url) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                order = [
                    i["pair_id"]
                    for i in httpx.get(
                        f"{base}/v1/review/queue",
                        headers={"Authorization": f"Bearer {project.key}"},
                        timeout=30,
                    ).json()["items"]
                ]
                yield Site(base, url, project, bob, order, browser)
            finally:
                browser.close()


def open_page(site: Site, key: str, route: str) -> tuple[Page, list[str]]:
    page = site.browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, site.base, key, route)
    return page, errors


SHOWN = "#review-detail[data-shown='{}'] #pair-diff tbody tr"


def test_claim_two_reviews_agreement_undo_and_my_reviews(site: Site, tmp_path: Path) -> None:
    first, second, third = site.pairs
    ann, ann_errors = open_page(site, site.project.key, f"/review?pair={first}")
    ann.wait_for_selector(SHOWN.format(first))
    assert ann.locator("#claimed-by").inner_text() == "Not claimed"

    # Ann claims the first pair: Bob's queue and pair view say so
    ann.click("#claim-pair")
    ann.wait_for_selector("#claim-bar.mine")
    assert ann.locator("#claimed-by").inner_text() == "Claimed by you"
    bob, bob_errors = open_page(site, site.bob, f"/review?pair={first}")
    bob.wait_for_selector(SHOWN.format(first))
    assert bob.locator("#claimed-by").inner_text().startswith("Claimed by agr_")
    assert bob.locator("#claim-pair").count() == 0
    row = bob.locator(f"#review-queue tr[data-pair-id='{first}']")
    assert row.get_attribute("data-claimed") and row.locator("td.claimed").inner_text().startswith("agr_")
    taken = site.api("POST", f"/v1/pairs/{first}/claim", key=site.bob, json={})
    assert taken.status_code == 409 and "claimed by" in taken.json()["detail"]

    # Bob accepts the third pair: moving on skips the first (Ann's) and lands on the second
    bob.click(f"#review-queue tr[data-pair-id='{third}']")
    bob.wait_for_selector(SHOWN.format(third))
    bob.click("#accept-submit")
    bob.wait_for_selector(SHOWN.format(second))

    # Ann corrects her pair (two clicks), the worker re-splices it; Bob accepts the corrected t'
    detail = site.api("GET", f"/v1/pairs/{first}").json()
    target = next(
        i
        for i in range(detail["shared_steps"], len(detail["bad"]["steps"]))
        if i != detail["transition_index"]
    )
    ann.click(f"#review-detail #pair-diff tr.pickable[data-step='{target}'] td.bad")
    ann.click("#correct-submit")
    ann.wait_for_function(f"() => document.querySelector('#review-detail').dataset.shown !== '{first}'")
    splice_as_worker(site.url, first)
    bob.click(f"#review-queue tr[data-pair-id='{first}']")
    bob.wait_for_selector(SHOWN.format(first))
    bob.wait_for_selector(f"#review-detail #transition[data-step='{target}']")
    bob.click("#accept-submit")
    bob.wait_for_function(f"() => document.querySelector('#review-detail').dataset.shown !== '{first}'")
    agreed = site.api("GET", f"/v1/pairs/{first}").json()
    assert agreed["agreement"] == f"2 of 2 agree on step {target}"

    # both see the agreement: the queue's column, the pair view, the overall figure
    ann.goto(f"{site.base}/ui/#/review?pair={first}")
    ann.reload()  # the same hash does not redraw the page
    ann.wait_for_selector(SHOWN.format(first))
    ann.wait_for_function(
        f"() => /2 of 2 agree on step {target}/.test(document.querySelector('#pair-agreement').textContent)"
    )
    cell = ann.locator(f"#review-queue tr[data-pair-id='{first}'] td.agreement")
    assert cell.inner_text() == f"2 of 2 agree on step {target}"
    assert ann.locator("#verdict-list li").count() == 2
    assert (
        "Agreement: 100% (1 of 1 pairs with two reviews or more)"
        in ann.locator("#review-agreement").inner_text()
    )
    no_literals(ann, "review (agreement)")
    shot(ann, tmp_path, "review-reviewers")

    # Ann undoes her correction: the splice worker restores the sample before it
    assert "correction" in ann.locator("#undo-review").inner_text()
    ann.click("#undo-review")
    ann.wait_for_function(
        "() => /Undid your correction/.test(document.querySelector('#announce').textContent)"
    )
    (restored,) = splice_as_worker(site.url, first)
    assert isinstance(restored, ev.SampleRespliced) and restored.sample.provenance["restored_by_undo"]
    ann.goto(f"{site.base}/ui/#/review?pair={first}")
    ann.reload()  # the same hash does not redraw the page
    ann.wait_for_selector(SHOWN.format(first))
    ann.wait_for_selector(f"#review-detail #transition[data-step='{detail['transition_index']}']")
    assert ann.locator("#undo-review").count() == 0  # her verdict is gone; Bob's acceptance stands
    assert ann.locator("#pair-agreement").inner_text() == f"1 review: step {target}"
    assert "(undone)" in ann.locator("#corrections").inner_text()

    # "my reviews": Ann holds the first pair; Bob reviewed the first and the third
    ann.select_option("#review-mine", "true")
    ann.click("#review-filters button[type=submit]")
    ann.wait_for_function("() => document.querySelectorAll('#review-queue tbody tr').length === 1")
    assert [
        r for r in ann.eval_on_selector_all("#review-queue tbody tr", "rs => rs.map(r => r.dataset.pairId)")
    ] == [first]
    assert "mine=true" in ann.url
    bob.goto(f"{site.base}/ui/#/review?mine=true")
    bob.wait_for_function("() => document.querySelectorAll('#review-queue tbody tr').length === 2")
    mine = set(bob.eval_on_selector_all("#review-queue tbody tr", "rs => rs.map(r => r.dataset.pairId)"))
    assert mine == {first, third}

    # axe on the changed pages: the review page (claim bar, verdicts, agreement) and the pair page
    found: dict[str, list[str]] = {}
    for name, route, ready in (
        ("review", f"/review?pair={first}", SHOWN.format(first)),
        ("pair", f"/pairs/{first}", "#verdicts"),
    ):
        ann.goto(f"{site.base}/ui/#{route}")
        ann.wait_for_selector(ready)
        ann.wait_for_selector("#claim-bar")
        if problems := axe_problems(ann):
            found[name] = problems
    assert found == {}, "\n".join(f"{k}: {line}" for k, lines in found.items() for line in lines)

    # Ann (the holder) hands the pair to Bob by name: the list is the project's reviewers but her
    ann.goto(f"{site.base}/ui/#/pairs/{first}")
    ann.wait_for_selector("#assign-key option[value]:not([value=''])", state="attached")
    names = ann.eval_on_selector_all("#assign-key option", "os => os.map(o => o.textContent)")
    assert names == ["assign to…", "agr_" + site.bob.split("_")[1][:12] + " (Bob)"], names
    assert ann.locator("#assign-pair").is_disabled()
    ann.select_option("#assign-key", index=1)
    ann.click("#assign-pair")
    ann.wait_for_selector("#claim-bar.theirs")
    assert ann.locator("#claimed-by").inner_text().startswith("Claimed by agr_")
    assert "(Bob) (assigned by agr_" in ann.locator("#claimed-by").inner_text()
    bob.goto(f"{site.base}/ui/#/pairs/{first}")
    bob.wait_for_selector("#claim-bar.mine")
    assert not ann_errors and not bob_errors, (ann_errors, bob_errors)
    ann.close()
    bob.close()
