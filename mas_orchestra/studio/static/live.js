// Live run view: start a run, follow its events (server-sent), draw the plan, steer the approval.
"use strict";

const Live = {
  thread: null, source: null, graph: null, handle: null, nodes: new Map(), request: null,
  clockOffset: null, selected: null, samples: [], timer: null, state: "idle",
};
window.studioTimings = window.studioTimings || {};

function $(id) { return document.getElementById(id); }

async function liveInit(config) {
  put($("model-forms"), ...[config.demo_orchestrator, "scripted:42", ...config.model_forms]
    .map((form) => el("option", { value: form })));
  put($("agents"), ...config.agents.map((kind) => el("label", { class: "check" },
    el("input", { type: "checkbox", name: "agents", value: kind.name, ...(kind.needs_search ? {} : { checked: "" }),
      ...(kind.needs_search ? { disabled: "", title: "needs a search backend; the studio runs offline" } : {}) }),
    " " + kind.block)));
  Live.samples = await api("/api/samples");
  $("sample").append(...Live.samples.map((s) => el("option", { value: s.key }, `${s.source} · ${s.label}`)));
  $("sample").addEventListener("change", () => {
    const sample = Live.samples.find((s) => String(s.key) === $("sample").value);
    if (!sample) return;
    $("question").value = sample.question;
    $("expected").value = Array.isArray(sample.answer) ? JSON.stringify(sample.answer) : sample.answer;
  });
  $("run-form").addEventListener("submit", startRun);
  $("approve").addEventListener("click", () => resume({ action: "approve" }));
  $("reject").addEventListener("click", () => resume({ action: "reject", reason: "rejected in the studio" }));
  $("run-edited").addEventListener("click", () => resume({ spec: $("spec-editor").value }));
  $("validate-edit").addEventListener("click", checkEdit);
  Live.timer = setInterval(tickRunning, 250);
  await refreshThreads();
}

function formRequest() {
  const number = (id) => ($(id).value === "" ? null : Number($(id).value));
  let expected = $("expected").value.trim() || null;
  if (expected && expected.startsWith("[")) { try { expected = JSON.parse(expected); } catch (e) { /* keep text */ } }
  return {
    question: $("question").value, orchestrator: $("orchestrator").value, subagent: $("subagent").value,
    dom: $("dom").value, constrained: $("constrained").value, approval: $("approval").checked, expected,
    agents: [...document.querySelectorAll("input[name=agents]:checked")].map((box) => box.value),
    timeout: number("timeout"), call_timeout: number("call_timeout"), retries: number("retries"),
  };
}

async function startRun(event) {
  event.preventDefault();
  $("form-error").textContent = "";
  $("run-button").disabled = true;
  window.studioTimings.submitted = performance.now();
  try {
    const { thread_id } = await api("/api/runs", { method: "POST", body: JSON.stringify(formRequest()) });
    location.hash = `#live/${thread_id}`;
  } catch (error) {
    $("form-error").textContent = error.message;
  } finally {
    $("run-button").disabled = false;
  }
}

async function refreshThreads() {
  const threads = await api("/api/runs");
  put($("threads"), ...threads.slice(0, 30).map((t) => el("li", { class: t.thread_id === Live.thread ? "current" : "" },
    el("a", { href: `#live/${t.thread_id}` }, t.question.slice(0, 60) || t.thread_id),
    el("span", { class: `chip state-${t.state}` }, t.state))));
}

async function openThread(threadId) {
  if (Live.thread === threadId && Live.source) return;
  if (Live.source) Live.source.close();
  Object.assign(Live, { thread: threadId, graph: null, handle: null, nodes: new Map(), selected: null, clockOffset: null });
  put($("graph"), );
  put($("result"), );
  $("approval-box").hidden = true;
  put($("node-detail"), el("span", { class: "muted" }, "Click a node for its sub-task, calls and answer."));
  put($("run-head"), el("span", { class: "muted" }, `Thread ${threadId}: connecting…`));
  // Loading a stored thread (after a server restart) may resume it: a POST, never a side effect of a GET.
  await api(`/api/runs/${encodeURIComponent(threadId)}/open`, { method: "POST", body: "{}" });
  if (Live.thread !== threadId) return;  // another thread was opened meanwhile
  Live.source = new EventSource(`/api/runs/${encodeURIComponent(threadId)}/events`);
  Live.source.onmessage = (message) => onEvent(JSON.parse(message.data));
  Live.source.onerror = () => { $("conn").textContent = "reconnecting…"; };
  Live.source.onopen = () => { $("conn").textContent = ""; };
}

function node(id) {
  if (!Live.nodes.has(id)) Live.nodes.set(id, { status: "pending", calls: [], start: null, end: null, result: null, answer: null });
  return Live.nodes.get(id);
}

function setNode(id, status, note) {
  const info = node(id);
  info.status = status;
  if (Live.handle) Live.handle.setStatus(id, status, note);
  if (Live.selected === id) showNode(id);
}

function draw(graph) {
  Live.graph = graph;
  Live.nodes = new Map();
  Live.handle = drawGraph($("graph"), graph, showNode);
  if (graph && !window.studioTimings.firstGraph) window.studioTimings.firstGraph = performance.now();
}

function onEvent(event) {
  const now = Date.now() / 1000;
  Live.clockOffset = Live.clockOffset === null ? now - event.t : Math.min(Live.clockOffset, now - event.t);
  switch (event.type) {
    case "started":
    case "restored":
      Live.request = event.request;
      renderHead();
      break;
    case "state":
      Live.state = event.state;
      renderHead();
      if (event.state !== "running") refreshThreads();
      break;
    case "spec":
      draw(event.graph);
      break;
    case "node_start":
      Object.assign(node(event.node), { start: event.t, end: null });
      setNode(event.node, "running");
      break;
    case "call_start":
      break;
    case "call":
      node(event.node).calls.push(event);
      if (Live.selected === event.node) showNode(event.node);
      break;
    case "node_end":
      Object.assign(node(event.node), { end: event.t, answer: event.answer });
      setNode(event.node, "done", `✓ ${fmtSeconds(event.t - (node(event.node).start ?? event.t))}`);
      break;
    case "resumed":
      $("approval-box").hidden = true;
      put($("result"), el("p", { class: "muted" }, `resumed: ${event.action}`));
      break;
    case "outcome":
      onOutcome(event);
      break;
    case "error":
      put($("result"), el("p", { class: "error", role: "alert" }, event.message));
      break;
    default:
      break;
  }
}

function onOutcome(outcome) {
  if (outcome.graph && (!Live.graph || JSON.stringify(outcome.graph) !== JSON.stringify(Live.graph))) draw(outcome.graph);
  for (const [id, result] of Object.entries(outcome.node_results || {})) {
    const info = node(id);
    info.result = result;
    if (info.status !== "done") setNode(id, "done");
  }
  if (outcome.status === "interrupted") {
    showApproval(outcome.interrupt || {});
  } else {
    $("approval-box").hidden = true;
    const timedOut = outcome.status === "timeout" || /Timeout/.test(outcome.error || "");
    for (const [id, info] of Live.nodes) {
      if (id === outcome.failed_node) setNode(id, "failed", timedOut ? "✗ timed out" : "✗ failed");
      else if (info.status === "running") setNode(id, "failed", timedOut ? "✗ timed out" : "✗ stopped");
    }
  }
  renderResult(outcome);
}

function showApproval(payload) {
  const box = $("approval-box");
  box.hidden = false;
  if (!box.dataset.thread || box.dataset.thread !== Live.thread || !$("spec-editor").value) {
    $("spec-editor").value = payload.spec_text || JSON.stringify(payload.spec, null, 2);
  }
  box.dataset.thread = Live.thread;
  showProblems(payload.error ? [payload.error] : []);
}

function showProblems(problems) {
  put($("spec-problems"), ...problems.map((p) => el("li", { class: "error" }, p)));
}

async function resume(decision) {
  showProblems([]);
  try {
    await api(`/api/runs/${encodeURIComponent(Live.thread)}/resume`, { method: "POST", body: JSON.stringify(decision) });
    $("spec-editor").value = "";
  } catch (error) {
    showProblems(error.problems.length ? error.problems : [error.message]);
  }
}

async function checkEdit() {
  try {
    const result = await api("/api/validate", { method: "POST", body: JSON.stringify({ thread_id: Live.thread, spec: $("spec-editor").value }) });
    if (result.ok) put($("spec-problems"), el("li", { class: "ok" }, `valid: ${result.graph.nodes.length} agents`));
    else showProblems(result.problems);
  } catch (error) {
    showProblems([error.message]);
  }
}

function renderHead() {
  const r = Live.request || {};
  put($("run-head"), 
    el("span", { class: `chip state-${Live.state}`, id: "run-state", "data-state": Live.state }, Live.state),
    el("span", { class: "question" }, (r.question || "").slice(0, 240)),
    el("span", { class: "muted" }, ` · ${r.orchestrator} → ${r.subagent} · DoM ${r.dom}${r.approval ? " · approval" : ""}`));
}

function fmtSeconds(s) { return `${Number(s).toFixed(1)} s`; }

function tickRunning() {
  if (Live.clockOffset === null) return;
  const serverNow = Date.now() / 1000 - Live.clockOffset;
  const limit = Live.request && Live.request.call_timeout;
  for (const [id, info] of Live.nodes) {
    if (info.status !== "running" || info.start === null) continue;
    const note = `… ${fmtSeconds(serverNow - info.start)}${limit ? ` / ${limit} s` : ""}`;
    if (Live.handle) Live.handle.setStatus(id, "running", note);
  }
}

function renderResult(outcome) {
  const usage = outcome.usage || {};
  const chips = [el("span", { class: `chip status-${outcome.status}`, id: "outcome-status" }, outcome.status)];
  if (outcome.match === true) chips.push(el("span", { class: "chip match", id: "match" }, "match"));
  if (outcome.match === false) chips.push(el("span", { class: "chip mismatch", id: "match" }, "mismatch"));
  const expected = outcome.expected == null ? null : (Array.isArray(outcome.expected) ? outcome.expected.join(", ") : outcome.expected);
  const byModel = Object.entries(usage.by_model || {}).map(([model, u]) =>
    el("tr", {}, el("td", {}, model), el("td", {}, u.calls ?? ""), el("td", {}, u.input_tokens ?? ""), el("td", {}, u.output_tokens ?? ""), el("td", {}, (u.cost_usd ?? 0).toFixed(4))));
  put($("result"), 
    el("div", { class: "row" }, ...chips),
    outcome.answer != null ? el("div", {}, el("h4", {}, "Final answer"), pre(outcome.answer, "answer")) : null,
    expected != null ? el("p", {}, "Expected: ", el("code", {}, expected)) : null,
    outcome.grade_error ? el("p", { class: "muted" }, outcome.grade_error) : null,
    outcome.error ? el("p", { class: outcome.status === "interrupted" ? "muted" : "error" }, outcome.error) : null,
    el("table", { class: "usage" },
      el("tr", {}, ...["calls (orch. / sub)", "tokens in / out", "cost $", "wall s"].map((h) => el("th", {}, h))),
      el("tr", {}, el("td", {}, `${usage.orchestrator_calls ?? 0} / ${usage.subagent_calls ?? 0}`),
        el("td", {}, `${usage.input_tokens ?? 0} / ${usage.output_tokens ?? 0}`),
        el("td", {}, (usage.cost_usd ?? 0).toFixed(4)), el("td", {}, (usage.wall_s ?? 0).toFixed(2)))),
    byModel.length ? el("table", { class: "usage" }, el("tr", {}, ...["model", "calls", "in", "out", "cost $"].map((h) => el("th", {}, h))), ...byModel) : null,
    outcome.orchestration ? el("details", {}, el("summary", {}, "Orchestration text"), pre(outcome.orchestration)) : null);
}

function showNode(id) {
  Live.selected = id;
  const spec = (Live.graph && Live.graph.nodes.find((n) => n.id === id)) || {};
  const info = node(id);
  const result = info.result || {};
  const took = info.start !== null && info.end !== null ? fmtSeconds(info.end - info.start) : info.status;
  put($("node-detail"), 
    el("h3", {}, `${id} `, el("span", { class: `chip status-${info.status}` }, info.status)),
    el("p", {}, el("b", {}, spec.agent || ""), spec.description ? ` — ${spec.description}` : ""),
    el("h4", {}, "Sub-task"), pre(spec.input || "(the question)"),
    Object.keys(spec.params || {}).length ? pre(JSON.stringify(spec.params, null, 2)) : null,
    el("p", { class: "muted" }, `time: ${took} · calls: ${info.calls.length} · tokens: ${result.usage ? (result.usage.input_tokens + result.usage.output_tokens) : info.calls.reduce((a, c) => a + (c.tokens || 0), 0)}`),
    result.thinking ? el("div", {}, el("h4", {}, "Thinking"), pre(result.thinking)) : null,
    (result.answer ?? info.answer) != null ? el("div", {}, el("h4", {}, "Answer"), pre(result.answer ?? info.answer, "answer")) : null,
    ...info.calls.map((call, i) => el("details", { class: "call" },
      el("summary", {}, `call ${i + 1}: ${call.tokens} tokens, ${fmtSeconds(call.seconds)}${call.error ? " — " + call.error : ""}`),
      el("h4", {}, "Prompt"), pre(call.prompt), el("h4", {}, "Reply"), pre(call.reply))));
}
