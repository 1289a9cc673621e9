// Draws a plan (nodes + labelled edges from /api) as an SVG laid out by dagre (layered, top to bottom).
// Nodes are coloured by agent kind (fill) and by status (outline + badge): pending, running, done, failed.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const KIND_COLOURS = {
  cot: "#dbeafe", sc: "#dcfce7", reflexion: "#fef3c7", debate: "#fce7f3", search: "#e0e7ff",
};

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

function kindColour(kind) {
  return KIND_COLOURS[String(kind).toLowerCase()] || "#f1f5f9";
}

// graph: {nodes: [{id, agent, sink, ...}], edges: [{source, target, label}], direct_answer}
// Returns {setStatus(id, status, note), nodes: Map id -> <g>} ; onSelect(id) on click.
function drawGraph(container, graph, onSelect) {
  container.innerHTML = "";
  const handle = { nodes: new Map(), setStatus() {} };
  if (!graph) return handle;
  if (!graph.nodes.length) {
    const p = document.createElement("p");
    p.className = "direct";
    p.textContent = "Direct answer (no agents): " + (graph.direct_answer || "");
    container.appendChild(p);
    return handle;
  }
  const g = new dagre.graphlib.Graph({ multigraph: false });
  g.setGraph({ rankdir: "TB", nodesep: 30, ranksep: 50, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const node of graph.nodes) {
    const width = Math.max(140, 9 * node.id.length + 64, 8 * node.agent.length + 24);
    g.setNode(node.id, { width, height: 48 });
  }
  for (const edge of graph.edges) {
    g.setEdge(edge.source, edge.target, { label: edge.label, width: edge.label ? 8 * edge.label.length : 0, height: 14, labelpos: "c" });
  }
  dagre.layout(g);
  const size = g.graph();
  const root = svg("svg", { viewBox: `0 0 ${size.width} ${size.height}`, width: size.width, height: size.height,
    class: "plan", role: "img", "aria-label": "plan graph" }, container);
  const defs = svg("defs", {}, root);
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, defs);
  svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#64748b" }, marker);
  for (const e of g.edges()) {
    const data = g.edge(e);
    const d = data.points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
    svg("path", { d, class: "edge", "marker-end": "url(#arrow)", "data-edge": `${e.v}->${e.w}` }, root);
    if (data.label) {
      const t = svg("text", { x: data.x, y: data.y + 4, class: "edge-label", "text-anchor": "middle" }, root);
      t.textContent = data.label;
    }
  }
  for (const node of graph.nodes) {
    const pos = g.node(node.id);
    const group = svg("g", { class: "node status-pending", "data-node": node.id, "data-status": "pending",
      transform: `translate(${pos.x - pos.width / 2},${pos.y - pos.height / 2})`, tabindex: 0 }, root);
    svg("rect", { width: pos.width, height: pos.height, rx: 8, fill: kindColour(node.agent) }, group);
    const title = svg("text", { x: 10, y: 20, class: "node-id" }, group);
    title.textContent = node.id + (node.sink ? " ★" : "");
    const kind = svg("text", { x: 10, y: 38, class: "node-kind" }, group);
    kind.textContent = node.agent;
    const badge = svg("text", { x: pos.width - 8, y: 20, class: "node-badge", "text-anchor": "end" }, group);
    badge.textContent = "";
    group.addEventListener("click", () => onSelect && onSelect(node.id));
    group.addEventListener("keydown", (ev) => { if (ev.key === "Enter") onSelect && onSelect(node.id); });
    handle.nodes.set(node.id, group);
  }
  handle.setStatus = (id, status, note) => {
    const group = handle.nodes.get(id);
    if (!group) return;
    group.setAttribute("class", `node status-${status}`);
    group.setAttribute("data-status", status);
    group.querySelector(".node-badge").textContent = note || { running: "…", done: "✓", failed: "✗" }[status] || "";
  };
  return handle;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;  // CSSOM: allowed by the page's CSP, a style attribute is not
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return node;
}

// replaceChildren, skipping the null / undefined / false of optional parts.
function put(parent, ...children) {
  parent.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function pre(text, cls) {
  return el("pre", { class: cls || "text" }, text == null ? "" : String(text));
}

async function api(path, options) {
  const opts = Object.assign({ headers: { "Content-Type": "application/json" } }, options || {});
  const response = await fetch(path, opts);
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const error = new Error((body && body.error) || `${response.status} ${response.statusText}`);
    error.problems = (body && body.problems) || [];
    error.status = response.status;
    throw error;
  }
  return body;
}
