"""Datasets, tables and the data-quality dashboard in a real browser (Playwright on Debian's chromium).

The real API app is served on a fresh PostgreSQL database (tests/e2e/ui_seed.py); a project, a run
with critiqued pairs and revision samples (tests/e2e/quality_seed.py), a failed run, and failed
production traces with their revision samples are appended to the event store as the workers
append them. The pages must:

* build a named dataset from a selection of traces (traces page -> builder preview -> exclude one
  sample -> create), show its entries and preview a sample, and download it (openai JSONL holding
  exactly the kept samples; every format button present); exclude one sample of a run the same way
  (``exclude_sample_ids``), and build the next version from the dataset's "exclude samples" link with
  that sample still unchecked;
* sort every table by a column (both directions) and filter it by text and status, the runs list
  showing the failed run's bar unlike the completed-looking one;
* show the dashboard's figures and bars equal to the quality API's answer and to the values this
  test works out itself from the seeded pairs, for each iteration.

No literal null / undefined / NaN anywhere. Everything waits on conditions, never on fixed sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, pair_stream, run_stream, trace_stream
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from tests.conftest import pg_database
from tests.e2e.quality_seed import PAIRS, REVISIONS, quality_events
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, login, no_literals, shot
from tests.e2e.ui_seed import SeededProject, append_events, seed, serve_app

TIMEOUT = 60_000  # ms: a loaded 2-core machine is slow, never wrong
TASKS = ("refund-order", "cancel-order", "track-parcel")


@dataclass
class Site:
    base: str
    project: SeededProject
    failed_run: str
    traces: dict[str, tuple[str, str]]  # task key -> (trace id, its revision sample id)
    browser: Browser

    def api(self, path: str, **params: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.project.key}"}
        response = httpx.get(f"{self.base}{path}", params=params, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()


def _trace(project_id: str, task_key: str) -> tuple[str, str, list[NewEvent]]:
    """A failed trace and its revision sample, as the ingest route and the splicer append them."""
    trace_id, sample_id = new_id(), new_id()
    steps = (Step("t", "lookup order", "found"), Step("t", "refund twice", "error"))
    ingested = ev.TraceIngested(
        trace_id,
        project_id,
        task_key,
        Trajectory(f"Goal: {task_key}", "inst", steps, 0.0),
        "failure",
        "openai",
    )
    provenance = {"trace_id": trace_id, "task_key": task_key, "source": "trace", "critic_strategy": "rules"}
    messages = (
        Message("system", "inst"),
        Message("user", f"Goal: {task_key}"),
        Message("assistant", f"Action: {task_key}", 1),
    )
    made = ev.RevisionMaterialized(
        sample_id,
        trace_id,
        None,
        0,
        TrainingSample(sample_id, "revision", messages, 1.0, provenance),
        "r02",
        1,
    )
    return (
        trace_id,
        sample_id,
        [
            NewEvent(trace_stream(trace_id), ingested, Metadata(producer="api", project_id=project_id)),
            NewEvent(pair_stream(trace_id), made, Metadata(producer="splice", project_id=project_id)),
        ],
    )


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with pg_database() as url:
        project = seed(url, "ui-data", scopes=("read", "run", "review"))
        pid = project.project_id
        batches = quality_events(pid, project.run_id)
        failed = new_id()
        meta = Metadata(producer="train", project_id=pid)
        config = {"model": "/m/x", "env": "shop"}
        batches.append([
            NewEvent(run_stream(failed), ev.RunRequested(failed, pid, config), meta),
            NewEvent(run_stream(failed), ev.IterationStarted(failed, 0, "other", 0.5, ()), meta),
            NewEvent(run_stream(failed), ev.RunFailed(failed, "the search worker ran out of memory"), meta),
        ])  # fmt: skip
        traces: dict[str, tuple[str, str]] = {}
        for task in TASKS:
            trace_id, sample_id, events = _trace(pid, task)
            traces[task] = (trace_id, sample_id)
            batches.append(events)
        append_events(url, batches)
        with serve_app(url) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Site(base, project, failed, traces, browser)
            finally:
                browser.close()


def open_page(site: Site, route: str) -> tuple[Page, list[str]]:
    page = site.browser.new_page(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, site.base, site.project.key, route)
    return page, errors


def column(page: Page, table: str, index: int) -> list[str]:
    """The text of column ``index`` (1-based, as :nth-child counts) of ``table``'s shown rows."""
    return page.locator(f"#{table} tbody tr td:nth-child({index})").all_inner_texts()


def test_build_a_dataset_from_a_selection_and_download_it(site: Site, tmp_path: Path) -> None:
    page, errors = open_page(site, "/traces")
    page.wait_for_selector("#traces tbody tr[data-trace-id]")
    assert page.locator("#traces tbody tr[data-trace-id]").count() == len(TASKS)
    keep = [site.traces[t][0] for t in TASKS]
    for trace_id in keep:
        page.check(f'#traces tr[data-trace-id="{trace_id}"] input.select-row')
    page.click("#dataset-from-traces")
    # the builder, prefilled with the selection, previews the three revision samples
    page.wait_for_selector("#candidates tbody tr[data-sample-id]")
    assert page.locator("#candidates tbody tr[data-sample-id]").count() == 3
    assert page.locator("#candidates input.select-row:checked").count() == 3
    no_literals(page, "dataset builder")
    shot(page, tmp_path, "dataset-builder")
    # exclude one sample, name the dataset, create it
    dropped_trace, dropped_sample = site.traces["cancel-order"]
    page.uncheck(f'#candidates tr[data-sample-id="{dropped_sample}"] input.select-row')
    page.fill("#ds-name", "refunds-ui")
    page.click("#create-dataset")
    page.wait_for_selector("#dataset #entries tbody tr[data-sample-id]")
    kept = {site.traces[t][1] for t in TASKS if t != "cancel-order"}
    shown = set(
        page.locator("#entries tbody tr[data-sample-id]").evaluate_all(
            "rs => rs.map(r => r.dataset.sampleId)"
        )
    )
    assert shown == kept
    dataset_id = page.locator("#dataset").get_attribute("data-dataset-id")
    assert dataset_id
    api = site.api(f"/v1/datasets/{dataset_id}")
    assert {e["sample_id"] for e in api["entries"]} == kept and api["name"] == "refunds-ui"
    assert sorted(api["query"]["trace_ids"]) == sorted(keep)  # the selection made on the traces page
    assert api["query"]["exclude_sample_ids"] == [dropped_sample]  # unchecked in the preview
    assert dropped_trace in keep
    # preview a sample's messages
    first = sorted(kept)[0]
    page.click(f'#entries tr[data-sample-id="{first}"] button.preview-sample')
    page.wait_for_selector(f'#sample-preview[data-sample-id="{first}"] li.message')
    assert page.locator("#sample-preview li.message").count() == 3
    shot(page, tmp_path, "dataset")
    # every format the download route serves has a button; openai holds exactly the kept samples
    formats = page.locator("#dataset .downloads button.download").evaluate_all(
        "bs => bs.map(b => b.dataset.format)"
    )
    assert formats == ["openai", "sharegpt", "parquet", "samples", "dpo", "prm", "tokenized", "hf"]
    with page.expect_download() as info:
        page.click('#dataset .downloads button.download[data-format="openai"]')
    download = info.value
    assert download.suggested_filename == "refunds-ui-v1-openai.jsonl"
    lines = [json.loads(line) for line in Path(download.path()).read_text().splitlines()]
    assert len(lines) == 2 and all(line["messages"][-1]["weight"] == 1 for line in lines)
    with page.expect_download() as info:
        page.click('#dataset .downloads button.download[data-format="samples"]')
    ids = {json.loads(line)["sample_id"] for line in Path(info.value.path()).read_text().splitlines()}
    assert ids == kept
    # the list shows it
    page.goto(f"{site.base}/ui/#/datasets")
    page.wait_for_selector(f'#datasets tr[data-dataset-id="{dataset_id}"]')
    no_literals(page, "datasets")
    shot(page, tmp_path, "datasets")
    # a run's samples: the preview lists them; one of them alone is excluded (exclude_sample_ids)
    page.goto(f"{site.base}/ui/#/datasets?sources=runs&run_ids={site.project.run_id}")
    page.wait_for_selector("#candidates tbody tr[data-sample-id]")
    assert page.locator("#candidates tbody tr[data-sample-id]").count() == len(REVISIONS)
    first_row = page.locator("#candidates tbody tr[data-sample-id]").first
    left_out = first_row.get_attribute("data-sample-id")
    first_row.locator("input.select-row").uncheck()
    page.fill("#ds-name", "run-part")
    page.click("#create-dataset")
    page.wait_for_selector("#dataset #entries tbody tr[data-sample-id]")
    (part,) = site.api("/v1/datasets", name="run-part")["items"]
    assert part["samples"] == len(REVISIONS) - 1 and part["query"]["exclude_sample_ids"] == [left_out]
    assert page.locator(f'#entries tr[data-sample-id="{left_out}"]').count() == 0
    # "exclude samples" opens the builder on the same query, the excluded sample unchecked
    page.click("#dataset a[href^='#/datasets?name=run-part']")
    page.wait_for_selector("#candidates tbody tr[data-sample-id]")
    unchecked = page.locator("#candidates tbody tr:has(input.select-row:not(:checked))").evaluate_all(
        "rs => rs.map(r => r.dataset.sampleId)"
    )
    assert unchecked == [left_out]
    page.click("#create-dataset")
    page.wait_for_function(
        "() => document.querySelector('#dataset h2')?.textContent === 'run-part v2'", timeout=TIMEOUT
    )
    versions = site.api("/v1/datasets", name="run-part")["items"]
    assert [(d["version"], d["samples"]) for d in versions] == [
        (2, len(REVISIONS) - 1),
        (1, len(REVISIONS) - 1),
    ]
    assert errors == []


def test_tables_sort_and_filter(site: Site, tmp_path: Path) -> None:
    page, errors = open_page(site, "/traces")
    page.wait_for_selector("#traces tbody tr[data-trace-id]")
    page.click('#traces th[data-key="task"] button.sort')
    assert column(page, "traces", 3) == sorted(TASKS)  # column 1 holds the checkboxes
    assert page.locator('#traces th[data-key="task"]').get_attribute("aria-sort") == "ascending"
    page.click('#traces th[data-key="task"] button.sort')
    assert column(page, "traces", 3) == sorted(TASKS, reverse=True)
    page.fill('.data-table[data-table="traces"] input.table-filter', "order")
    page.wait_for_function("document.querySelectorAll('#traces tbody tr[data-trace-id]').length === 2")
    assert column(page, "traces", 3) == ["refund-order", "cancel-order"]
    page.fill('.data-table[data-table="traces"] input.table-filter', "no such text")
    page.wait_for_selector("#traces td.no-match")
    page.click('.data-table[data-table="traces"] button.table-clear')  # back to every row, newest first
    page.wait_for_function("document.querySelectorAll('#traces tbody tr[data-trace-id]').length === 3")
    assert page.locator('#traces th[data-key="task"]').get_attribute("aria-sort") == "none"
    assert page.locator('#traces th[data-key="created_at"]').get_attribute("aria-sort") == "descending"

    # runs list: sort by status, filter to the failed run; its bar is not a completed one's
    page.goto(f"{site.base}/ui/#/runs")
    page.wait_for_selector(f'#runs tr[data-run-id="{site.failed_run}"]')
    page.click('#runs th[data-key="status"] button.sort')
    assert column(page, "runs", 2) == ["failed", "running"]
    page.click('#runs th[data-key="status"] button.sort')
    assert column(page, "runs", 2) == ["running", "failed"]
    page.select_option('.data-table[data-table="runs"] select.table-status', "failed")
    page.wait_for_function("document.querySelectorAll('#runs tbody tr[data-run-id]').length === 1")
    row = page.locator(f'#runs tr[data-run-id="{site.failed_run}"]')
    assert row.locator(".progress").get_attribute("class") == "progress failed"
    assert row.locator("td.status").get_attribute("title") == "the search worker ran out of memory"
    assert row.locator("td.env").inner_text() == "shop" and row.locator("td.model").inner_text() == "x"
    no_literals(page, "runs")
    shot(page, tmp_path, "runs-filtered")

    # a run's pairs: sorted by t', filtered by status (one pair was found, never judged)
    page.goto(f"{site.base}/ui/#/runs/{site.project.run_id}")
    page.wait_for_selector("#pairs tbody tr[data-pair-id]")
    pairs = site.api(f"/v1/runs/{site.project.run_id}/pairs")["items"]
    page.click('#pairs th[data-key="t"] button.sort')
    judged = sorted(p["transition_index"] for p in pairs if p["transition_index"] is not None)
    shown = column(page, "pairs", 7)
    assert shown[: len(judged)] == [str(t) for t in judged] and shown[len(judged) :] == ["–"] * (
        len(pairs) - len(judged)
    )
    page.select_option('.data-table[data-table="pairs"] select.table-status', "found")
    page.wait_for_function("document.querySelectorAll('#pairs tbody tr[data-pair-id]').length === 1")
    assert (
        page.locator('.data-table[data-table="pairs"] .table-count').inner_text()
        == f"1 of {len(pairs)} row(s)"
    )
    page.click('#samples th[data-key="length"] button.sort')
    assert column(page, "samples", 6) == [str(n) for n, _ in sorted(REVISIONS)]
    no_literals(page, "run")
    assert errors == []


def expected_quality(iteration_pairs: list[Any]) -> dict[str, Any]:
    """What the dashboard must show, worked out from the seed table (not from the API)."""
    oracle = [p for p in iteration_pairs if p.oracle is not None]
    agree = sum(1 for p in oracle if p.critic == p.oracle)
    critic_k = [p.critic - p.shared + 1 for p in iteration_pairs]
    oracle_k = [p.oracle - p.shared + 1 for p in oracle]
    present = set(critic_k) | set(oracle_k)
    keys = range(min(present), max(present) + 1)  # empty bins between are kept
    actions = [p.bad_actions - p.shared for p in iteration_pairs]
    return {
        "agree": agree,
        "oracle": len(oracle),
        "fallback": sum(1 for p in iteration_pairs if p.fallback),
        "t_prime": {str(k): (critic_k.count(k), oracle_k.count(k)) for k in keys},
        "actions": {str(n): actions.count(n) for n in range(min(actions), max(actions) + 1)},
    }


def bars(page: Page, chart: str) -> dict[tuple[str, str], int]:
    found = page.locator(f"#{chart} rect.bar").evaluate_all(
        "rs => rs.map(r => [r.dataset.label, r.dataset.series, Number(r.dataset.value)])"
    )
    return {(label, series): value for label, series, value in found}


def test_the_quality_dashboard_equals_the_api_and_the_seed(site: Site, tmp_path: Path) -> None:
    run_id = site.project.run_id
    page, errors = open_page(site, f"/runs/{run_id}")
    page.wait_for_selector("#quality-iteration")
    page.select_option("#quality-iteration", "0")
    page.wait_for_selector('#quality[data-loaded="0"] #quality-figures')
    want = expected_quality(list(PAIRS))
    api = site.api(f"/v1/runs/{run_id}/iterations/0/quality")
    figure = lambda key: page.locator(f'#quality dd[data-quality="{key}"]').inner_text()  # noqa: E731
    share = round(100 * want["agree"] / want["oracle"])
    assert figure("agreement") == f"{share}% ({want['agree']}/{want['oracle']})"
    assert (api["agree"], api["oracle_pairs"]) == (want["agree"], want["oracle"])
    assert (
        figure("fallback")
        == f"{round(100 * want['fallback'] / len(PAIRS))}% ({want['fallback']}/{len(PAIRS)})"
    )
    lengths = [n for n, _ in REVISIONS]
    assert (
        figure("revision-length")
        == f"{sum(lengths) / len(lengths):.2f}"
        == f"{api['revision_length_mean']:.2f}"
    )
    checked = [v for _, v in REVISIONS if v is not None]
    assert (
        figure("verified") == f"{round(100 * sum(checked) / len(checked))}% ({sum(checked)}/{len(checked)})"
    )
    t_prime = bars(page, "chart-t-prime")
    for k, (critic, oracle) in want["t_prime"].items():
        assert (t_prime[(k, "critic")], t_prime[(k, "oracle")]) == (critic, oracle)
    assert {b["label"]: (b["critic"], b["oracle"]) for b in api["t_prime"]} == want["t_prime"]
    assert {k: v for (k, _), v in bars(page, "chart-actions").items()} == want["actions"]
    assert {k: v for (k, _), v in bars(page, "chart-margins").items()} == {
        b["label"]: b["count"] for b in api["margins"]
    }
    assert {k: v for (k, _), v in bars(page, "chart-revision-lengths").items()} == {
        str(n): lengths.count(n) for n in range(min(lengths), max(lengths) + 1)
    }
    assert bars(page, "chart-agreement")[("critic", "share")] == pytest.approx(want["agree"] / want["oracle"])
    no_literals(page, "quality 0")
    shot(page, tmp_path, "quality", "#quality")

    # iteration 1: one judged pair (t' 4, oracle 0, after no shared step), no revisions
    page.select_option("#quality-iteration", "1")
    page.wait_for_selector('#quality[data-loaded="1"] #quality-figures')
    assert figure("agreement") == "0% (0/1)"
    assert bars(page, "chart-t-prime") == {  # 1 and 5, the empty 2, 3 and 4 drawn between them
        ("1", "critic"): 0,
        ("1", "oracle"): 1,
        **{(str(k), series): 0 for k in (2, 3, 4) for series in ("critic", "oracle")},
        ("5", "critic"): 1,
        ("5", "oracle"): 0,
    }
    assert figure("revisions") == "0" and figure("verified") == "–"
    assert page.locator("#chart-revision-lengths rect.bar").count() == 0
    no_literals(page, "quality 1")
    assert errors == []
