// The plan as a graph: one box per live step, coloured by status, an arrow from each step to
// the steps that need it, in rows by depth (a step sits one row below the deepest step it
// needs). A plan whose steps name no dependencies runs in order, and is drawn as a chain.
// Steps a revision replaced are listed under the graph, struck through.

const NS = "http://www.w3.org/2000/svg";
const BOX_W = 200;
const BOX_H = 56;
const GAP_X = 24;
const GAP_Y = 40;

function el(name, attrs = {}, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function short(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

/** The step's text without its `[AGENT]` tag, and the tag. */
export function splitTag(text) {
  const m = /^\s*\[([A-Za-z][A-Za-z0-9_-]*)\]\s*(.*)$/s.exec(text);
  return m ? { tag: m[1].toLowerCase(), body: m[2] } : { tag: "", body: text.trim() };
}

/** The steps each live step needs (indices of live steps). */
function needs(plan) {
  const live = (i) => plan.steps[i] && plan.steps[i].replaced_in == null;
  const graph = plan.steps.some((s) => s.replaced_in == null && s.depends_on);
  const order = plan.steps.map((s, i) => i).filter(live);
  const out = new Map();
  order.forEach((i, k) => {
    if (graph) out.set(i, (plan.steps[i].depends_on || []).filter(live));
    else out.set(i, k > 0 ? [order[k - 1]] : []);
  });
  return out;
}

/** An SVG drawing of `plan` (from the service's JSON), `onPick(step)` when a box is clicked. */
export function drawPlan(plan, onPick) {
  const wrap = document.createElement("div");
  wrap.className = "graph";
  if (!plan || !plan.steps || plan.steps.length === 0) {
    wrap.append(Object.assign(document.createElement("p"), { className: "muted", textContent: "No plan yet." }));
    return wrap;
  }
  const deps = needs(plan);
  const depth = new Map();
  const depthOf = (i, seen = new Set()) => {
    if (depth.has(i)) return depth.get(i);
    if (seen.has(i)) return 0; // a cycle the planner should never make: drawn flat
    seen.add(i);
    const d = Math.max(-1, ...deps.get(i).map((j) => depthOf(j, seen))) + 1;
    depth.set(i, d);
    return d;
  };
  const rows = [];
  for (const i of deps.keys()) {
    const d = depthOf(i);
    (rows[d] = rows[d] || []).push(i);
  }
  const widest = Math.max(...rows.map((r) => (r ? r.length : 0)));
  const width = widest * BOX_W + (widest - 1) * GAP_X + 2;
  const height = rows.length * BOX_H + (rows.length - 1) * GAP_Y + 2;
  const at = new Map();
  rows.forEach((row, d) => {
    if (!row) return;
    const rowWidth = row.length * BOX_W + (row.length - 1) * GAP_X;
    row.forEach((i, k) => {
      at.set(i, { x: 1 + (width - rowWidth) / 2 + k * (BOX_W + GAP_X), y: 1 + d * (BOX_H + GAP_Y) });
    });
  });
  // Drawn at its own size, narrower where the page is.
  const svg = el("svg", {
    viewBox: `0 0 ${width} ${height}`,
    width: String(width),
    role: "img",
    "aria-label": `Plan: ${plan.title || ""}`,
  });
  const defs = el("defs");
  const marker = el("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
    markerWidth: "8", markerHeight: "8", orient: "auto-start-reverse",
  });
  marker.append(el("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
  defs.append(marker);
  svg.append(defs);
  for (const [i, from] of deps) {
    const b = at.get(i);
    for (const j of from) {
      const a = at.get(j);
      if (!a) continue;
      const x1 = a.x + BOX_W / 2;
      const y1 = a.y + BOX_H;
      const x2 = b.x + BOX_W / 2;
      const y2 = b.y;
      const mid = (y1 + y2) / 2;
      svg.append(el("path", { d: `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2}`, class: "edge", "marker-end": "url(#arrow)" }));
    }
  }
  for (const [i, p] of at) {
    const s = plan.steps[i];
    const { tag, body } = splitTag(s.text);
    const g = el("g", { class: `node ${s.status}`, "data-step": String(i), tabindex: "0", transform: `translate(${p.x},${p.y})` });
    g.append(el("title", {}, `#${i} ${s.text}\n${s.status.replace(/_/g, " ")}`));
    g.append(el("rect", { width: BOX_W, height: BOX_H, rx: "8" }));
    g.append(el("text", { x: "10", y: "20", class: "tag" }, `#${i} ${tag || s.agent || ""}`));
    g.append(el("text", { x: "10", y: "40" }, short(body, 27)));
    g.append(el("circle", { cx: BOX_W - 14, cy: "14", r: "6", class: "dot" }));
    if (onPick) {
      g.addEventListener("click", () => onPick(i));
      g.addEventListener("keydown", (e) => e.key === "Enter" && onPick(i));
    }
    svg.append(g);
  }
  wrap.append(svg);
  const replaced = plan.steps.map((s, i) => [s, i]).filter(([s]) => s.replaced_in != null);
  if (replaced.length) {
    const list = document.createElement("ul");
    list.className = "replaced";
    for (const [s, i] of replaced) {
      const li = document.createElement("li");
      li.textContent = `#${i} ${s.text} — replaced in revision ${s.replaced_in}`;
      list.append(li);
    }
    wrap.append(list);
  }
  return wrap;
}
