// The console's shell: which view the address names (`#/` the runs, `#/runs/ID` one run),
// the login the service's token asks for, the run list with its start box, and switching
// views (each view hands back how to stop its timers and streams).

import { ApiError, call, get, setToken, token } from "./api.js";
import { age, badge, cost, h, tokens } from "./dom.js";
import { showRun } from "./run.js";

const main = document.getElementById("main");
const logout = document.getElementById("logout");
let stop = () => {};

function show(...children) {
  main.replaceChildren(...children);
}

/** The login form; `why` says what went wrong with the last token, if anything. */
function login(why) {
  stop();
  stop = () => {};
  logout.hidden = true;
  const input = h("input", { id: "token", type: "password", autocomplete: "current-password", placeholder: "API token", required: true });
  const error = h("p", { class: "error", role: "alert" }, why || "");
  const form = h(
    "form",
    {
      id: "login",
      class: "card narrow",
      onsubmit: async (e) => {
        e.preventDefault();
        setToken(input.value.trim());
        try {
          await get("/v1/flows");
          route();
        } catch (err) {
          setToken("");
          error.textContent = err.status === 401 ? "The service does not accept that token." : err.message;
        }
      },
    },
    h("h1", {}, "Log in"),
    h("p", { class: "muted" }, "This service asks for one of its API tokens ([server] api_tokens). The console keeps it in this tab only (sessionStorage) and sends it with each request."),
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { id: "login-button", type: "submit" }, "Log in"),
    error,
  );
  show(form);
  input.focus();
}

/** A view failed: a refused token goes back to the login, anything else is said. */
function failed(err) {
  if (err instanceof ApiError && err.status === 401) login(token() ? "The token was refused; log in again." : "");
  else show(h("p", { class: "error", role: "alert" }, err.message));
}

function runsView() {
  const task = h("textarea", { id: "task", rows: "3", placeholder: "What should the agents do?", required: true });
  const mode = h("select", { id: "mode", "aria-label": "Mode" }, h("option", { value: "plan" }, "Plan, then run the steps"), h("option", { value: "single" }, "One agent, no plan"));
  const error = h("p", { class: "error", role: "alert" });
  const start = h(
    "form",
    {
      id: "start",
      class: "card",
      onsubmit: async (e) => {
        e.preventDefault();
        error.textContent = "";
        try {
          const made = await call("POST", "/v1/flows", { task: task.value, mode: mode.value });
          location.hash = `#/runs/${encodeURIComponent(made.id)}`;
        } catch (err) {
          if (err.status === 401) failed(err);
          else error.textContent = err.message;
        }
      },
    },
    h("label", { for: "task" }, "New run"),
    task,
    h("div", { class: "row" }, mode, h("button", { id: "start-button", type: "submit" }, "Start run")),
    error,
  );
  const body = h("tbody");
  const empty = h("p", { class: "muted" }, "No runs yet.");
  const table = h(
    "table",
    { id: "runs", class: "runs" },
    h("thead", {}, h("tr", {}, ["Status", "Task", "Started", "Tokens", "Cost"].map((t) => h("th", { scope: "col" }, t)))),
    body,
  );
  show(start, h("section", {}, h("h2", {}, "Runs"), table, empty));
  let timer;
  let left = false;
  const refresh = async () => {
    try {
      const { flows } = await get("/v1/flows");
      if (left) return;
      empty.hidden = flows.length > 0;
      body.replaceChildren(
        ...flows.map((f) => {
          const open = () => (location.hash = `#/runs/${encodeURIComponent(f.id)}`);
          return h(
            "tr",
            { class: "run", data: { id: f.id }, tabindex: "0", onclick: open, onkeydown: (e) => e.key === "Enter" && open() },
            h("td", { "data-label": "Status" }, badge(f.status)),
            h("td", { "data-label": "Task", class: "task" }, h("a", { href: `#/runs/${encodeURIComponent(f.id)}` }, f.task || f.id)),
            h("td", { "data-label": "Started" }, f.created_ms ? age(f.created_ms) : ""),
            h("td", { "data-label": "Tokens", class: "num" }, tokens(f.usage)),
            h("td", { "data-label": "Cost", class: "num" }, cost(f.usage)),
          );
        }),
      );
      timer = setTimeout(refresh, 2000);
    } catch (err) {
      if (!left) failed(err);
    }
  };
  refresh();
  return () => {
    left = true;
    clearTimeout(timer);
  };
}

function route() {
  stop();
  logout.hidden = !token();
  const m = /^#\/runs\/(.+)$/.exec(location.hash);
  let id = null;
  try {
    id = m && decodeURIComponent(m[1]);
  } catch (_) {
    // A mangled address: the run list instead.
  }
  stop = id ? showRun(main, id, failed) : runsView();
}

logout.addEventListener("click", () => {
  setToken("");
  login();
});
window.addEventListener("hashchange", route);
route();
