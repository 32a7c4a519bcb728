// One run's page: its status and usage, the conversation it is a turn of, the plan as a
// graph with live statuses, what waits for a person (questions, approvals) with the
// buttons to answer, each step's messages as the model writes them and its tool calls with
// their results, the images the agents made, the outcome, and once it has ended a box for
// a follow-up (the conversation's next turn) and, on each step, "Rerun from here", which
// forks the run there (the steps before it replay their recorded answers) and opens the
// fork. The event stream drives the step logs; the flow's own JSON
// (GET /v1/flows/ID) is the truth for statuses, usage and what is pending, re-read after
// events and every few seconds while the run goes on.

import { call, fileUrl, follow, get } from "./api.js";
import { badge, cost, duration, folded, h, tokens } from "./dom.js";
import { drawPlan, splitTag } from "./graph.js";

const IMAGE = /(?:^|[\s`'"(\[=])((?:[\w.-]+\/)*[\w.-]+\.(?:png|jpe?g|gif|webp|svg))(?=$|[\s`'")\],:;.])/gi;

/** Workspace-relative image paths named in `text` (absolute ones name no workspace file). */
function imagesIn(text) {
  return [...text.matchAll(IMAGE)].map((m) => m[1]).filter((p) => !p.startsWith("/") && !p.split("/").includes(".."));
}

function pretty(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch (_) {
    return args;
  }
}

/** Show run `id` in `main`; `failed(err)` when the service refuses. Returns how to stop. */
export function showRun(main, id, failed) {
  const ended = new AbortController();
  const status = h("span", { id: "run-status" });
  const usage = h("span", { id: "usage", class: "muted" });
  const cancel = h("button", { id: "cancel", class: "danger", type: "button", hidden: true, onclick: () => doCancel() });
  cancel.textContent = "Cancel run";
  const title = h("h1", { class: "task" });
  const notice = h("p", { id: "notice", class: "muted", role: "status" });
  const pending = h("section", { id: "pending", "aria-live": "polite" });
  const graph = h("div", { id: "graph" });
  const gallery = h("div", { id: "gallery", class: "gallery" });
  const galleryBox = h("section", { hidden: true }, h("h2", {}, "Images"), gallery);
  const steps = h("div", { id: "steps" });
  const result = h("section", { id: "result", hidden: true });
  const turns = h("nav", { id: "turns", class: "card", hidden: true, "aria-label": "Conversation" });
  const followUp = followUpForm();
  main.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← Runs")),
    h("header", { class: "run-head card" }, title, h("div", { class: "row" }, status, usage, h("span", { class: "grow" }), cancel), notice),
    turns,
    pending,
    result,
    followUp,
    galleryBox,
    h("div", { class: "columns" }, h("section", { class: "plan card" }, h("h2", {}, "Plan"), graph), h("section", { class: "log" }, h("h2", {}, "Steps"), steps)),
  );

  // ── Truth from the flow's JSON ──────────────────────────────────────────────────────
  let flow = null;
  let shownPending = "";
  let refreshTimer;
  let queued = false;

  async function refresh() {
    clearTimeout(refreshTimer);
    try {
      flow = await get(`/v1/flows/${encodeURIComponent(id)}`);
    } catch (err) {
      if (ended.signal.aborted) return;
      // A refused token or an unknown run ends the page; anything else is said and retried.
      if (err.status === 401 || err.status === 404 || !flow) failed(err);
      else {
        notice.textContent = `${err.message}; trying again`;
        refreshTimer = setTimeout(refresh, 3000);
      }
      return;
    }
    if (ended.signal.aborted) return;
    title.textContent = flow.task || id;
    status.replaceChildren(badge(flow.status));
    const u = flow.usage || {};
    usage.textContent = `${tokens(u)} tokens · ${u.calls || 0} model calls · ${cost(u)}${flow.elapsed_ms ? ` · ${duration(flow.elapsed_ms)}` : ""}`;
    const running = !flow.finished;
    cancel.hidden = !running;
    if (flow.plan) graph.replaceChildren(drawPlan(flow.plan, (i) => stepCard(i).el.scrollIntoView({ behavior: "smooth" })));
    for (const [i, s] of (flow.plan?.steps || []).entries()) if (cards.has(i)) cards.get(i).head(s);
    showPending(flow.questions || [], flow.approvals || []);
    if (!running) showResult();
    else refreshTimer = setTimeout(refresh, 3000);
    followUp.hidden = running;
    // The thread is read again only when this turn's status changes (its own entry's).
    if (flow.status !== turnsRead) {
      turnsRead = flow.status;
      showTurns();
    }
  }

  // ── The conversation: its turns, and the next one ──────────────────────────────────
  let shownTurns = "";
  let turnsRead = null;

  async function showTurns() {
    let thread;
    try {
      thread = await get(`/v1/threads/${encodeURIComponent(id)}`);
    } catch (_) {
      return; // No run store here: a run is a conversation of one turn.
    }
    const key = JSON.stringify(thread.turns.map((t) => [t.id, t.status]));
    if (ended.signal.aborted || key === shownTurns) return;
    shownTurns = key;
    turns.hidden = thread.turns.length < 2;
    turns.replaceChildren(
      h("h2", {}, "Conversation"),
      h(
        "ol",
        { class: "turns", start: 0 },
        ...thread.turns.map((t) =>
          h(
            "li",
            { data: { turn: t.turn }, class: t.id === id ? "current" : undefined },
            badge(t.status),
            " ",
            t.id === id ? h("strong", {}, t.task) : h("a", { href: `#/runs/${encodeURIComponent(t.id)}` }, t.task),
          ),
        ),
      ),
    );
  }

  function followUpForm() {
    const text = h("textarea", { id: "follow-up-text", rows: 2, placeholder: "A follow-up: it sees this run and works in the same workspace", "aria-label": "Follow-up" });
    const error = h("p", { class: "error", role: "alert" });
    const send = async (e) => {
      e.preventDefault();
      error.textContent = "";
      if (!text.value.trim()) return;
      try {
        const made = await call("POST", `/v1/flows/${encodeURIComponent(id)}/follow-up`, { task: text.value });
        location.hash = `#/runs/${encodeURIComponent(made.id)}`;
      } catch (err) {
        error.textContent = err.message;
      }
    };
    return h(
      "form",
      { id: "follow-up", class: "card", hidden: true, onsubmit: send },
      h("h2", {}, "Follow up"),
      text,
      h("div", { class: "row" }, h("button", { type: "submit" }, "Send")),
      error,
    );
  }

  /** Re-read the flow soon (events come in bursts). */
  function soon() {
    if (queued) return;
    queued = true;
    setTimeout(() => {
      queued = false;
      if (!ended.signal.aborted) refresh();
    }, 250);
  }

  function showResult() {
    if (!flow || flow.reason === undefined) return;
    result.hidden = false;
    result.className = `card result ${flow.status}`;
    result.replaceChildren(h("h2", {}, "Outcome"), h("p", {}, badge(flow.status), " ", flow.reason || ""), flow.result ? folded(flow.result, "text") : "");
  }

  // ── What waits for a person ────────────────────────────────────────────────────────
  function showPending(questions, approvals) {
    // Redrawn only when the set changes, so a half-typed answer is not wiped.
    const key = JSON.stringify([questions.map((q) => q.id), approvals.map((a) => a.id)]);
    if (key === shownPending) return;
    shownPending = key;
    pending.replaceChildren(...approvals.map(approvalCard), ...questions.map(questionCard));
  }

  function approvalCard(a) {
    const reason = h("input", { class: "reason", type: "text", placeholder: "Why not (the model reads it)", "aria-label": "Reason" });
    const error = h("p", { class: "error", role: "alert" });
    const decide = async (approve) => {
      error.textContent = "";
      try {
        const body = approve ? { approve } : { approve, reason: reason.value || "rejected in the console" };
        await call("POST", `/v1/flows/${encodeURIComponent(id)}/approvals/${a.id}`, body);
        card.classList.add("done");
        card.querySelectorAll("button,input").forEach((b) => (b.disabled = true));
        soon();
      } catch (err) {
        error.textContent = err.message;
      }
    };
    const where = a.step == null ? "the plan" : `step #${a.step}`;
    const card = h(
      "div",
      { class: "card approval", data: { approval: a.id } },
      h("h3", {}, `Approve ${a.tool}?`),
      h("p", {}, `${a.agent} (${where}) wants to call `, h("code", {}, a.tool), a.why ? ` — ${a.why}` : ""),
      folded(pretty(a.arguments || ""), "args"),
      h("div", { class: "row" }, h("button", { class: "approve", type: "button", onclick: () => decide(true) }, "Approve"), reason, h("button", { class: "reject danger", type: "button", onclick: () => decide(false) }, "Reject")),
      error,
    );
    return card;
  }

  function questionCard(q) {
    const answer = h("input", { class: "answer", type: "text", placeholder: "Your answer", "aria-label": "Answer" });
    const error = h("p", { class: "error", role: "alert" });
    const send = async (e) => {
      e.preventDefault();
      error.textContent = "";
      try {
        await call("POST", `/v1/flows/${encodeURIComponent(id)}/answers`, { question_id: q.id, text: answer.value });
        form.classList.add("done");
        form.querySelectorAll("button,input").forEach((b) => (b.disabled = true));
        soon();
      } catch (err) {
        error.textContent = err.message;
      }
    };
    const form = h(
      "form",
      { class: "card question", data: { question: q.id }, onsubmit: send },
      h("h3", {}, `${q.agent} asks`),
      h("p", { class: "text" }, q.inquire),
      q.form ? folded(pretty(JSON.stringify(q.form)), "form", "the answer must meet this schema (answer with that JSON, or decline or cancel)") : null,
      h("div", { class: "row" }, answer, h("button", { type: "submit" }, "Answer")),
      error,
    );
    return form;
  }

  async function doCancel() {
    cancel.disabled = true;
    try {
      await call("DELETE", `/v1/flows/${encodeURIComponent(id)}`);
      notice.textContent = "Cancelling…";
      soon();
    } catch (err) {
      notice.textContent = err.message;
      cancel.disabled = false;
    }
  }

  /** Fork the run at step `i` and open the fork (or say why not). */
  async function doFork(e, i) {
    // A button in a step's summary must not fold the step.
    e.preventDefault();
    e.target.disabled = true;
    try {
      const made = await call("POST", `/v1/flows/${encodeURIComponent(id)}/fork`, { at_step: i });
      location.hash = `#/runs/${encodeURIComponent(made.id)}`;
    } catch (err) {
      notice.textContent = `Cannot rerun from step #${i}: ${err.message}`;
      e.target.disabled = false;
    }
  }

  // ── Step logs, from the event stream ───────────────────────────────────────────────
  const cards = new Map();

  function stepCard(i) {
    if (cards.has(i)) return cards.get(i);
    const label = h("span", { class: "label" });
    const state = h("span", { class: "state" });
    const log = h("div", { class: "entries" });
    const rerun = h("button", { class: "fork", type: "button", hidden: true, title: "A new run: the steps before this one replay their recorded answers, this one runs live", onclick: (e) => doFork(e, i) }, "Rerun from here");
    const el = h("details", { class: "card step", open: true, data: { step: i } }, h("summary", {}, h("b", {}, `#${i} `), label, " ", state, " ", rerun), log);
    const card = {
      el,
      log,
      typing: null,
      settled: null,
      calls: [],
      head(s) {
        const { tag, body } = splitTag(s.text);
        label.textContent = `${tag ? `[${tag}] ` : ""}${body}`;
        state.replaceChildren(badge(s.status));
        rerun.hidden = !flow?.finished || s.replaced_in != null;
      },
    };
    const s = flow?.plan?.steps?.[i];
    if (s) card.head(s);
    // In step order, whatever order they start in.
    const after = [...cards.keys()].filter((k) => k > i).sort((a, b) => a - b)[0];
    steps.insertBefore(el, after === undefined ? null : cards.get(after).el);
    cards.set(i, card);
    return card;
  }

  /** Step `i`'s streamed words stop growing (the call ended, or the attempt did). */
  function settle(i) {
    const card = cards.get(i);
    if (!card || !card.typing) return;
    card.typing.firstChild.classList.remove("typing");
    card.settled = card.typing;
    card.typing = null;
  }

  function entry(i, ...children) {
    const e = h("div", { class: "entry" }, ...children);
    stepCard(i).log.append(e);
    return e;
  }

  const seenImages = new Set();
  const urls = [];
  async function addImages(paths) {
    for (const p of paths) {
      if (seenImages.has(p)) continue;
      seenImages.add(p);
      galleryBox.hidden = false;
      const fig = h("figure", {}, h("figcaption", {}, p));
      gallery.append(fig);
      try {
        const url = await fileUrl(id, p, ended.signal);
        urls.push(url);
        fig.prepend(h("img", { src: url, alt: p, loading: "lazy" }));
      } catch (err) {
        fig.append(h("p", { class: "muted" }, `not shown: ${err.message}`));
      }
    }
  }

  function onEvent(e) {
    const i = e.step;
    switch (e.event) {
      case "flow_started":
        title.textContent = e.task;
        break;
      case "plan_created":
      case "plan_revised":
      case "resumed":
        if (e.event === "plan_revised") notice.textContent = `Plan revised (revision ${e.plan.revision}): ${e.reason}`;
        soon();
        break;
      case "forked":
        notice.replaceChildren(
          "A rerun of ",
          h("a", { href: `#/runs/${encodeURIComponent(e.from)}` }, "run " + e.from),
          ` from step #${e.at_step}: the steps before it replay its recorded answers (no model call), then it runs live.`,
        );
        soon();
        break;
      case "step_replayed": {
        const same = e.differed?.length ? `${e.differed.length} tool result(s) differ from the record:` : "every tool result as recorded";
        const diffs = (e.differed || []).map((d) => folded(`round ${d.round}, ${d.tool}\nrecorded: ${d.recorded}\nnow: ${d.now}`, "diff", `${d.tool} (round ${d.round})`));
        entry(i, h("div", { class: "replayed muted" }, h("p", {}, `${e.answers} recorded answer(s) replayed, no model call; ${same}`), ...diffs));
        break;
      }
      case "step_started": {
        // A new attempt: what the last one left half-said or unanswered stays as it was.
        settle(i);
        const card = stepCard(i);
        card.settled = null;
        card.calls = [];
        entry(i, h("p", { class: "muted" }, `${e.agent} started${e.attempt > 1 ? ` (attempt ${e.attempt})` : ""}`));
        soon();
        break;
      }
      case "text_delta": {
        const card = stepCard(i);
        if (!card.typing) card.typing = entry(i, h("p", { class: "msg typing" }));
        card.typing.firstChild.append(e.text);
        break;
      }
      case "llm_called":
        // The answer is whole: its streamed words stop growing. A `thought` with the text
        // as kept replaces them; without one (the words held a tool call the runtime read
        // out of them), they stay as the model wrote them.
        if (i != null) settle(i);
        break;
      case "thought": {
        const card = stepCard(i);
        for (const old of [card.typing, card.settled]) if (old) old.remove();
        card.typing = card.settled = null;
        if (e.text.trim()) entry(i, h("p", { class: "msg" }, e.text));
        break;
      }
      case "tool_called": {
        stepCard(i).settled = null;
        const box = entry(i, h("div", { class: "tool" }, h("div", { class: "call" }, "→ ", h("code", {}, e.tool)), folded(pretty(e.arguments), "args", "arguments")));
        stepCard(i).calls.push({ tool: e.tool, box, args: e.arguments });
        break;
      }
      case "tool_finished": {
        const card = stepCard(i);
        const k = card.calls.findIndex((c) => c.tool === e.tool);
        const call = k >= 0 ? card.calls.splice(k, 1)[0] : { box: entry(i, h("div", { class: "tool" }, h("code", {}, e.tool))), args: "" };
        call.box.classList.add(e.ok ? "ok" : "error");
        call.box.append(folded(e.output, "output", `${e.ok ? "result" : "error"} (${e.output.length} chars)`));
        if (e.ok) addImages([...imagesIn(call.args), ...imagesIn(e.output)]);
        break;
      }
      case "compacted":
        entry(i, h("p", { class: "muted" }, `memory compacted: ${e.tokens_before} → ${e.tokens_after} tokens (${e.pruned} outputs pruned, ${e.folded} messages summarised)`));
        break;
      case "tool_progress":
        if (i != null) entry(i, h("p", { class: "muted" }, `progress ${e.progress}${e.total != null ? ` of ${e.total}` : ""}${e.message ? `: ${e.message}` : ""}`));
        break;
      case "question":
        if (i != null) entry(i, h("p", { class: "muted" }, `asked: ${e.inquire}`));
        soon();
        break;
      case "approval_requested":
        if (i != null) entry(i, h("p", { class: "muted" }, `waits for approval of ${e.tool}: ${e.why}`));
        soon();
        break;
      case "approval_decided":
        if (i != null) entry(i, h("p", { class: "muted" }, `${e.decision.approve ? "approved" : "rejected"} by ${e.decision.by}${e.decision.reason ? `: ${e.decision.reason}` : ""}`));
        soon();
        break;
      case "step_blocked":
        entry(i, h("p", { class: "muted" }, e.notes));
        soon();
        break;
      case "step_finished":
        settle(i);
        stepCard(i).settled = null;
        entry(i, h("p", { class: `finish ${e.status}` }, badge(e.status), " ", e.summary));
        soon();
        break;
      case "flow_finished":
        soon();
        break;
      default:
        break;
    }
  }

  refresh();
  follow(id, onEvent, ended.signal, (text) => (notice.textContent = text)).catch((err) => {
    if (!ended.signal.aborted) failed(err);
  });
  return () => {
    ended.abort();
    clearTimeout(refreshTimer);
    urls.forEach((u) => URL.revokeObjectURL(u));
  };
}
