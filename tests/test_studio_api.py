"""The studio's HTTP routes without a browser: live runs on scripted models, approval and edits, restarts,
hanging sub-agents, several watchers, disconnects, run folders and bad input of every kind."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("starlette", reason="needs the studio extra: pip install 'mas-orchestra[studio]'")
httpx = pytest.importorskip("httpx")

from mas_orchestra.studio.app import create_app  # noqa: E402
from mas_orchestra.studio.common import RunFolderError  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.studio_fixtures import make_eval_folder, make_training_folder  # noqa: E402
from tests.studio_server import DEMO, auth, events_so_far, serve, studio_client, wait_state  # noqa: E402

CHAIN = "python:tests.studio_models:chain_orchestrator"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    asyncio.run(make_eval_folder(root / "eval"))
    make_training_folder(root / "train")
    make_training_folder(root / "rollouts-only", rollouts=30, steps=3, state=False)
    return root


@pytest.fixture
def client(tmp_path, folders):
    app = create_app([folders], tmp_path / "studio.sqlite", allow_python_models=True)
    with studio_client(app) as c:
        yield c


def _start(client, **fields):
    body = {"question": "What is 2 + 3?", "orchestrator": DEMO, "subagent": "scripted:5", **fields}
    response = client.post("/api/runs", json=body)
    assert response.status_code == 201, response.text
    return response.json()["thread_id"]


def _outcomes(events):
    return [e for e in events if e["type"] == "outcome"]


# -- live runs -----------------------------------------------------------------------------------------------


def test_page_and_assets_are_served_from_the_package_without_any_network_url(client):
    page = client.get("/")
    assert page.status_code == 200 and "<title>mas-orchestra studio</title>" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN
    for asset in ("app.js", "live.js", "browse.js", "graph.js", "style.css", "vendor/dagre.min.js"):
        response = client.get(f"/static/{asset}")
        assert response.status_code == 200, asset
        assert "https://cdn" not in response.text and "import(" not in response.text
    notice = client.get("/static/vendor/dagre.LICENSE.txt").text
    assert "@dagrejs/dagre" in notice and "@dagrejs/graphlib" in notice and "MIT" in client.get("/static/vendor/dagre.min.js").text[:200]


def test_a_run_streams_its_plan_node_events_calls_and_a_graded_outcome(client):
    thread = _start(client, expected="5")
    wait_state(client, thread, ("finished",))
    events = events_so_far(client, thread)
    assert [e["seq"] for e in events] == list(range(len(events)))
    spec = next(e for e in events if e["type"] == "spec")
    assert {n["id"] for n in spec["graph"]["nodes"]} == {"SOLVE_A", "SOLVE_B", "VOTE", "JUDGE"}
    labels = {(e["source"], e["target"]): e["label"] for e in spec["graph"]["edges"]}
    assert labels[("SOLVE_A", "JUDGE")] == "${SOLVE_A}" and labels[("VOTE", "JUDGE")] == "${VOTE}"
    started = [e["node"] for e in events if e["type"] == "node_start"]
    ended = [e["node"] for e in events if e["type"] == "node_end"]
    assert sorted(started) == sorted(ended) == ["JUDGE", "SOLVE_A", "SOLVE_B", "VOTE"]
    assert started.index("JUDGE") == 3 and ended[-1] == "JUDGE"  # the judge waits for its three inputs
    calls = [e for e in events if e["type"] == "call"]
    assert {c["node"] for c in calls} == {"orchestrator", "SOLVE_A", "SOLVE_B", "VOTE", "JUDGE"}
    judge_call = next(c for c in calls if c["node"] == "JUDGE")
    assert "Compare" in judge_call["prompt"] and "<answer>5</answer>" in judge_call["reply"] and judge_call["tokens"] > 0
    (outcome,) = _outcomes(events)
    assert outcome["status"] == "ok" and outcome["answer"] == "5" and outcome["match"] is True
    assert outcome["usage"]["subagent_calls"] == len(calls) - 1 and outcome["node_results"]["JUDGE"]["answer"] == "5"
    assert [t["thread_id"] for t in client.get("/api/runs").json()] == [thread]


def test_a_wrong_answer_is_a_mismatch(client):
    thread = _start(client, expected="6")
    wait_state(client, thread, ("finished",))
    (outcome,) = _outcomes(events_so_far(client, thread))
    assert outcome["status"] == "ok" and outcome["match"] is False


def test_an_unknown_model_string_is_refused_before_any_thread_exists(client, tmp_path):
    response = client.post("/api/runs", json={"question": "q", "orchestrator": "gpt-9000", "subagent": "scripted:1"})
    assert response.status_code == 403  # not among the models this studio allows
    assert "--allow-model 'gpt-9000'" in response.json()["error"]
    assert client.get("/api/runs").json() == []
    from mas_orchestra.studio.security import studio_model_policy

    with studio_client(create_app([], tmp_path / "any.sqlite", models=studio_model_policy(["*"]))) as c:
        response = c.post("/api/runs", json={"question": "q", "orchestrator": "gpt-9000", "subagent": "scripted:1"})
        assert response.status_code == 400  # allowed by the pattern, unknown to the runtime
        assert "unknown model 'gpt-9000'" in response.json()["error"] and "scripted:<answer>" in response.json()["error"]


def test_the_agents_offered_and_the_dom_reach_the_run(client):
    # The demo plan uses an SC node: offering only CoT makes it an invalid orchestration, shown as such.
    thread = _start(client, agents=["cot"])
    wait_state(client, thread, ("finished",))
    (outcome,) = _outcomes(events_so_far(client, thread))
    assert outcome["status"] == "invalid_spec" and "SCAgent" in outcome["error"]
    assert "SCAgent" not in next(e for e in events_so_far(client, thread) if e["type"] == "call")["prompt"].split("# Task")[0]
    refused = client.post("/api/runs", json={"question": "q", "orchestrator": DEMO, "subagent": "scripted:1",
                                             "agents": ["oracle"]})
    assert refused.status_code == 400 and "oracle" in refused.json()["error"]
    constrained = client.post("/api/runs", json={"question": "q", "orchestrator": DEMO, "subagent": "scripted:1",
                                                 "constrained": "on"})
    assert constrained.status_code == 400 and "constrained" in constrained.json()["error"].lower()


def test_python_model_strings_need_the_flag_except_the_demo(tmp_path):
    with studio_client(create_app([], tmp_path / "s.sqlite")) as c:
        refused = c.post("/api/runs", json={"question": "q", "orchestrator": CHAIN, "subagent": "scripted:1"})
        assert refused.status_code == 403 and "--allow-python-models" in refused.json()["error"]
        assert c.post("/api/runs", json={"question": "q", "orchestrator": DEMO, "subagent": "scripted:1"}).status_code == 201


def test_a_bad_run_request_lists_every_problem(client):
    response = client.post("/api/runs", json={"question": "", "dom": "mid", "timeout": -1, "colour": "red"})
    assert response.status_code == 400
    problems = " | ".join(response.json()["problems"])
    for field in ("question", "dom", "timeout", "colour"):
        assert field in problems
    assert client.post("/api/runs", content=b"not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert client.post("/api/runs", content=b"not json").status_code == 415  # JSON bodies only


def test_approval_stops_the_plan_then_edits_are_validated_in_place_and_the_edited_plan_runs(client):
    thread = _start(client, approval=True, expected="5")
    wait_state(client, thread, ("waiting",))
    (waiting,) = _outcomes(events_so_far(client, thread))
    assert waiting["status"] == "interrupted" and "SOLVE_A" in waiting["interrupt"]["spec_text"]
    assert not [e for e in events_so_far(client, thread) if e["type"] == "node_start"]  # nothing ran
    # An invalid edit: every problem listed, the thread still waits.
    bad = {"nodes": [{"id": "A", "agent": "oracle", "input": "x"}, {"id": "B", "agent": "cot", "input": "${C}"}],
           "edges": [{"source": "A", "target": "B"}]}
    response = client.post(f"/api/runs/{thread}/resume", json={"spec": json.dumps(bad)})
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert len(problems) >= 2 and any("oracle" in p for p in problems) and any("C" in p for p in problems)
    syntax = client.post(f"/api/runs/{thread}/resume", json={"spec": '{"nodes": [\n  {"id": }'})
    assert syntax.status_code == 422 and "line 2" in syntax.json()["problems"][0]
    check = client.post("/api/validate", json={"thread_id": thread, "spec": json.dumps(bad)}).json()
    assert check["ok"] is False and check["problems"] == problems
    assert client.get(f"/api/runs/{thread}").json()["state"] == "waiting"
    edited = {"nodes": [{"id": "ONLY", "agent": "cot", "input": "Answer it."}]}
    assert client.post("/api/validate", json={"thread_id": thread, "spec": json.dumps(edited)}).json()["ok"] is True
    assert client.post(f"/api/runs/{thread}/resume", json={"spec": json.dumps(edited)}).status_code == 200
    wait_state(client, thread, ("finished",))
    events = events_so_far(client, thread)
    final = _outcomes(events)[-1]
    assert final["status"] == "ok" and list(final["node_results"]) == ["ONLY"] and final["match"] is True
    assert [n["id"] for n in final["graph"]["nodes"]] == ["ONLY"]
    again = client.post(f"/api/runs/{thread}/resume", json={"action": "approve"})
    assert again.status_code == 409 and "not waiting" in again.json()["error"]


def test_reject_ends_the_thread_without_running_anything(client):
    thread = _start(client, approval=True)
    wait_state(client, thread, ("waiting",))
    client.post(f"/api/runs/{thread}/resume", json={"action": "reject"})
    wait_state(client, thread, ("finished",))
    events = events_so_far(client, thread)
    assert _outcomes(events)[-1]["status"] == "invalid_spec" and "rejected" in _outcomes(events)[-1]["error"]
    assert not [e for e in events if e["type"] == "node_start"]


def test_a_server_restart_resumes_the_thread_from_the_file(tmp_path):
    db = tmp_path / "studio.sqlite"
    with studio_client(create_app([], db)) as first:
        waiting = _start(first, approval=True)
        done = _start(first, question="What is 1 + 1?")
        wait_state(first, waiting, ("waiting",))
        wait_state(first, done, ("finished",))
    with studio_client(create_app([], db)) as second:  # a new server on the same file
        assert {t["thread_id"] for t in second.get("/api/runs").json()} == {waiting, done}
        assert second.get(f"/api/runs/{done}").json()["state"] == "stored"  # reading starts nothing
        assert second.get(f"/api/runs/{done}/events").status_code == 409  # ... and says to open it
        for thread in (done, waiting):
            assert second.post(f"/api/runs/{thread}/open", json={}).status_code == 200
        wait_state(second, done, ("finished",))
        restored = events_so_far(second, done)
        assert restored[0]["type"] == "restored" and _outcomes(restored)[0]["status"] == "ok"
        assert not [e for e in restored if e["type"] == "call"]  # the stored outcome: no model was called
        wait_state(second, waiting, ("waiting",))
        assert second.post(f"/api/runs/{waiting}/resume", json={"action": "approve"}).status_code == 200
        wait_state(second, waiting, ("finished",))
        assert _outcomes(events_so_far(second, waiting))[-1]["status"] == "ok"
    with studio_client(create_app([], db)) as third:
        assert third.get("/api/runs/studio-nosuchthread").status_code == 404
        assert third.get("/api/runs/..%2F..%2Fetc").status_code == 404


def test_a_run_cut_off_by_a_server_stop_goes_on_from_its_checkpoint_after_the_restart(tmp_path):
    # The first server is a process stopped as its user stops it (SIGTERM) while SECOND runs: its shutdown
    # cancels the run, which closes its checkpoint connection, so the next server finds the file unlocked.
    from tests.studio_attacks import SLOW, start_studio

    db = tmp_path / "studio.sqlite"
    with start_studio(db, cwd=REPO) as first, first.client() as http:
        body = {"question": "What is 2 + 3?", "orchestrator": CHAIN, "subagent": SLOW}
        started = http.post("/api/runs", json=body)
        assert started.status_code == 201, started.text
        thread = started.json()["thread_id"]
        deadline = time.monotonic() + 60
        while not any(e["type"] == "node_end" for e in events_so_far(http, thread)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert http.get(f"/api/runs/{thread}").json()["state"] == "running"  # stopped while SECOND runs
    assert first.process.returncode is not None
    with studio_client(create_app([], db, allow_python_models=True)) as second:
        assert second.post(f"/api/runs/{thread}/open", json={}).status_code == 200
        wait_state(second, thread, ("finished",), timeout=30)
        events = events_so_far(second, thread)
        assert _outcomes(events)[-1]["status"] == "ok" and set(_outcomes(events)[-1]["node_results"]) == {"FIRST", "SECOND"}
        # FIRST finished before the stop: it is not called again.
        assert {e["node"] for e in events if e["type"] == "call"} == {"SECOND"}


def test_a_hanging_sub_agent_shows_running_then_its_time_out(client):
    thread = _start(client, orchestrator=CHAIN, subagent="python:tests.studio_models:hanging_subagent",
                    call_timeout=1, retries=0)
    started = time.monotonic()
    summary = client.get(f"/api/runs/{thread}").json()
    assert summary["state"] == "running"
    wait_state(client, thread, ("finished",), timeout=30)
    assert time.monotonic() - started < 20
    events = events_so_far(client, thread)
    assert [e["node"] for e in events if e["type"] == "node_start"] == ["FIRST"]
    assert not [e for e in events if e["type"] == "node_end"]
    (outcome,) = _outcomes(events)
    assert outcome["status"] == "exec_error" and outcome["failed_node"] == "FIRST" and "Timeout" in outcome["error"]
    assert any(e["type"] == "call" and e["node"] == "FIRST" and "Timeout" in (e.get("error") or "") for e in events)


def _read_stream(base, thread, into, stop_after=None, headers=None):
    with httpx.stream("GET", f"{base}/api/runs/{thread}/events", timeout=60, headers=headers) as response:
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            into.append(event)
            if stop_after and stop_after(event):
                return


def test_two_tabs_on_one_thread_both_see_every_event_and_a_disconnect_does_not_stop_the_run(tmp_path):
    app = create_app([], tmp_path / "studio.sqlite", allow_python_models=True)
    with serve(app) as base:
        body = {"question": "q", "orchestrator": CHAIN, "subagent": "python:tests.studio_models:slow_subagent"}
        thread = httpx.post(f"{base}/api/runs", json=body, headers=auth(app)).json()["thread_id"]
        tab_a, tab_b, leaver = [], [], []

        def finished(e):
            return e["type"] == "state" and e["state"] == "finished"

        readers = [threading.Thread(target=_read_stream, args=(base, thread, tab, finished, auth(app)))
                   for tab in (tab_a, tab_b)]
        readers.append(threading.Thread(
            target=_read_stream, args=(base, thread, leaver, lambda e: e["type"] == "node_start", auth(app))))
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=60)
        assert leaver[-1]["type"] == "node_start"  # it left mid-run
        assert [e["seq"] for e in tab_a] == [e["seq"] for e in tab_b] == list(range(len(tab_a)))
        assert _outcomes(tab_a)[0]["status"] == "ok" and _outcomes(tab_a)[0]["answer"] == "7"
        # A tab coming back later (a reload) replays the whole run.
        replay = events_so_far(httpx.Client(base_url=base, headers=auth(app)), thread)
        assert [e["seq"] for e in replay] == [e["seq"] for e in tab_a]
        # Reconnecting with Last-Event-ID continues after what the tab had.
        response = httpx.get(f"{base}/api/runs/{thread}/events", params={"follow": "0"},
                             headers={"Last-Event-ID": str(tab_a[-3]["seq"]), **auth(app)})
        assert [json.loads(x[5:])["seq"] for x in response.text.splitlines() if x.startswith("data:")] == \
            [tab_a[-2]["seq"], tab_a[-1]["seq"]]


# -- run folders ---------------------------------------------------------------------------------------------


def test_run_folders_are_listed_with_their_kind_and_counts(client):
    listed = {f["name"]: f for f in client.get("/api/folders").json()}
    assert listed["eval"]["kind"] == "eval" and listed["eval"]["rows"] == 6
    assert listed["eval"]["statuses"] == {"ok": 4, "exec_error": 1, "invalid_spec": 1}
    assert listed["train"]["kind"] == "training" and listed["train"]["rows"] == 48 and listed["train"]["steps"] == [1, 2, 3, 4, 5, 6]


def _folder(client, name):
    return next(f["folder"] for f in client.get("/api/folders").json() if f["name"] == name)


def test_the_table_filters_and_pages(client):
    n = _folder(client, "eval")
    wrong = client.get(f"/api/folders/{n}/rows", params={"status": "ok", "correct": "no"}).json()
    assert wrong["total"] == 1 and "[wrong]" in wrong["rows"][0]["question"]
    assert client.get(f"/api/folders/{n}/rows", params={"kind": "cot", "agents": 2}).json()["total"] == 5
    t = _folder(client, "train")
    page = client.get(f"/api/folders/{t}/rows", params={"offset": 40, "limit": 5}).json()
    assert page["total"] == 48 and [r["row"] for r in page["rows"]] == [40, 41, 42, 43, 44]
    step3 = client.get(f"/api/folders/{t}/rows", params={"step": 3, "limit": 200}).json()
    assert step3["total"] == 8 and {r["step"] for r in step3["rows"]} == {3}
    assert client.get(f"/api/folders/{t}/rows", params={"q": "rollout 17"}).json()["total"] == 1
    assert client.get(f"/api/folders/{t}/rows", params={"limit": 10_000}).status_code == 400
    assert client.get(f"/api/folders/{t}/rows", params={"correct": "maybe"}).status_code == 400
    assert client.get(f"/api/folders/{t}/rows", params={"step": "two"}).status_code == 400


def test_a_sample_has_its_diagram_orchestration_warnings(client):
    n = _folder(client, "eval")
    rows = client.get(f"/api/folders/{n}/rows").json()["rows"]
    ok = client.get(f"/api/folders/{n}/rows/{next(r['row'] for r in rows if r['status'] == 'ok')}").json()
    assert [x["id"] for x in ok["graph"]["nodes"]] == ["A", "FINAL"] and ok["graph"]["edges"][0]["label"] == "${A}"
    assert "<agent_id>FINAL</agent_id>" in ok["orchestration"] and ok["warnings"] == []
    invalid = client.get(f"/api/folders/{n}/rows/{next(r['row'] for r in rows if r['status'] == 'invalid_spec')}").json()
    assert invalid["graph"] is None and any("OracleAgent" in w for w in invalid["warnings"])
    failed = client.get(f"/api/folders/{n}/rows/{next(r['row'] for r in rows if r['status'] == 'exec_error')}").json()
    assert any(w.startswith("error:") for w in failed["warnings"])
    t = _folder(client, "train")
    rollout = client.get(f"/api/folders/{t}/rows/0").json()
    assert rollout["record"]["step"] == 1 and (rollout["graph"] or rollout["warnings"])


def test_training_curves_come_from_trainer_state_or_else_from_the_rollouts(client):
    curve = client.get(f"/api/folders/{_folder(client, 'train')}/curve").json()
    state = json.loads((REPO / "examples/data/cpu_learning_seed0_trainer_state.json").read_text())
    assert curve["source"] == "trainer_state.json" and len(curve["points"]) == state["global_step"]
    assert set(curve["points"][0]["shares"]) >= {"cot", "sc"}
    own = client.get(f"/api/folders/{_folder(client, 'rollouts-only')}/curve").json()
    assert own["source"] == "rollouts.jsonl" and [p["step"] for p in own["points"]] == [1, 2, 3]
    for point in own["points"]:
        assert abs(sum(point["shares"].values()) - 1) < 1e-9 and 0 <= point["reward"] <= 1
    assert client.get(f"/api/folders/{_folder(client, 'eval')}/curve").status_code == 400


def test_a_truncated_or_broken_jsonl_line_is_a_warning_and_a_growing_file_is_indexed_further(tmp_path):
    folder = make_training_folder(tmp_path / "run", rollouts=10, steps=2, state=False)
    file = folder / "rollouts.jsonl"
    lines = file.read_text().splitlines(keepends=True)
    lines[3] = "{not json\n"
    file.write_text("".join(lines) + lines[5][:40])  # a broken line 4 and an unterminated last line
    with studio_client(create_app([folder], tmp_path / "s.sqlite")) as c:
        summary = c.get("/api/folders/0").json()
        assert summary["rows"] == 9
        assert any("rollouts.jsonl:4: skipped" in w for w in summary["warnings"])
        assert any("rollouts.jsonl:11: the last line is incomplete" in w for w in summary["warnings"])
        with file.open("a") as out:  # the writer finishes its line and adds another
            out.write(lines[5][40:] + lines[6])
        summary = c.get("/api/folders/0").json()
        assert summary["rows"] == 11 and not any("incomplete" in w for w in summary["warnings"])
        assert c.get("/api/folders/0/rows/10").json()["record"] == json.loads(lines[6])


def test_a_folder_that_is_not_a_run_folder_is_refused_at_start(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunFolderError, match=r"not a run folder.*results\.jsonl.*rollouts\.jsonl"):
        create_app([tmp_path / "empty"], tmp_path / "s.sqlite")
    with pytest.raises(RunFolderError, match="no such folder"):
        create_app([tmp_path / "missing"], tmp_path / "s.sqlite")
    proc = subprocess.run([sys.executable, "-m", "mas_orchestra", "studio", "--runs", str(tmp_path / "empty"),
                           "--db", str(tmp_path / "s.sqlite")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "not a run folder" in proc.stderr and "Traceback" not in proc.stderr


def test_no_route_reads_files_outside_the_folders_given(client):
    secret = (REPO / "pyproject.toml").read_text()[:40]
    for path in ("/static/../pyproject.toml", "/static/%2e%2e/%2e%2e/%2e%2e/pyproject.toml",
                 "/static/..%2f..%2f..%2fpyproject.toml", "/api/folders/99", "/api/folders/0/rows/99999",
                 "/api/folders/-1/rows", "/api/folders/..%2F..%2Fetc/rows", "/api/runs/..%2Fx/events"):
        response = client.get(path)
        assert response.status_code in (400, 404), path
        assert secret not in response.text
    for route in client.app.routes:
        assert ":path}" not in getattr(route, "path", ""), route.path  # no route takes a file path


def test_the_cli_binds_localhost_by_default_and_stays_lazy():
    from mas_orchestra.cli import build_parser

    args = build_parser().parse_args(["studio"])
    assert (args.host, args.port, args.runs, args.db) == ("127.0.0.1", 8123, [], "studio.sqlite")
    code = "import sys, mas_orchestra.cli; print('starlette' in sys.modules, 'mas_orchestra.studio.app' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.stdout.split() == ["False", "False"]


def test_the_studio_sits_above_the_core_and_reads_training_output_as_data():
    studio = REPO / "mas_orchestra" / "studio"
    offenders = []
    for path in (REPO / "mas_orchestra").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                inside = studio in path.parents
                if inside and name.split(".")[0] in ("training", "graphs"):
                    offenders.append(f"{path.relative_to(REPO)} imports {name}")
                if not inside and name.startswith("mas_orchestra.studio") and path.name != "cli.py":
                    offenders.append(f"{path.relative_to(REPO)} imports {name}")
    assert offenders == []
