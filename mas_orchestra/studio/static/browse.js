// Browse view: run folders, a filtered and paged table read from the server's index, one sample at a time,
// and for training folders the reward curve and agent-kind shares per step.
"use strict";

const Browse = { folders: [], folder: null, offset: 0, limit: 50, total: 0, summary: null };

async function browseInit() {
  Browse.folders = await api("/api/folders");
  put($("folders"), ...(Browse.folders.length ? Browse.folders.map((f) => el("li", {},
    el("a", { href: `#browse/${f.folder}`, "data-folder": f.folder }, f.name),
    el("span", { class: "chip" }, f.kind), el("span", { class: "muted" }, ` ${f.rows} rows`)))
    : [el("li", { class: "muted" }, "No folders: start the studio with --runs DIR …")]));
  $("filters").addEventListener("input", () => { Browse.offset = 0; loadRows(); });
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  $("prev").addEventListener("click", () => { Browse.offset = Math.max(0, Browse.offset - Browse.limit); loadRows(); });
  $("next").addEventListener("click", () => {
    if (Browse.offset + Browse.limit < Browse.total) { Browse.offset += Browse.limit; loadRows(); }
  });
}

function fillSelect(id, values, label) {
  const select = $(id);
  const keep = select.value;
  put(select, el("option", { value: "" }, label), ...values.map((v) => el("option", { value: v }, v)));
  select.value = values.includes(keep) ? keep : "";
}

async function openFolder(number) {
  if (Browse.folder !== number) {
    Browse.folder = number;
    Browse.offset = 0;
    $("filters").reset();
    put($("sample-detail"), el("span", { class: "muted" }, "Click a row."));
  }
  const summary = await api(`/api/folders/${number}`);
  Browse.summary = summary;
  fillSelect("f-status", Object.keys(summary.statuses), "any status");
  fillSelect("f-kind", summary.kinds, "any agent kind");
  $("f-step").hidden = summary.kind !== "training";
  put($("folder-head"), 
    el("h3", {}, summary.name, " ", el("span", { class: "chip" }, summary.kind)),
    el("p", { class: "muted" }, `${summary.path} · ${summary.file || "no records file"} · ${summary.rows} records · ` +
      Object.entries(summary.statuses).map(([s, n]) => `${s} ${n}`).join(", ")),
    ...summary.warnings.map((w) => el("p", { class: "warning" }, w)));
  await loadRows();
  if (summary.has_curve) await drawCurve(number); else put($("curve"), );
}

async function loadRows() {
  if (Browse.folder === null) return;
  const params = new URLSearchParams();
  for (const [k, v] of new FormData($("filters"))) if (v !== "") params.set(k, v);
  params.set("offset", Browse.offset);
  params.set("limit", Browse.limit);
  const page = await api(`/api/folders/${Browse.folder}/rows?${params}`);
  Browse.total = page.total;
  const training = Browse.summary && Browse.summary.kind === "training";
  const heads = ["#", "id", ...(training ? ["step", "reward"] : []), "status", "correct", "agents", "kinds", "calls", "cost $", "question"];
  put($("rows").querySelector("thead"), el("tr", {}, ...heads.map((h) => el("th", {}, h))));
  put($("rows").querySelector("tbody"), ...page.rows.map((r) => el("tr", {
    "data-row": r.row, tabindex: 0, onclick: () => { location.hash = `#browse/${Browse.folder}/${r.row}`; },
  },
  el("td", {}, r.row), el("td", {}, r.id), ...(training ? [el("td", {}, r.step ?? ""), el("td", {}, r.reward == null ? "" : Number(r.reward).toFixed(2))] : []),
  el("td", {}, el("span", { class: `chip status-${r.status}` }, r.status)),
  el("td", {}, r.correct === null ? "" : (r.correct ? "✓" : "✗")), el("td", {}, r.agents ?? "—"),
  el("td", {}, r.kinds.join(", ")), el("td", {}, r.calls), el("td", {}, Number(r.cost).toFixed(4)),
  el("td", { class: "q" }, r.question))));
  const last = Math.min(Browse.offset + Browse.limit, page.total);
  $("page-info").textContent = page.total ? `${Browse.offset + 1}–${last} of ${page.total}` : "no matching rows";
}

async function openSample(folder, row) {
  const sample = await api(`/api/folders/${folder}/rows/${row}`);
  const record = sample.record;
  const graphBox = el("div", { class: "graph small" });
  const nodeBox = el("div", {});
  const results = sample.node_results || {};
  put($("sample-detail"), 
    el("h3", {}, `Row ${row}`, " ", el("span", { class: `chip status-${record.status}` }, record.status),
      record.correct === undefined ? null : el("span", { class: `chip ${record.correct ? "match" : "mismatch"}` }, record.correct ? "correct" : "wrong")),
    el("h4", {}, "Question"), pre(record.question),
    el("p", {}, "Answer: ", el("code", {}, String(record.answer ?? "—")), record.truth !== undefined ? [" · truth: ", el("code", {}, JSON.stringify(record.truth))] : null,
      record.reward !== undefined ? ` · reward ${record.reward}` : null),
    sample.warnings.length ? el("ul", { class: "problems", id: "sample-warnings" }, ...sample.warnings.map((w) => el("li", { class: "warning" }, w))) : null,
    el("h4", {}, "Diagram"), graphBox,
    nodeBox,
    el("details", { open: "" }, el("summary", {}, "Orchestration text"), pre(sample.orchestration || "(none)")),
    el("details", {}, el("summary", {}, "Record (JSON)"), pre(JSON.stringify(record, null, 2))));
  drawGraph(graphBox, sample.graph, (id) => {
    const spec = sample.graph.nodes.find((n) => n.id === id) || {};
    const result = results[id];
    put(nodeBox, el("h4", {}, `${id} (${spec.agent})`), pre(spec.input || "(the question)"),
      result ? pre(`${result.thinking ? "Thinking: " + result.thinking + "\n" : ""}Answer: ${result.answer}`, "answer")
        : el("p", { class: "muted" }, "This record keeps no per-node outputs."));
  });
  if (!sample.graph) graphBox.append(el("p", { class: "muted" }, "No valid plan in this record."));
}

// Mean depth of the rollouts' graphs per step: along edges, and along ${id} references (what carries results).
function drawStructure(box, allPoints, x, W, H, P) {
  const series = [["depth_mean", "depth (edges)", "structure-depth"], ["ref_depth_mean", "depth (references)", "structure-ref-depth"]];
  const points = allPoints.filter((p) => p.structure && p.structure.depth_mean != null);
  if (!points.length) return;
  const values = points.flatMap((p) => series.map(([key]) => p.structure[key]).filter((v) => v != null));
  const hi = Math.max(1, ...values);
  const y = (v) => H - P - (H - 2 * P) * (v / hi);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "curve", id: "structure-curve" });
  for (const [key, , cls] of series) {
    const line = points.filter((p) => p.structure[key] != null);
    svg("path", { d: line.map((p, i) => `${i ? "L" : "M"}${x(p.step)},${y(p.structure[key])}`).join(" "), class: cls }, chart);
  }
  svg("text", { x: 2, y: y(hi) + 4, class: "axis" }, chart).textContent = hi.toFixed(1);
  svg("text", { x: 2, y: y(0) + 4, class: "axis" }, chart).textContent = "0";
  box.append(el("h3", {}, "Graph depth per step (agents)"), chart,
    el("div", { class: "legend" }, ...series.map(([, label, cls]) => el("span", { class: `chip ${cls}` }, label))));
}

async function drawCurve(number) {
  const curve = await api(`/api/folders/${number}/curve`);
  const points = curve.points.filter((p) => p.reward !== null);
  const box = $("curve");
  put(box, el("h3", {}, "Reward per step"), el("p", { class: "muted" }, `from ${curve.source}`));
  if (!curve.points.length) { box.append(el("p", { class: "muted" }, "no steps yet")); return; }
  const W = 300, H = 120, P = 24;
  const steps = curve.points.map((p) => p.step);
  const x = (s) => P + (W - 2 * P) * (steps.length > 1 ? (s - steps[0]) / (steps[steps.length - 1] - steps[0]) : 0.5);
  const rewards = points.map((p) => p.reward);
  const lo = Math.min(0, ...rewards), hi = Math.max(1, ...rewards);
  const y = (r) => H - P - (H - 2 * P) * ((r - lo) / (hi - lo || 1));
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "curve", id: "reward-curve" });
  svg("path", { d: points.map((p, i) => `${i ? "L" : "M"}${x(p.step)},${y(p.reward)}`).join(" "), class: "reward-line" }, chart);
  for (const p of points) svg("circle", { cx: x(p.step), cy: y(p.reward), r: 2.5, class: "reward-dot" }, chart);
  svg("text", { x: P, y: H - 6, class: "axis" }, chart).textContent = `step ${steps[0]}`;
  svg("text", { x: W - P, y: H - 6, class: "axis", "text-anchor": "end" }, chart).textContent = `step ${steps[steps.length - 1]}`;
  svg("text", { x: 2, y: y(hi) + 4, class: "axis" }, chart).textContent = hi.toFixed(1);
  svg("text", { x: 2, y: y(lo) + 4, class: "axis" }, chart).textContent = lo.toFixed(1);
  box.append(chart);
  drawStructure(box, curve.points, x, W, H, P);
  box.append(el("h3", {}, "Agent-kind shares per step"));
  const kinds = [...new Set(curve.points.flatMap((p) => Object.keys(p.shares)))].sort();
  const bars = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "curve", id: "kind-shares" });
  const bw = (W - 2 * P) / curve.points.length;
  curve.points.forEach((p, i) => {
    let top = H - P;
    for (const kind of kinds) {
      const share = p.shares[kind] || 0;
      const h = (H - 2 * P) * share;
      top -= h;
      svg("rect", { x: P + i * bw, y: top, width: Math.max(1, bw - 1), height: h, fill: kindColour(kind), stroke: "#94a3b8", "stroke-width": 0.3 }, bars)
        .appendChild(svg("title", {})).textContent = `step ${p.step}: ${kind} ${(share * 100).toFixed(0)} %`;
    }
  });
  box.append(bars, el("div", { class: "legend" }, ...kinds.map((k) => el("span", { class: "chip", style: `background:${kindColour(k)}` }, k))));
}
