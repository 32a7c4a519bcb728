// Building the page: elements from data (text is always set as text, never parsed as HTML,
// so nothing a model or a tool wrote can run in the console), and the few formats the
// views share.

/**
 * `h("button", {class: "x", onclick: f, data: {id: 1}}, "text", child)`: an element with
 * attributes, listeners (`on…`), `data-` attributes and children (strings become text).
 */
export function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
    else if (v === true) e.setAttribute(k, "");
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

/** A status as a coloured label. */
export function badge(status) {
  return h("span", { class: `badge ${status}` }, status.replace(/_/g, " "));
}

export function tokens(usage) {
  const n = (usage?.prompt_tokens || 0) + (usage?.completion_tokens || 0);
  return n.toLocaleString("en-US");
}

export function cost(usage) {
  const c = usage?.cost || 0;
  return c === 0 ? "—" : `$${c < 0.01 ? c.toFixed(4) : c.toFixed(2)}`;
}

/** How long ago `ms` (Unix milliseconds) was, shortly. */
export function age(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function duration(ms) {
  const s = ms / 1000;
  return s < 60 ? `${s.toFixed(1)}s` : `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
}

/** Text shown whole when short, folded (first line as the label) when long. */
export function folded(text, cls, label) {
  const long = text.length > 600 || text.split("\n").length > 12;
  const pre = h("pre", { class: cls }, text);
  if (!long) return pre;
  return h("details", { class: "fold" }, h("summary", {}, label || `${text.split("\n")[0].slice(0, 80)} … (${text.length} chars)`), pre);
}
