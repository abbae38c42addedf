"""The web UI in a real browser (Playwright driving Debian's chromium) over a real deployment.

The e2e package's deployment (``tests/e2e/services.py``, the one test_services_e2e.py uses:
``agentr serve``, the relay, search, critic, splice and train workers and the Celery trainer as OS processes
on the real PostgreSQL and Redis); a data-only TextCraft run with the warm-started tiny model is
submitted over HTTP in a project of this test's own and followed to completion. Then the browser
opens ``/ui`` with a project key and checks each page against the API: the run and its iterations,
the tree canvas (one SVG node per API node, the pair's divergence ring), the pair diff (first
differing step = the pair's shared steps, the bad action there), the sample inspector (the token
mask equals the labels ``train_service.tokenize.tokenize_sample`` gives with the same model), a
correction through the form (the sample is re-spliced: new content, provenance human-corrected), the
traces page with filters, and that a key of another project (and no key at all) sees nothing. On
every page the visible text is scanned for a literal "null", "undefined" or "NaN"; the event stream
of a page opened after another resumes after the position already seen (not from event 0); the runs
table shows model, environment and tasks and cancels a running run; a data-only run shows its data
figures; a run's good sample links to its tree leaf; a trace's sample renders its tokens with the
project's default model (its newest run's); a correction keeps its "Re-spliced" confirmation and
shows the sample before and after it side by side; each message of the sample page shows the
reason the splice recorded for its weight; the review page renders. Every
page is screenshotted into the test's tmp folder (``screens/``); with ``AGENTR_UI_SCREENSHOTS=DIR``
they are copied there as ``ui-NAME.png`` (so are the other browser tests' screenshots: ``shot``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import Page, sync_playwright

from tests.e2e.helpers import quick_tiny_model
from tests.e2e.services import Deployment, follow
from tests.e2e.ui_seed import CHROMIUM, CHROMIUM_ARGS, require_chromium, watched_page

require_chromium()


def login(page: Page, base: str, api_key: str, route: str) -> None:
    page.goto(f"{base}/ui/")
    page.fill("#key-input", api_key)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#signout:not([hidden])")
    page.goto(f"{base}/ui/#{route}")


LITERALS_JS = r"""() => document.body.innerText.match(/(?<![\w.])(null|undefined|NaN)(?![\w.])/g) || []"""


def no_literals(page: Page, where: str) -> None:
    """The page's visible text holds no literal null / undefined / NaN (a value rendered raw)."""
    found = page.evaluate(LITERALS_JS)
    assert not found, f"{where}: {found} in {page.evaluate('document.body.innerText')[:2000]!r}"


def events_after(url: str) -> int:
    """The ``after`` position a GET /v1/events request resumes from."""
    return int(parse_qs(urlparse(url).query)["after"][0])


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def shot(page: Page, folder: Path, name: str, selector: str | None = None) -> None:
    """Screenshot the page (or only ``selector``) into ``folder/NAME.png``; with
    ``AGENTR_UI_SCREENSHOTS=DIR`` also into ``DIR/ui-NAME.png`` (how docs/ui-*.png are refreshed)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    if selector is None:
        page.screenshot(path=str(path), full_page=True)
    else:
        page.locator(selector).screenshot(path=str(path))
    copy_to = os.environ.get("AGENTR_UI_SCREENSHOTS")
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(copy_to) / f"ui-{name}.png")


def test_ui_pages_over_a_real_run(
    deployment: Deployment, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    group, client, pg_url = deployment.group, deployment.client, deployment.database_url
    http = client.http
    model_ref, config = quick_tiny_model(tmp_path_factory.getbasetemp() / "agentr-quick-home")
    project_a, project_b = client.create_project("ui-a"), client.create_project("ui-b")
    key_a = client.issue_key(project_a, ("read", "run", "ingest", "review"), label="reviewer")
    key_b = client.issue_key(project_b, ("read", "run", "review"), label="ui")
    client.key = key_a
    screens = tmp_path / "screens"
    base = client.http.base_url.__str__().rstrip("/")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, errors = watched_page(browser)
            streams: list[str] = []  # GET /v1/events URLs, in order
            page.on("request", lambda r: streams.append(r.url) if "/v1/events?" in r.url else None)

            # no key: the key form, nothing else
            page.goto(f"{base}/ui/#/runs")
            page.wait_for_selector("#key-form")
            assert page.locator("#runs").count() == 0

            # runs list, opened BEFORE the run is submitted (so the premise cannot race a fast run):
            # the run's row appears and then turns "completed" live (SSE), without a reload (a
            # reload would drop the marker set on the window)
            login(page, base, key_a, "/runs")
            page.wait_for_selector("#runs-body td.muted")  # "No runs yet.": the first load is done
            page.evaluate("window.__sameDocument = true")
            run_id = client.submit_run(dict(config, iterations=1, data_only=True, seed=11))
            row = f'#runs tr[data-run-id="{run_id}"]'
            page.wait_for_selector(row, timeout=120_000)
            page.wait_for_selector(
                f"{row}:is([data-status=completed], [data-status=failed])", timeout=600_000
            )
            follow(client, group, run_id, timeout=60)  # names the reason and the logs if it failed
            assert page.evaluate("window.__sameDocument === true")
            assert page.locator("#live").inner_text().startswith("live")
            h = client.headers
            pairs = http.get(f"/v1/runs/{run_id}/pairs", headers=h).json()["items"]
            revised = [p for p in pairs if p["status"] == "revised" and p["tree_id"]]
            assert revised, f"the run made no revision samples: {pairs}"
            pair = http.get(f"/v1/pairs/{revised[0]['pair_id']}", headers=h).json()
            tree = http.get(f"/v1/trees/{pair['tree_id']}", headers=h).json()

            assert (
                page.locator(f'#runs tr[data-run-id="{run_id}"]').get_attribute("data-status") == "completed"
            )
            row_el = page.locator(row)
            assert row_el.locator("td.model").inner_text() == config["model"].rstrip("/").split("/")[-1]
            assert row_el.locator("td.env").inner_text() == config["env"]
            assert row_el.locator("td.tasks").inner_text().strip()
            assert "failed" not in (row_el.locator(".progress").get_attribute("class") or "")
            assert row_el.locator("button.cancel-run").count() == 0  # a finished run has no cancel
            no_literals(page, "runs")
            shot(page, screens, "runs")
            # a failed run's bar differs from a completed one's (class and drawn colour)
            bars = page.evaluate(
                """async () => {
                  const { progressBar } = await import('/ui/static/pages/runs.js');
                  const out = {};
                  for (const status of ['completed', 'failed']) {
                    const bar = progressBar(2, 4, status);
                    document.body.append(bar);
                    const inner = getComputedStyle(bar.querySelector('.bar'));
                    out[status] = [bar.className, inner.backgroundColor + inner.backgroundImage];
                    bar.remove();
                  }
                  return out;
                }"""
            )
            assert bars["failed"][0] == "progress failed" and bars["completed"][0] == "progress completed"
            assert bars["failed"][1] != bars["completed"][1], bars

            # a running run is cancelled from its row
            second = client.submit_run(dict(config, iterations=1, data_only=True, seed=12))
            page.once("dialog", lambda dialog: dialog.accept())
            page.click(f'#runs tr[data-run-id="{second}"] button.cancel-run', timeout=60_000)
            page.wait_for_selector(f'#runs tr[data-run-id="{second}"][data-status=cancelled]', timeout=60_000)
            assert client.run(second)["status"] == "cancelled"

            page.goto(f"{base}/ui/#/runs/{run_id}")
            page.wait_for_selector("#iterations tbody tr")
            assert page.locator("#run-status").inner_text() == "completed"
            assert (
                page.locator("#iterations button.download").count() == 8
            )  # openai, sharegpt, parquet, dpo, prm, prm-values, tokenized, hf
            assert page.locator("#pairs tbody tr").count() == len(pairs)
            # each page follows from the project's newest event when it loaded, never from event 0
            assert len(streams) >= 2 and all(events_after(u) > 0 for u in streams), streams
            assert events_after(streams[-1]) > events_after(streams[0]), streams
            # a data-only run: its data figures, not an empty metrics plot
            assert page.locator("#metrics-plot").count() == 0
            figure = lambda key: page.locator(f'#data-figures dd[data-figure="{key}"]').inner_text()  # noqa: E731
            assert figure("pairs") == str(len(pairs))
            run_samples = http.get(f"/v1/runs/{run_id}/samples", headers=h, params={"limit": 200}).json()[
                "items"
            ]
            checked = [x for x in run_samples if x["verified"] is not None]
            verified = sum(1 for x in checked if x["verified"])
            assert figure("verified").endswith(f"({verified}/{len(checked)})" if checked else "–")
            judged = [http.get(f"/v1/pairs/{p['pair_id']}", headers=h).json() for p in pairs if p["strategy"]]
            oracled = [d for d in judged if d["critic"] and d["critic"]["oracle_index"] is not None]
            agree = sum(1 for d in oracled if d["critic"]["transition_index"] == d["critic"]["oracle_index"])
            assert figure("critic-oracle").endswith(
                f"({agree}/{len(oracled)})" if oracled else "no oracle verdicts"
            )
            no_literals(page, "run")
            shot(page, screens, "run")

            # tree canvas: one SVG node per API node, the pair's paths and divergence drawn
            page.goto(f"{base}/ui/#/trees/{tree['tree_id']}?pair={pair['pair_id']}")
            page.wait_for_selector("#tree-canvas circle.node")
            assert page.locator("#tree-canvas circle.node").count() == len(tree["nodes"]) > 1
            assert page.locator("#tree-canvas .pair-path.bad").count() >= 1
            assert page.locator("#tree-canvas .pair-path.good").count() >= 1
            if pair["divergence_node_id"]:
                ring = page.locator("#tree-canvas circle.divergence")
                assert ring.get_attribute("data-node-id") == pair["divergence_node_id"]
            leaf = page.locator(f'#tree-canvas circle.node[data-node-id="{pair["bad_leaf_id"]}"]')
            leaf.click()
            page.wait_for_selector("#node-stats")
            assert page.locator(".history li").count() == len(pair["bad"]["steps"]) + 1  # root + each step
            no_literals(page, "tree")
            shot(page, screens, "tree")
            page.click("#zoom-fit")
            box = page.locator("#tree-canvas").get_attribute("viewBox")
            page.click("#zoom-in")
            assert page.locator("#tree-canvas").get_attribute("viewBox") != box
            page.click("#zoom-fit")
            assert page.locator("#tree-canvas").get_attribute("viewBox") == box

            # a tree of a few hundred nodes (appended to the store as the search worker would)
            # (in a thread of its own: Playwright's sync API holds this thread's event loop)
            with ThreadPoolExecutor(1) as pool:
                big_id, big_nodes, deepest = pool.submit(
                    asyncio.run, synthetic_tree(pg_url, project_a, run_id)
                ).result()
            page.goto(f"{base}/ui/#/trees/{big_id}?node={deepest}")
            page.wait_for_selector(f'#tree-canvas circle.node.selected[data-node-id="{deepest}"]')
            assert page.locator("#tree-canvas circle.node").count() == big_nodes == 364
            assert page.locator(".history li").count() == 6  # root + 5 steps
            page.click("#zoom-out")
            shot(page, screens, "tree-364-nodes")

            # pair diff: aligned from the divergence, first difference = shared steps
            page.goto(f"{base}/ui/#/pairs/{pair['pair_id']}")
            page.wait_for_selector("#pair-diff tbody tr")
            shared = pair["shared_steps"]
            assert page.locator("#divergence").get_attribute("data-step") == str(shared)
            first = page.locator("#pair-diff tr.first-diff")
            assert first.get_attribute("data-step") == str(shared)
            assert (
                first.locator("td.bad .action").inner_text()
                == f"Action: {pair['bad']['steps'][shared]['action']}"
            )
            assert (
                first.locator("td.good .action").inner_text()
                == f"Action: {pair['good']['steps'][shared]['action']}"
            )
            t_prime = pair["transition_index"]
            assert page.locator("#transition").get_attribute("data-step") == str(t_prime)
            assert page.locator(f'#pair-diff tr.transition[data-step="{t_prime}"]').count() == 1
            verdicts = pair["critic"]["verdicts"]
            assert page.locator("#pair-diff td.verdict[data-label]").count() == len(
                [v for v in verdicts if v["step_index"] >= shared]
            )
            no_literals(page, "pair")
            shot(page, screens, "pair")

            # sample inspector: the token mask is the trainer's
            sample_id = pair["sample_id"]
            before = http.get(f"/v1/samples/{sample_id}", headers=h).json()["sample"]
            page.goto(f"{base}/ui/#/samples/{sample_id}")
            page.wait_for_selector("#tokens .tok")
            shown = page.eval_on_selector_all(
                "#tokens .tok", "els => els.map(e => e.dataset.trained === '1')"
            )
            assert shown == trainer_mask(model_ref, before)
            assert any(shown) and not all(shown)
            weights = page.eval_on_selector_all(
                "#messages li", "els => els.map(e => Number(e.dataset.weight))"
            )
            assert weights == [m["weight"] for m in before["messages"]]
            # beside each weight, the reason the splice worker recorded for it
            reasons = page.eval_on_selector_all("#messages li", "els => els.map(e => e.dataset.why)")
            assert reasons == [m["why"] for m in before["messages"]]
            trained_reasons = {"reflection", "continuation"}
            assert all(reasons) and {"shared_prefix", "bad_step"} & set(reasons), reasons
            assert all((w == 1) == (r in trained_reasons) for w, r in zip(weights, reasons, strict=True))
            no_literals(page, "sample")
            shot(page, screens, "sample")

            # a run sample whose path ends at a tree leaf links to it (a good sample when there is one)
            with_path = sorted(
                (x for x in run_samples if x["tree_id"] and x["sample"]["provenance"].get("node_ids")),
                key=lambda x: x["kind"] != "good",
            )
            assert with_path, "no run sample names its tree path"
            leaf_id = with_path[0]["sample"]["provenance"]["node_ids"][-1]
            page.goto(f"{base}/ui/#/samples/{with_path[0]['sample_id']}")
            page.click("#leaf-link")
            page.wait_for_selector(f'#tree-canvas circle.node.selected[data-node-id="{leaf_id}"]')

            # correction through the form: the sample is re-spliced, provenance human-corrected
            page.goto(f"{base}/ui/#/pairs/{pair['pair_id']}")
            page.wait_for_selector("#correct-form")
            reflection = "I picked the wrong item here; I should follow the recipe instead."
            page.fill("#correct-reflection", reflection)
            page.fill("#correct-note", "browser test")
            page.click("#correct-submit")
            page.wait_for_selector("#corrections td", timeout=120_000)
            page.wait_for_function(
                "() => document.querySelector('#corrections') && "
                "/respliced|rejected/.test(document.querySelector('#corrections').innerText)",
                timeout=120_000,
            )
            shot(page, screens, "pair-corrected")
            detail = http.get(f"/v1/pairs/{pair['pair_id']}", headers=h).json()
            (correction,) = detail["corrections"]
            assert correction["status"] == "respliced", correction
            assert (
                correction["reviewer"].endswith("(reviewer)") and correction["new_reflection"] == reflection
            )
            after = http.get(f"/v1/samples/{sample_id}", headers=h).json()["sample"]
            assert after["provenance"]["origin"] == "human-corrected"
            assert after["messages"] != before["messages"]
            assert any(reflection in m["content"] and m["weight"] == 1 for m in after["messages"])
            # the confirmation stays, and the sample before and after the correction side by side
            assert page.locator("#correct-result-status").inner_text() == (
                f"Re-spliced at t'={correction['new_transition_index']}."
            )
            texts = "els => els.map(e => e.textContent)"
            shown_before = page.eval_on_selector_all("#sample-before-messages li pre", texts)
            shown_after = page.eval_on_selector_all("#sample-after-messages li pre", texts)
            assert shown_before == [m["content"] for m in before["messages"]]
            assert shown_after == [m["content"] for m in after["messages"]]
            changed = page.eval_on_selector_all("#sample-after-messages li.changed pre", texts)
            assert any(reflection in text for text in changed), changed
            no_literals(page, "pair (corrected)")
            page.goto(f"{base}/ui/#/samples/{sample_id}")
            page.wait_for_selector("#origin")
            assert page.locator("#origin").inner_text() == "human-corrected"
            # the iteration's dataset picks the corrected sample up
            _, text = client.dataset(run_id, 0, "openai")
            assert reflection in text

            # traces with filters
            ingest_traces(http, h)
            page.goto(f"{base}/ui/#/traces?task_key=ui-door")
            page.wait_for_selector("#traces tbody tr")
            assert page.locator("#traces tbody tr").count() == 2
            page.goto(f"{base}/ui/#/traces?task_key=ui-door&outcome=failure")
            page.wait_for_function("() => document.querySelectorAll('#traces tbody tr').length === 1")
            no_literals(page, "traces")
            shot(page, screens, "traces")
            page.click("#traces tbody tr a")
            page.wait_for_selector("#trace-steps tbody tr")
            assert page.locator("#trace-steps thead th").all_inner_texts()[1] != "step"
            # the task's user message is shown before the steps
            assert "Open the door." in page.locator("#trace-context").inner_text()
            no_literals(page, "trace (failed)")
            shot(page, screens, "trace")
            listed = http.get("/v1/traces", headers=h, params={"task_key": "ui-door"}).json()["items"]
            failed_id = next(x["trace_id"] for x in listed if x["outcome"] == "failure")
            success_id = next(x["trace_id"] for x in listed if x["outcome"] == "success")
            page.goto(f"{base}/ui/#/traces/{success_id}")
            page.wait_for_selector("#trace-steps tbody tr")
            no_literals(page, "trace (success)")
            # the failed trace's pair: no "step -1" / "node -" when the paths share nothing
            trace_field = lambda trace_id, field: wait_for(  # noqa: E731
                lambda: http.get(f"/v1/traces/{trace_id}", headers=h).json().get(field),
                120,
                f"{field} of trace {trace_id}",
            )
            trace_pair = trace_field(failed_id, "pair_id")
            page.goto(f"{base}/ui/#/pairs/{trace_pair}")
            page.wait_for_selector("#pair-diff tbody tr")
            assert "-1" not in page.locator("#divergence").inner_text()
            no_literals(page, "trace pair")
            # a trace's sample (no run): tokens with the project's default model, its newest run's
            trace_sample = trace_field(success_id, "sample_id")
            page.goto(f"{base}/ui/#/samples/{trace_sample}")
            page.wait_for_selector("#tokens .tok, #tokens-error", timeout=60_000)
            assert page.locator("#tokens-error").count() == 0, page.locator("#tokens-error").inner_text()
            shown = page.eval_on_selector_all(
                "#tokens .tok", "els => els.map(e => e.dataset.trained === '1')"
            )
            trace_sample_body = http.get(f"/v1/samples/{trace_sample}", headers=h).json()["sample"]
            assert shown == trainer_mask(model_ref, trace_sample_body)
            no_literals(page, "trace sample")
            page.goto(f"{base}/ui/#/datasets")
            page.wait_for_selector("#datasets")
            no_literals(page, "datasets")
            page.goto(f"{base}/ui/#/review")
            page.wait_for_selector("#review-queue, #review-empty")
            no_literals(page, "review")
            shot(page, screens, "review")
            assert not errors, errors

            # another project's key sees nothing of project A
            other = browser.new_page()
            login(other, base, key_b, f"/runs/{run_id}")
            other.wait_for_selector("#page-error")
            assert "404" in other.locator("#page-error").inner_text()
            other.goto(f"{base}/ui/#/trees/{tree['tree_id']}")
            other.wait_for_function(
                "() => /404/.test(document.querySelector('#page-error')?.innerText || '')"
            )
            other.goto(f"{base}/ui/#/runs")
            other.wait_for_selector("#runs tbody tr")
            assert run_id not in other.content()
            shot(other, screens, "other-project")
        finally:
            browser.close()


async def synthetic_tree(pg_url: str, project_id: str, run_id: str) -> tuple[str, int, str]:
    """A completed 364-node tree (branching 3, depth 5) in ``run_id``'s iteration 0, appended to the
    store with TreeStarted / NodesExpanded / RolloutFinished as the search worker writes them."""
    from core.domain import events as ev
    from core.domain.events import Metadata, NewEvent
    from core.domain.ids import new_id, tree_stream
    from core.store.factory import open_store

    tree_id, root = new_id(), new_id()
    records = [ev.NodeRecord(root, None, 0, "", "", "Goal: craft many things.")]
    frontier = [root]
    for depth in range(1, 6):
        nxt = []
        for parent in frontier:
            for k in range(3):
                node = new_id()
                last = depth == 5
                records.append(
                    ev.NodeRecord(
                        node, parent, depth, f"get {k + 1} item{depth}", "t", "ok", float(k == 0), last
                    )
                )
                nxt.append(node)
        frontier = nxt
    m = Metadata(producer="search", project_id=project_id)
    stream = tree_stream(tree_id)
    started = ev.TreeStarted(tree_id, run_id, 0, "textcraft", "big", "inst", "task", "tiny", {}, root)
    events = [NewEvent(stream, started, m), NewEvent(stream, ev.NodesExpanded(tree_id, tuple(records)), m)]
    for rollout, leaf in enumerate(frontier[:40]):
        events.append(
            NewEvent(
                stream,
                ev.RolloutFinished(tree_id, rollout, leaf, 1.0 if rollout % 3 == 0 else 0.0, "done"),
                m,
            )
        )
    store = await open_store(pg_url)
    try:
        await store.append(events)
    finally:
        await store.close()
    return tree_id, len(records), frontier[0]


def trainer_mask(model_ref: str, sample: dict[str, Any]) -> list[bool]:
    """Which tokens the trainer trains on for ``sample`` with the model's own tokenizer."""
    from transformers import AutoTokenizer

    from core.domain.serde import from_dict
    from core.domain.trajectory import TrainingSample
    from train_service.sft import SFTConfig
    from train_service.tokenize import IGNORE_INDEX, tokenize_sample

    tokenizer = AutoTokenizer.from_pretrained(model_ref)
    tokenized = tokenize_sample(tokenizer, from_dict(TrainingSample, sample), SFTConfig().max_length)
    return [label != IGNORE_INDEX for label in tokenized.labels]


def ingest_traces(http: httpx.Client, headers: dict[str, str]) -> None:
    def trace(actions: list[str], outcome: str) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Open the door."}]
        for action in actions:
            messages.append({"role": "assistant", "content": f"Thought: next.\nAction: {action}"})
            messages.append({"role": "user", "content": f"You {action}."})
        return {"messages": messages, "outcome": outcome, "task_key": "ui-door"}

    body = {
        "format": "openai",
        "traces": [trace(["look", "kick door"], "failure"), trace(["look", "open door"], "success")],
    }
    response = http.post("/v1/traces", json=body, headers=headers)
    assert response.status_code == 202, response.text
