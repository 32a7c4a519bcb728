//! The web console in a real browser: headless Chromium, driven over WebDriver (fantoccini)
//! through a chromedriver of the test's own, uses `manus-rt serve`'s console as a person
//! would: logs in with the service's token, starts a run from the text box, watches a step's
//! words arrive, approves the call that waits, sees the flow complete, its plan graph and
//! the chart the agent drew; without tokens, answers an agent's question from its card and
//! cancels a run that works on; reruns a finished run from a step (a fork). Screenshots of the run list and a run page at desktop and phone
//! widths go to target/console-screenshots/ (and to `MANUS_CONSOLE_SCREENSHOTS`, which is
//! how docs/console/ is refreshed). The same console also follows a run of the suite's real
//! llama-server to its end.

use crate::support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::browser::{CHROMIUM_ARGS, Chromedriver};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, job, write_chart_fixtures};
use support::service::Service;

const TOKEN: &str = "console-s3cret";
const DESKTOP: (u32, u32) = (1280, 900);
const PHONE: (u32, u32) = (390, 844);

/// Headless Chromium on a chromedriver of its own, in a fresh profile; the driver (and every
/// browser it started) is stopped by PID when this is dropped.
struct Browser {
    client: Client,
    _driver: Chromedriver,
    _profile: Scratch,
}

impl Browser {
    async fn start() -> Browser {
        let driver = Chromedriver::start();
        let profile = Scratch::new("console-profile");
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
        args.push("--headless=new".into());
        args.push(format!("--window-size={},{}", DESKTOP.0, DESKTOP.1));
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({"browserName": "chrome", "goog:chromeOptions": {"args": args}});
        let Value::Object(caps) = caps else {
            unreachable!("an object literal")
        };
        let client = ClientBuilder::rustls()
            .expect("TLS for WebDriver")
            .capabilities(caps)
            .connect(&driver.url())
            .await
            .expect("a Chromium session");
        Browser {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    /// Run `js` (a function body that returns a value) until it returns something other
    /// than null, false, 0 or ""; that value. Past `secs`, fail with `what` and the page's
    /// text.
    async fn until(&self, what: &str, secs: u64, js: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self
                .client
                .execute(js, vec![])
                .await
                .expect("the script runs");
            let truthy = match &v {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let text = self
                    .client
                    .execute("return document.body.innerText", vec![])
                    .await
                    .unwrap_or_default();
                panic!("{what}: not within {secs}s. The page says:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn js(&self, js: &str) -> Value {
        self.client
            .execute(js, vec![])
            .await
            .expect("the script runs")
    }

    async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.expect(css);
        field.clear().await.expect("cleared");
        field.send_keys(text).await.expect("typed");
    }

    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .expect(css)
            .click()
            .await
            .expect("clicked");
    }

    /// Until the page has an element matching `css`.
    async fn shows(&self, what: &str, css: &str) {
        let js = format!("return document.querySelector('{css}') !== null");
        self.until(what, 30, &js).await;
    }

    /// Open the console at `base` and send `token` from its login form.
    async fn try_token(&self, base: &str, token: &str) {
        self.client.goto(&format!("{base}/")).await.expect("opened");
        self.shows("the login form", "#token").await;
        self.fill("#token", token).await;
        self.click("#login-button").await;
    }

    /// Log in with `token` on the console at `base`.
    async fn log_in(&self, base: &str, token: &str) {
        self.try_token(base, token).await;
        self.shows("the start box after login", "#task").await;
    }

    /// Until the open run has ended (its outcome shown): the status the page gives it.
    async fn run_end(&self, what: &str, secs: u64) -> Value {
        self.until(
            what,
            secs,
            "const r = document.querySelector('#result'); \
             return r && !r.hidden && document.querySelector('#run-status').textContent",
        )
        .await
    }

    /// Start `task` from the console's text box; the run's id, once its page is open.
    async fn start_run(&self, task: &str, mode: &str) -> String {
        self.fill("#task", task).await;
        self.js(&format!("document.querySelector('#mode').value = '{mode}'"))
            .await;
        self.click("#start-button").await;
        let hash = self
            .until(
                "the run's page",
                30,
                "return location.hash.startsWith('#/runs/') && location.hash.slice(7)",
            )
            .await;
        hash.as_str().unwrap().to_string()
    }

    /// A screenshot at `size` (the page laid out again at that width), written as `name`.
    async fn screenshot(&self, name: &str, size: (u32, u32)) {
        self.client
            .set_window_size(size.0, size.1)
            .await
            .expect("resized");
        // Laid out at the new width: nothing sticks out sideways (phone width included).
        let fits = self
            .until(
                "the new layout",
                10,
                &format!(
                    "return window.innerWidth <= {w} && [window.innerWidth, \
                     document.documentElement.scrollWidth]",
                    w = size.0
                ),
            )
            .await;
        assert!(
            fits[1].as_u64() <= fits[0].as_u64(),
            "{name}: the page is wider than the window ({fits}): it scrolls sideways"
        );
        let png = self.client.screenshot().await.expect("a screenshot");
        assert_eq!(&png[1..4], b"PNG", "{name} is a PNG");
        for dir in screenshot_dirs() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), &png).unwrap();
        }
    }
}

/// Where screenshots go: target/console-screenshots/, and `MANUS_CONSOLE_SCREENSHOTS` if set.
fn screenshot_dirs() -> Vec<PathBuf> {
    let mut dirs =
        vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots")];
    if let Some(extra) = std::env::var_os("MANUS_CONSOLE_SCREENSHOTS") {
        dirs.push(PathBuf::from(extra));
    }
    dirs
}

/// Every event of the finished flow `id`, from its SSE stream (which ends with the flow).
async fn finished_events(svc: &Service, id: &str) -> Vec<Value> {
    let r = svc
        .http
        .get(svc.url(&format!("/v1/flows/{id}/events")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(Duration::from_secs(30), r.text())
        .await
        .expect("the stream of a finished flow ends")
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect()
}

/// The step's opening words: long enough that the scripted model streams them for seconds
/// (three characters a chunk), so the console shows them growing.
const OPENING: &str = "I will clear the scratch folder first, so that the summary starts from a \
     clean workspace. The folder holds only files this run can make again, but deleting it \
     cannot be undone, so the command waits for a person to approve it before it runs. Then \
     the step reports what it removed.";

/// A three-step graph: two independent steps (one waits for approval, one draws a chart),
/// then a summary that needs both.
fn script(server: &ScriptedLlm) {
    server.push(Reply::tool(
        "planning",
        json!({"command": "create", "plan_id": "console", "title": "Console check", "steps": [
            {"text": "[MANUS] clear the scratch folder", "depends_on": []},
            {"text": "[DATA_ANALYSIS] chart revenue by product", "depends_on": []},
            {"text": "[MANUS] summarise the run", "depends_on": [0, 1]},
        ]}),
    ));
    server.push_for(
        &job(0),
        [
            Reply::tool(
                "bash",
                json!({"command": "mkdir -p scratch && rm -rf scratch && echo cleared"}),
            )
            .with_text(OPENING)
            .chunk_gap(40),
            done("The scratch folder is cleared."),
        ],
    );
    server.push_for(
        &job(1),
        [
            Reply::tool(
                "data_visualization",
                json!({"data_path": "data/products.csv", "chart_type": "bar", "x": "product",
                       "y": "revenue", "sort": "desc", "top_n": 5, "output": "png",
                       "title": "Revenue by product"}),
            ),
            done("Drew the revenue chart."),
        ],
    );
    server.push_for(&job(2), [done("Scratch cleared and the chart drawn.")]);
    server.push(Reply::text(
        "Done: the scratch folder is cleared and the revenue chart is drawn.",
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_logs_in_starts_a_run_approves_a_call_and_sees_the_chart() {
    let server = ScriptedLlm::start().await;
    script(&server);
    let dir = Scratch::new("console");
    write_chart_fixtures(&dir.workspace());
    let config = config_with(
        &server,
        &dir.workspace(),
        &[
            ("server.api_tokens", &format!("[\"{TOKEN}\"]")),
            (
                "approvals.tools.bash",
                r#"{ matches = "rm -rf", argument = "command" }"#,
            ),
        ],
    );
    let svc = Service::start(&dir, &config).await;
    let b = Browser::start().await;

    // A wrong token is refused, and said so; the right one lets the person in.
    b.try_token(&svc.base, "not-the-token").await;
    let refused = b
        .until(
            "the refusal",
            30,
            "return document.querySelector('#login .error').textContent",
        )
        .await;
    assert!(
        refused.as_str().unwrap().contains("does not accept"),
        "{refused}"
    );
    b.log_in(&svc.base, TOKEN).await;
    let id = b
        .start_run(
            "Clear the scratch folder and chart revenue by product.",
            "plan",
        )
        .await;

    // The step's words arrive while the model writes them: a part first, then the whole.
    let partial = b
        .until(
            "the first step's words as they stream",
            60,
            "const t = document.querySelector('.step[data-step=\"0\"] .typing'); \
             return t && t.textContent.length > 0 && t.textContent",
        )
        .await;
    let partial = partial.as_str().unwrap().to_string();
    assert!(
        OPENING.starts_with(&partial) && partial.len() < OPENING.len(),
        "not a part of the opening words: {partial:?}"
    );

    // The bash call waits for approval: its card names the tool and the command.
    let card = b
        .until(
            "the approval card",
            60,
            "const c = document.querySelector('.approval'); return c && c.innerText",
        )
        .await;
    let card = card.as_str().unwrap();
    assert!(
        card.contains("bash") && card.contains("rm -rf scratch"),
        "{card}"
    );
    let whole = b
        .until(
            "the first step's words, whole",
            30,
            "const m = document.querySelector('.step[data-step=\"0\"] .msg:not(.typing)'); \
             return m && m.textContent",
        )
        .await;
    assert_eq!(whole, json!(OPENING), "the streamed words, whole");
    b.screenshot("run-awaiting-approval-desktop.png", DESKTOP)
        .await;
    b.click(".approval button.approve").await;

    assert_eq!(b.run_end("the run's end", 90).await, json!("completed"));
    // The chart the DATA_ANALYSIS step drew, fetched with the token and shown.
    let chart = b
        .until(
            "the chart",
            30,
            "const i = document.querySelector('#gallery img'); \
             return i && i.complete && i.naturalWidth > 0 && [i.alt, i.naturalWidth]",
        )
        .await;
    assert!(chart[0].as_str().unwrap().ends_with(".png"), "{chart}");
    assert!(chart[1].as_u64().unwrap() >= 400, "{chart}");
    // The plan graph: three boxes, all completed; the summary needs both others.
    let graph = b
        .until(
            "the completed graph",
            30,
            "const n = [...document.querySelectorAll('#graph g.node')]; \
             return n.length === 3 && n.every(g => g.classList.contains('completed')) && \
             [n.length, document.querySelectorAll('#graph path.edge').length]",
        )
        .await;
    assert_eq!(graph, json!([3, 2]));
    let outcome = b
        .js("return document.querySelector('#result').innerText")
        .await;
    assert!(outcome.as_str().unwrap().contains("completed"), "{outcome}");

    // What the console showed is what the service says, and the decision was the token's.
    let (code, flow) = svc.get_with(&format!("/v1/flows/{id}"), TOKEN).await;
    assert_eq!(code, 200, "{flow}");
    assert_eq!(flow["status"], "completed");
    let events = finished_events(&svc, &id).await;
    let decided = events
        .iter()
        .find(|e| e["event"] == "approval_decided")
        .expect("an approval_decided event");
    assert_eq!(decided["decision"]["approve"], true);
    assert_eq!(
        decided["decision"]["by"],
        format!("token …{}", &TOKEN[TOKEN.len() - 4..])
    );

    b.screenshot("run-desktop.png", DESKTOP).await;
    b.screenshot("run-phone.png", PHONE).await;
    b.client.goto(&svc.url("/#/")).await.unwrap();
    let row = b
        .until(
            "the run in the list",
            30,
            &format!(
                "const r = document.querySelector('tr.run[data-id=\"{id}\"]'); return r && r.innerText"
            ),
        )
        .await;
    assert!(row.as_str().unwrap().contains("completed"), "{row}");
    b.screenshot("runs-phone.png", PHONE).await;
    b.screenshot("runs-desktop.png", DESKTOP).await;

    // Logging out forgets the token: the next view asks for it again.
    b.click("#logout").await;
    b.shows("the login form after logout", "#token").await;
    let kept = b.js("return sessionStorage.length").await;
    assert_eq!(kept, json!(0), "nothing kept after logout");
    b.client.clone().close().await.unwrap();
}

/// Without tokens the console needs no login; an agent's question is answered from its
/// card and the answer reaches the model; a run that works on is cancelled with its button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_and_a_run_cancelled_from_the_console() {
    let server = ScriptedLlm::start().await;
    server.push_for(
        "flow one",
        [
            Reply::tool(
                "ask_human",
                json!({"inquire": "Which colour should the chart be?"}),
            ),
            done("The chart will be teal."),
        ],
    );
    server.push_for(
        "flow two",
        [Reply::tool("bash", json!({"command": "sleep 60"}))],
    );
    let dir = Scratch::new("console-steer");
    let svc = Service::start(&dir, &config_with(&server, &dir.workspace(), &[])).await;
    let b = Browser::start().await;
    b.client.goto(&svc.url("/")).await.unwrap();
    b.shows("the start box, no login", "#task").await;
    let logout_hidden = b
        .js("return document.querySelector('#logout').hidden")
        .await;
    assert_eq!(logout_hidden, json!(true), "nothing to log out of");

    let one = b.start_run("flow one: ask which colour", "single").await;
    let asked = b
        .until(
            "the question card",
            60,
            "const q = document.querySelector('.question'); return q && q.innerText",
        )
        .await;
    assert!(
        asked
            .as_str()
            .unwrap()
            .contains("Which colour should the chart be?"),
        "{asked}"
    );
    b.fill(".question .answer", "teal").await;
    b.click(".question button[type=submit]").await;
    assert_eq!(
        b.run_end("the first run's end", 60).await,
        json!("completed")
    );
    let answered = server.tool_results().iter().any(|t| t.contains("teal"));
    assert!(
        answered,
        "the answer did not reach the model: {:?}",
        server.tool_results()
    );

    b.client.goto(&svc.url("/#/")).await.unwrap();
    b.shows("the start box", "#task").await;
    let two = b.start_run("flow two: work a long time", "single").await;
    assert_ne!(one, two);
    b.until(
        "the long call",
        60,
        "return [...document.querySelectorAll('.tool code')].some(c => c.textContent === 'bash')",
    )
    .await;
    b.until(
        "the cancel button",
        30,
        "const c = document.querySelector('#cancel'); return c && !c.hidden",
    )
    .await;
    b.click("#cancel").await;
    assert_eq!(
        b.run_end("the cancelled run's end", 60).await,
        json!("cancelled")
    );
    let (code, flow) = svc.get(&format!("/v1/flows/{two}")).await;
    assert_eq!((code, flow["status"].clone()), (200, json!("cancelled")));
    b.client.clone().close().await.unwrap();
}

/// "Rerun from here" on a step of a finished run forks it there: the console opens the
/// fork, whose step before replays its recorded answer (no model call; the page says so)
/// and whose step runs live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_rerun_from_a_step_in_the_console() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(
            "planning",
            json!({"command": "create", "plan_id": "rerun", "title": "Rerun check",
                   "steps": ["[MANUS] write a.txt", "[MANUS] write b.txt"]}),
        ),
        Reply::tool("bash", json!({"command": "echo one > a.txt"})),
        done("a.txt written"),
        Reply::tool("bash", json!({"command": "echo two > b.txt"})),
        done("b.txt written"),
        Reply::text("Both files written."),
    ]);
    let dir = Scratch::new("console-rerun");
    let svc = Service::start(&dir, &config_with(&server, &dir.workspace(), &[])).await;
    let b = Browser::start().await;
    b.client.goto(&svc.url("/")).await.unwrap();
    b.shows("the start box", "#task").await;
    let first = b.start_run("write two files", "plan").await;
    assert_eq!(b.run_end("the run's end", 60).await, json!("completed"));
    let before = server.request_count();

    server.push_all([
        Reply::tool("bash", json!({"command": "echo two-again > b.txt"})),
        done("b.txt written again"),
        Reply::text("Both files written, the second again."),
    ]);
    b.until(
        "the rerun button of step 1",
        30,
        "const f = document.querySelector('.step[data-step=\"1\"] button.fork'); return f && !f.hidden",
    )
    .await;
    b.click(".step[data-step=\"1\"] button.fork").await;
    let fork = b
        .until(
            "the fork's page",
            30,
            &format!("const h = location.hash.slice(7); return h !== '{first}' && h !== '' && h"),
        )
        .await;
    let fork = fork.as_str().unwrap().to_string();
    assert_eq!(b.run_end("the fork's end", 60).await, json!("completed"));
    let replayed = b
        .until(
            "the replay's report on step 0",
            30,
            "const r = document.querySelector('.step[data-step=\"0\"] .replayed'); return r && r.innerText",
        )
        .await;
    assert!(
        replayed.as_str().unwrap().contains(
            "2 recorded answer(s) replayed, no model call; every tool result as recorded"
        ),
        "{replayed}"
    );
    let notice = b
        .js("return document.querySelector('#notice').innerText")
        .await;
    assert!(
        notice
            .as_str()
            .unwrap()
            .contains(&format!("A rerun of run {first} from step #1")),
        "{notice}"
    );
    let steps: Vec<Option<usize>> = server.requests()[before..]
        .iter()
        .map(|r| r.step())
        .collect();
    assert_eq!(steps, [Some(1), Some(1), None], "no model call for step 0");
    let forked = dir.path().join("workspace-forks").join(&fork);
    assert_eq!(
        std::fs::read_to_string(forked.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(forked.join("b.txt")).unwrap(),
        "two-again\n"
    );
    b.client.clone().close().await.unwrap();
}

/// The console against the suite's real llama-server: a run started from the text box is
/// followed to its end, and the console's status is the service's (a tiny model may well
/// fail the task; the console must say so, not hang or claim success).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_follows_a_real_models_run_to_its_end() {
    let Some(url) = support::llama::url() else {
        return;
    };
    let dir = Scratch::new("console-llama");
    let config = format!(
        "{}\n[runtime]\nworkspace = \"{}\"\n[server]\napi_tokens = [\"{TOKEN}\"]\n",
        support::llama::config_text(&url, "", ""),
        dir.workspace().display()
    );
    let svc = Service::start(&dir, &config).await;
    let b = Browser::start().await;
    b.log_in(&svc.base, TOKEN).await;
    let id = b
        .start_run(
            "Write the word hello into a file named hello.txt.",
            "single",
        )
        .await;
    let shown = b.run_end("the run's end", 300).await;
    let (code, flow) = svc.get_with(&format!("/v1/flows/{id}"), TOKEN).await;
    assert_eq!(code, 200, "{flow}");
    assert_eq!(
        shown.as_str().unwrap().replace(' ', "_"),
        flow["status"].as_str().unwrap(),
        "the console shows the service's status"
    );
    assert!(flow["usage"]["calls"].as_u64().unwrap() >= 1, "{flow}");
    let usage = b
        .js("return document.querySelector('#usage').textContent")
        .await;
    assert!(usage.as_str().unwrap().contains("model calls"), "{usage}");
    // The model's turn reached the step log.
    let entries = b
        .js("return document.querySelectorAll('.step .entry').length")
        .await;
    assert!(entries.as_u64().unwrap() >= 1, "no step entries shown");
    b.screenshot("run-llama-desktop.png", DESKTOP).await;
    b.client.clone().close().await.unwrap();
}

/// A conversation in the console: under a finished run, the follow-up box starts the next
/// turn, whose page lists the thread's turns; the follow-up's model requests show the first
/// turn's answer, and it edits the file the first turn wrote.
#[tokio::test(flavor = "multi_thread")]
async fn a_follow_up_from_the_console_continues_the_conversation() {
    let server = ScriptedLlm::start().await;
    let edit = |args: Value| Reply::tool("str_replace_editor", args);
    server.push_all([
        support::scenario::plan_reply(&["[MANUS] Write the note"]),
        edit(json!({"command": "create", "path": "note.txt", "file_text": "tide: low\n"})),
        done("note.txt says low."),
        Reply::text("note.txt says the tide is low."),
        support::scenario::plan_reply(&["[MANUS] Change the note"]),
        edit(json!({"command": "str_replace", "path": "note.txt", "old_str": "low", "new_str": "high"})),
        done("note.txt says high."),
        Reply::text("note.txt now says the tide is high."),
    ]);
    let dir = Scratch::new("console-thread");
    let svc = Service::start(&dir, &config_with(&server, &dir.workspace(), &[])).await;
    let b = Browser::start().await;
    b.client.goto(&svc.url("/")).await.unwrap();
    b.shows("the start box, no login", "#task").await;
    let first = b.start_run("Write note.txt about the tide", "plan").await;
    assert_eq!(
        b.run_end("the first turn's end", 60).await,
        json!("completed")
    );
    b.until(
        "the follow-up box",
        30,
        "const f = document.querySelector('#follow-up'); return f && !f.hidden",
    )
    .await;
    b.fill("#follow-up-text", "Now say the tide is high").await;
    b.click("#follow-up button[type=submit]").await;
    let second = b
        .until(
            "the follow-up's page",
            30,
            &format!(
                "return location.hash.startsWith('#/runs/') && location.hash.slice(7) !== '{first}' \
                 && location.hash.slice(7)"
            ),
        )
        .await;
    assert_eq!(
        b.run_end("the follow-up's end", 60).await,
        json!("completed")
    );
    let turns = b
        .until(
            "the conversation's turns",
            30,
            "const t = [...document.querySelectorAll('#turns li')]; \
             return t.length === 2 && t.map(li => li.textContent)",
        )
        .await;
    assert!(
        turns[0]
            .as_str()
            .unwrap()
            .contains("Write note.txt about the tide")
            && turns[1]
                .as_str()
                .unwrap()
                .contains("Now say the tide is high"),
        "{turns}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("note.txt")).unwrap(),
        "tide: high\n"
    );
    let (code, thread) = svc
        .get(&format!("/v1/threads/{}", second.as_str().unwrap()))
        .await;
    assert_eq!((code, thread["id"].clone()), (200, json!(first)));
    // The follow-up's planning and step requests (the summary, which has no tools, reports
    // on this turn alone).
    let follow_up: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| !r.tool_names().is_empty())
        .map(|r| r.first_user_text())
        .filter(|t| t.contains("Now say the tide is high"))
        .collect();
    assert_eq!(follow_up.len(), 3, "{follow_up:#?}");
    for t in &follow_up {
        assert!(
            t.contains("Answer given: note.txt says the tide is low."),
            "{t}"
        );
    }
    b.client.clone().close().await.unwrap();
}
