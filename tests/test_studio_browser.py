"""The studio page in a real browser: headless Chromium (Debian's ``chromium`` package) driven by Playwright.

Runs on scripted models: the plan is drawn, its nodes turn done, a plan is approved and edited (problems shown
in place), a reload resumes the thread, a hanging node shows its time-out, run folders and samples open.
On failure a screenshot is saved under ``$STUDIO_ARTIFACTS`` (default ``test-artifacts/studio``). With
``STUDIO_SCREENSHOTS=DIR`` the views are also saved there (the pictures in README.md and docs/guides/studio.md come from such a run).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.is_file():
    pytest.skip("no /usr/bin/chromium: install Debian's package (apt-get install -y chromium); .ci/run does",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright from PyPI (the dev extra)")
pytest.importorskip("starlette", reason="needs the studio extra: pip install 'mas-orchestra[studio]'")

from mas_orchestra.studio.app import create_app  # noqa: E402
from tests.studio_fixtures import make_eval_folder, make_training_folder  # noqa: E402
from tests.studio_server import DEMO, serve  # noqa: E402

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("STUDIO_ARTIFACTS", REPO / "test-artifacts" / "studio"))
SHOTS = os.environ.get("STUDIO_SCREENSHOTS")
CHAIN = "python:tests.studio_models:chain_orchestrator"
ONE_NODE = json.dumps({"nodes": [{"id": "ONLY", "agent": "cot", "description": "Edited", "input": "Answer it."}]})


@pytest.fixture(scope="module")
def studio_server(tmp_path_factory):
    """The served studio: its base URL and the URL with the token that ``mas-orchestra studio`` prints."""
    root = tmp_path_factory.mktemp("studio")
    runs = root / "runs"
    # Playwright's sync API keeps an event loop running in this thread: the eval runs in its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make_eval_folder(runs / "eval-masbench")).result()
    make_training_folder(runs / "grpo-run", rollouts=120, steps=12)
    app = create_app([runs], root / "studio.sqlite", allow_python_models=True)
    with serve(app) as base:
        yield base, f"{base}/?token={app.state.token}"


@pytest.fixture(scope="module")
def studio(studio_server):
    return studio_server[0]


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, request, studio_server):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    # The page's Content-Security-Policy must not block anything of its own (Chromium logs each refusal).
    opened.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    opened.set_default_timeout(30_000)
    base, token_url = studio_server
    opened.goto(token_url)  # as the owner does: the printed URL sets the cookie and drops the token
    assert opened.url == f"{base}/" and "token" not in opened.url
    yield opened
    if errors:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        opened.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


@contextlib.contextmanager
def shot_on_failure(page, name):
    """Screenshot the page into the artifacts folder when the block fails."""
    try:
        yield
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        raise


def view_shot(page, name):
    """Save a view for the docs (palette PNG: a few hundred colours suffice and keep each under 200 KB)."""
    if not SHOTS:
        return
    from PIL import Image

    target = Path(SHOTS) / f"{name}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target))
    Image.open(target).convert("RGB").quantize(colors=128).save(target, optimize=True)


def open_live(page, base):
    page.goto(f"{base}/#live")
    page.wait_for_selector("body[data-ready='1']")


def fill_run(page, question="What is 2 + 3?", orchestrator=DEMO, subagent="scripted:5", expected="5", **extra):
    page.fill("#question", question)
    page.fill("#expected", expected)
    page.fill("#orchestrator", orchestrator)
    page.fill("#subagent", subagent)
    for field, value in extra.items():
        if field == "approval":
            page.set_checked("#approval", value)
        else:
            page.fill(f"#{field}", str(value))


def wait_js(page, expression, timeout=30.0):
    """Wait until ``expression`` is true in the page. Polled from here with ``evaluate``: Playwright's own
    ``wait_for_function`` polls with ``eval`` inside the page, which the studio's Content-Security-Policy forbids."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.05)


def node_status(page, node_id):
    return page.get_attribute(f"#graph g.node[data-node='{node_id}']", "data-status")


def test_a_live_run_draws_the_plan_and_its_nodes_turn_done(page, studio):
    with shot_on_failure(page, "live_run"):
        open_live(page, studio)
        fill_run(page)
        page.click("#run-button")
        page.wait_for_selector("#graph svg.plan")
        wait_js(page, "document.querySelectorAll('#graph g.node[data-status=done]').length === 4")
        timings = page.evaluate("window.studioTimings")
        assert timings["firstGraph"] > timings["submitted"]
        print(f"first graph drawn {timings['firstGraph'] - timings['submitted']:.0f} ms after Run")
        labels = page.locator("#graph text.edge-label").all_text_contents()
        assert sorted(labels) == ["${SOLVE_A}", "${SOLVE_B}", "${VOTE}"]
        page.wait_for_selector("#outcome-status")
        assert page.inner_text("#outcome-status") == "ok" and page.inner_text("#match") == "match"
        assert page.get_attribute("#run-state", "data-state") == "finished"
        assert "demo-orchestrator" in page.inner_text("#result table.usage >> nth=1")
        page.click("#graph g.node[data-node='JUDGE']")
        detail = page.inner_text("#node-detail")
        assert "Compare ${SOLVE_A}" in detail and "Answer\n5" in detail.replace("\r", "") and "call 1:" in detail
        page.click("#node-detail details.call summary")
        assert "<answer>5</answer>" in page.inner_text("#node-detail details.call")
        view_shot(page, "live")


def test_a_sample_fills_the_question_and_a_wrong_answer_is_a_mismatch(page, studio):
    with shot_on_failure(page, "sample"):
        open_live(page, studio)
        page.select_option("#sample", index=1)
        assert "MASBench" in page.inner_text("#sample option:checked")
        question = page.input_value("#question")
        assert len(question) > 40 and page.input_value("#expected") != ""
        page.fill("#orchestrator", DEMO)
        page.fill("#subagent", "scripted:999")
        page.click("#run-button")
        page.wait_for_selector("#match")
        assert page.inner_text("#match") == "mismatch"


def test_a_bad_model_string_is_shown_next_to_the_form(page, studio):
    with shot_on_failure(page, "bad_model"):
        open_live(page, studio)
        fill_run(page, orchestrator="no-such-model")
        page.click("#run-button")
        wait_js(page, "document.getElementById('form-error').textContent.length > 0")
        assert "--allow-model 'no-such-model'" in page.inner_text("#form-error")


def test_approve_edit_with_problems_in_place_run_the_edited_plan_and_reload(page, studio):
    with shot_on_failure(page, "approval"):
        open_live(page, studio)
        fill_run(page, approval=True)
        page.click("#run-button")
        page.wait_for_selector("#approval-box:not([hidden])")
        assert "SOLVE_A" in page.input_value("#spec-editor")
        assert {node_status(page, n) for n in ("SOLVE_A", "JUDGE")} == {"pending"}  # drawn, not run
        view_shot(page, "approval")
        bad = {"nodes": [{"id": "A", "agent": "oracle", "input": "x"}, {"id": "B", "agent": "cot", "input": "${C}"}],
               "edges": [{"source": "A", "target": "B"}]}
        page.fill("#spec-editor", json.dumps(bad, indent=2))
        page.click("#run-edited")
        page.wait_for_selector("#spec-problems li.error")
        problems = page.locator("#spec-problems li").all_inner_texts()
        assert len(problems) >= 2 and any("oracle" in p for p in problems)
        assert page.is_visible("#approval-box")
        view_shot(page, "edit-problems")
        page.fill("#spec-editor", ONE_NODE)
        page.click("#validate-edit")
        page.wait_for_selector("#spec-problems li.ok")
        page.click("#run-edited")
        page.wait_for_selector("#graph g.node[data-node='ONLY'][data-status='done']")
        page.wait_for_selector("#outcome-status")
        assert page.inner_text("#outcome-status") == "ok" and page.is_hidden("#approval-box")
        url = page.url
        page.reload()  # the thread is on the server: the reloaded page shows the same run
        page.wait_for_selector("#graph g.node[data-node='ONLY'][data-status='done']")
        assert page.url == url and page.inner_text("#outcome-status") == "ok"


def test_a_plan_waiting_for_approval_survives_a_reload_and_runs_when_approved(page, studio):
    with shot_on_failure(page, "approve_reload"):
        open_live(page, studio)
        fill_run(page, approval=True)
        page.click("#run-button")
        page.wait_for_selector("#approval-box:not([hidden])")
        page.reload()
        page.wait_for_selector("#approval-box:not([hidden])")
        page.click("#approve")
        wait_js(page, "document.querySelectorAll('#graph g.node[data-status=done]').length === 4")
        assert page.inner_text("#outcome-status") == "ok"


def test_a_hanging_node_shows_running_with_its_time_out_then_fails(page, studio):
    with shot_on_failure(page, "hanging"):
        open_live(page, studio)
        fill_run(page, orchestrator=CHAIN, subagent="python:tests.studio_models:hanging_subagent", call_timeout=2,
                 retries=0)
        page.click("#run-button")
        page.wait_for_selector("#graph g.node[data-node='FIRST'][data-status='running']")
        wait_js(page,
            "/\\/ 2 s/.test(document.querySelector(\"#graph g.node[data-node='FIRST'] .node-badge\").textContent)")
        view_shot(page, "hanging")
        started = time.monotonic()
        page.wait_for_selector("#graph g.node[data-node='FIRST'][data-status='failed']")
        assert time.monotonic() - started < 15
        assert "timed out" in page.text_content("#graph g.node[data-node='FIRST'] .node-badge")
        assert node_status(page, "SECOND") == "pending" and page.inner_text("#outcome-status") == "exec_error"


def test_browse_a_training_folder_page_filter_and_open_a_rollout(page, studio):
    with shot_on_failure(page, "browse_training"):
        page.goto(f"{studio}/#browse")
        page.wait_for_selector("body[data-ready='1']")
        page.click("#folders a:has-text('grpo-run')")
        page.wait_for_selector("table.rows tbody tr")
        assert page.inner_text("#page-info") == "1–50 of 120"
        page.click("#next")
        wait_js(page, "document.getElementById('page-info').textContent === '51–100 of 120'")
        assert page.locator("table.rows tbody tr").first.get_attribute("data-row") == "50"
        assert page.locator("#reward-curve circle").count() == 12 and page.locator("#kind-shares rect").count() > 12
        page.select_option("#f-status", "invalid_spec")
        wait_js(page, "/of \\d+$/.test(document.getElementById('page-info').textContent) && "
                               "!document.getElementById('page-info').textContent.endsWith('of 120')")
        statuses = set(page.locator("table.rows tbody tr td:nth-child(5)").all_inner_texts())
        assert statuses == {"invalid_spec"}
        page.select_option("#f-status", "ok")
        page.locator("table.rows tbody tr").first.click()
        page.wait_for_selector("#sample-detail svg.plan g.node[data-node='FINAL']")
        assert "<agent_id>FINAL</agent_id>" in page.inner_text("#sample-detail")
        assert re.search(r"#browse/0/\d+$", page.url) or re.search(r"#browse/1/\d+$", page.url)
        view_shot(page, "browse-training")


def test_browse_an_eval_folder_and_open_a_failed_sample(page, studio):
    with shot_on_failure(page, "browse_eval"):
        page.goto(f"{studio}/#browse")
        page.wait_for_selector("body[data-ready='1']")
        page.click("#folders a:has-text('eval-masbench')")
        page.wait_for_selector("table.rows tbody tr")
        assert page.inner_text("#page-info") == "1–6 of 6"
        page.select_option("#f-status", "invalid_spec")
        wait_js(page, "document.getElementById('page-info').textContent === '1–1 of 1'")
        page.locator("table.rows tbody tr").first.click()
        page.wait_for_selector("#sample-warnings")
        assert "OracleAgent" in page.inner_text("#sample-warnings")
        page.select_option("#f-status", "ok")
        wait_js(page, "document.getElementById('page-info').textContent === '1–4 of 4'")
        page.locator("table.rows tbody tr").first.click()
        page.wait_for_selector("#sample-detail svg.plan g.node[data-node='A']")
        page.click("#sample-detail svg.plan g.node[data-node='A']")
        assert "keeps no per-node outputs" in page.inner_text("#sample-detail")
        view_shot(page, "browse-eval")
