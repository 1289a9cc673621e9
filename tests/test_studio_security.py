"""The studio keeps out other web pages and other users (issue 31): each attack against a studio started with its
documented command on 127.0.0.1 (``server``), a model-written script staying text in Chromium (``browser``), and
the model policy, limits and eviction without a server."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="needs the studio extra: pip install 'mas-orchestra[studio]'")
pytest.importorskip("uvicorn", reason="needs the studio extra: pip install 'mas-orchestra[studio]'")
pytest.importorskip("httpx", reason="needs httpx (the dev extra)")

from mas_orchestra.models.policy import ModelNotAllowedError, ModelPolicy
from mas_orchestra.studio.app import create_app
from mas_orchestra.studio.security import StudioLimits, studio_model_policy
from tests import studio_attacks as attacks
from tests.conftest import REPO
from tests.studio_server import DEMO, studio_client, wait_state

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    db = tmp_path_factory.mktemp("studio-security") / "studio.sqlite"
    with attacks.start_studio(db, cwd=REPO) as started:
        yield started


@pytest.fixture(scope="module")
def finished_thread(studio):
    with studio.client() as c:
        thread = c.post("/api/runs", json=attacks.RUN).json()["thread_id"]
        wait_state(c, thread, ("finished",))
    return thread


# -- against a started server ---------------------------------------------------------------------------------


@pytest.mark.server
def test_the_printed_url_carries_a_token_and_without_it_nothing_is_served(studio):
    assert studio.token and len(studio.token) >= 24
    assert f"http://127.0.0.1:{studio.port}/?token={studio.token}" in studio.printed
    assert attacks.no_token(studio) == {"/api/config": 401, "/api/runs": 401, "/": 401}
    with studio.client() as c:
        assert c.get("/api/config").status_code == 200
        wrong = c.get("/api/config", headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401 and "token" in wrong.json()["error"]
    # Opening the printed URL sets the cookie and drops the token from the address; the cookie alone then works.
    import httpx

    with httpx.Client(base_url=studio.base) as browser_like:
        opened = browser_like.get(f"/?token={studio.token}")
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert browser_like.get("/api/config").status_code == 200
        assert browser_like.get("/").status_code == 200


@pytest.mark.server
def test_a_foreign_host_is_refused_even_with_the_token(studio):
    assert attacks.foreign_host(studio) == 403


@pytest.mark.server
def test_a_cross_site_text_plain_post_starts_nothing(studio):
    status, added = attacks.cross_site_text_plain(studio)
    assert status in (401, 403) and added == 0
    with studio.client() as c:  # with the token, a non-JSON body is still refused
        plain = c.post("/api/runs", content=b'{"question": "q"}', headers={"Content-Type": "text/plain"})
        assert plain.status_code == 415


@pytest.mark.server
def test_the_token_from_a_foreign_origin_is_refused(studio):
    status, added = attacks.foreign_origin_with_token(studio)
    assert status == 403 and added == 0
    with studio.client() as c:  # the studio's own origin is accepted
        own = c.post("/api/runs", json=attacks.RUN, headers={"Origin": studio.base})
        assert own.status_code == 201


@pytest.mark.server
def test_a_64_mb_body_is_refused_before_it_is_read(studio):
    answer = attacks.body_too_large(studio)
    assert answer["status"] == 413
    assert answer["bytes_sent"] < 16 << 20  # answered long before the 64 MB were sent


@pytest.mark.server
def test_page_headers_model_urls_and_the_database_file(studio):
    headers = attacks.page_headers(studio)
    assert headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "script-src 'self'" in headers["content-security-policy"]
    assert attacks.remote_vllm(studio) == 403
    assert stat.S_IMODE(studio.db.stat().st_mode) == 0o600


@pytest.mark.server
def test_a_hundred_concurrent_starts_hold_the_cap_and_every_accepted_run_finishes(studio):
    result = attacks.concurrent_starts(studio, 100)
    cap = StudioLimits().max_live_runs
    assert 1 <= result["accepted"] <= cap and result["codes"].get(429) == 100 - result["accepted"]
    assert result["finished"] == result["accepted"]
    with studio.client() as c:  # every slot was given back
        assert c.get("/api/config").json()["load"]["executing"] == 0
    print(f"100 starts: {result}")


@pytest.mark.server
def test_two_hundred_event_stream_clients_are_bounded(studio, finished_thread):
    result = attacks.many_streams(studio, finished_thread, 200)
    cap = StudioLimits().max_streams
    assert result["codes"] == {200: cap, 429: 200 - cap}
    assert result["rss_open_kib"] - result["rss_before_kib"] < 64 * 1024  # no per-client growth without bound
    print(f"200 streams: {result}")
    with studio.client() as c:  # the slots come back when the clients leave
        deadline = time.monotonic() + 10
        while c.get("/api/config").json()["load"]["streams"] != 0:
            assert time.monotonic() < deadline, c.get("/api/config").json()["load"]
            time.sleep(0.05)
        assert c.get(f"/api/runs/{finished_thread}/events", params={"follow": "0"}).status_code == 200


@pytest.mark.server
def test_a_non_loopback_host_refuses_to_start_without_a_chosen_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MAS_STUDIO_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "mas_orchestra", "studio", "--host", "0.0.0.0", "--db",
                           str(tmp_path / "s.sqlite")], capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert proc.returncode == 2 and "--token" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.is_file() or shutil.which("chromium") is None, reason="needs /usr/bin/chromium")
def test_a_model_written_script_stays_text_in_the_page(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    payload = "<img src=x onerror=window.studioPwned=1>"
    with attacks.start_studio(tmp_path / "s.sqlite", cwd=REPO) as studio, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(studio.printed.split()[3])  # the URL exactly as printed
            assert page.url == f"{studio.base}/"
            page.goto(f"{studio.base}/#live")
            page.wait_for_selector("body[data-ready='1']")
            page.fill("#question", "Say hello")
            page.fill("#orchestrator", DEMO)
            page.fill("#subagent", f"scripted:{payload}")
            page.click("#run-button")
            page.wait_for_selector("#outcome-status", timeout=60_000)
            answer = page.inner_text("#result pre.answer")
            assert "onerror" in answer and "<img" in answer  # shown as the text it is
            assert page.locator("#result img").count() == 0 and page.locator("#node-detail img").count() == 0
            time.sleep(0.3)
            assert page.evaluate("window.studioPwned") is None
        finally:
            browser.close()


# -- without a server -----------------------------------------------------------------------------------------


def test_the_model_policy_accepts_the_defaults_and_refuses_the_rest_with_the_flag_to_use():
    policy = studio_model_policy(["openai:*", "vllm:*"])
    for model in ("embedded", "scripted:5", DEMO, "openai:gpt-4o-mini", "vllm:m@http://127.0.0.1:8000/v1",
                  "vllm:m@http://[::1]:8000"):
        policy.check("orchestrator", model)
    cases = {"anthropic:claude": "--allow-model", "vllm:m@http://10.0.0.7:8000/v1": "--allow-remote-vllm",
             "python:os:system": "--allow-python-models"}
    for model, flag in cases.items():
        with pytest.raises(ModelNotAllowedError, match=flag):
            policy.check("orchestrator", model)
    with pytest.raises(ModelNotAllowedError, match="--allow-hf-paths"):
        ModelPolicy.with_extra(["hf:*"]).check("sub-agent", "hf:/home/me/model")
    ModelPolicy.with_extra(["hf:*"], allow_hf_paths=True).check("sub-agent", "hf:/home/me/model")
    ModelPolicy.with_extra(["vllm:*"], allow_remote_vllm=True).check("sub-agent", "vllm:m@http://10.0.0.7:1/v1")


def test_a_vllm_url_from_the_page_never_gets_the_api_key(monkeypatch):
    pytest.importorskip("langchain_openai")
    from mas_orchestra.models.policy import keyless

    monkeypatch.setenv("VLLM_API_KEY", "secret-key-of-the-user")
    model = keyless("vllm:m@http://127.0.0.1:9/v1", 5.0)
    assert model.openai_api_key.get_secret_value() == "EMPTY"


def test_finished_threads_beyond_the_limit_leave_memory_and_reopen_from_the_database(tmp_path):
    app = create_app([], tmp_path / "s.sqlite", limits=StudioLimits(keep_finished=1))
    with studio_client(app) as c:
        first = c.post("/api/runs", json=attacks.RUN).json()["thread_id"]
        wait_state(c, first, ("finished",))
        second = c.post("/api/runs", json=attacks.RUN).json()["thread_id"]
        wait_state(c, second, ("finished",))
        assert app.state.studio.live.in_memory == 1
        assert c.get(f"/api/runs/{first}").json()["state"] == "stored"  # evicted, still in the file
        assert c.post(f"/api/runs/{first}/open", json={}).status_code == 200
        wait_state(c, first, ("finished",))
        timeout = c.post("/api/runs", json={**attacks.RUN, "timeout": 10_000})
        assert timeout.status_code == 400 and "--max-run-timeout" in timeout.json()["error"]


def test_the_cli_flags_default_to_the_documented_limits():
    from mas_orchestra.cli import build_parser

    args = build_parser().parse_args(["studio"])
    limits = StudioLimits()
    assert (args.max_body_bytes, args.max_live_runs, args.max_streams, args.max_run_timeout, args.keep_finished) == (
        limits.max_body_bytes, limits.max_live_runs, limits.max_streams, limits.max_run_timeout_s,
        limits.keep_finished)
    assert args.token is None and args.allow_model == [] and not args.allow_remote_vllm


def test_host_names_and_a_chunked_body_over_the_limit(tmp_path):
    from mas_orchestra.studio.security import AccessPolicy

    policy = AccessPolicy("x" * 16, frozenset({"studio.lan"}))
    for host in ("127.0.0.1:8123", "localhost", "LOCALHOST:1", "[::1]:8123", "studio.lan:8123", "127.0.0.2"):
        assert policy.host_allowed(host), host
    for host in ("attacker.example:8123", "127.0.0.1.attacker.example", "", None, "[::2]:8123", "studio.lan.evil"):
        assert not policy.host_allowed(host), host
    app = create_app([], tmp_path / "s.sqlite", limits=StudioLimits(max_body_bytes=1024))
    with studio_client(app) as c:
        def chunks():  # no Content-Length: the limit is counted while the body streams in
            for _ in range(64):
                yield b" " * 1024

        response = c.post("/api/runs", content=chunks(), headers={"Content-Type": "application/json"})
        assert response.status_code == 413 and "--max-body-bytes" in response.json()["error"]
        assert c.get("/api/runs").json() == []
