// The service's API as the console uses it: the bearer token (kept in this tab's
// sessionStorage only, sent as `Authorization: Bearer` on every /v1 call), JSON requests
// with the service's own error messages, workspace files as blob URLs, and a flow's event
// stream read with fetch (EventSource cannot send the token), resumed with Last-Event-ID.

const TOKEN_KEY = "manus-rt.token";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const h = { ...extra };
  const t = token();
  if (t) h["Authorization"] = `Bearer ${t}`;
  return h;
}

async function failure(res) {
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (_) {
    // Not JSON: the status line says what there is to say.
  }
  return new ApiError(res.status, message);
}

/** A JSON call: `method` on `path` with `body` (sent as JSON when given). */
export async function call(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await failure(res);
  return res.status === 204 ? null : res.json();
}

export const get = (path) => call("GET", path);

/**
 * A workspace file of flow `id` as an object URL (images need the token too); the caller
 * revokes it when its view goes.
 */
export async function fileUrl(id, path, signal) {
  const rel = path.split("/").map(encodeURIComponent).join("/");
  const res = await fetch(`/v1/flows/${encodeURIComponent(id)}/files/${rel}`, { headers: headers(), signal });
  if (!res.ok) throw await failure(res);
  return URL.createObjectURL(await res.blob());
}

/**
 * Follow flow `id`'s events: `onEvent(event)` for each, in order, from the first. A dropped
 * connection is resumed after the last event seen (Last-Event-ID); the stream ends after
 * `flow_finished` or when `signal` aborts. `onState(text)` hears of connection trouble.
 */
export async function follow(id, onEvent, signal, onState = () => {}) {
  let last = 0;
  let finished = false;
  while (!finished && !signal.aborted) {
    try {
      const res = await fetch(`/v1/flows/${encodeURIComponent(id)}/events`, {
        headers: headers({ Accept: "text/event-stream", "Last-Event-ID": String(last) }),
        signal,
      });
      if (!res.ok) throw await failure(res);
      onState("");
      for await (const msg of messages(res.body)) {
        if (msg.id) last = Number(msg.id);
        let event;
        try {
          event = JSON.parse(msg.data);
        } catch (_) {
          continue;
        }
        onEvent(event);
        if (event.event === "flow_finished") finished = true;
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && e.status !== 503) throw e;
      onState(`event stream interrupted (${e.message}); reconnecting`);
    }
    if (!finished && !signal.aborted) await new Promise((r) => setTimeout(r, 1000));
  }
}

/** The messages of a `text/event-stream` body: `{id, event, data}` each (comments skipped). */
async function* messages(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let msg = { id: "", event: "", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (msg.data.length) yield { id: msg.id, event: msg.event, data: msg.data.join("\n") };
        msg = { id: msg.id, event: "", data: [] };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "data") msg.data.push(val);
      else if (field === "id") msg.id = val;
      else if (field === "event") msg.event = val;
    }
  }
}
