//! `manus-rt serve` driven over HTTP by a real client (reqwest): submitting, streaming
//! events as SSE (and resuming them with Last-Event-ID), answering a question, cancelling,
//! bearer-token auth, malformed and oversized bodies, unknown ids, metrics, the OpenAPI
//! document, the web console's files and the workspace files route. The binary runs against
//! the scripted model on 127.0.0.1.

use crate::support;

use std::time::Duration;

use manus_rt::FlowEvent;
use manus_rt::engine::plan::StepStatus;
use manus_rt::store::{RunStatus, RunStore, StoreUrl};
use serde_json::{Value, json};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, example_script, observation, plan_reply};
use support::service::Service;

fn config(server: &ScriptedLlm, dir: &Scratch, extra: &[(&str, &str)]) -> String {
    config_with(server, &dir.workspace(), extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_is_submitted_streamed_and_read_back() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let dir = Scratch::new("serve-basic");
    let svc = Service::start(&dir, &config(&server, &dir, &[])).await;
    let (status, health) = svc.get("/healthz").await;
    assert_eq!((status, health), (200, json!({"status": "ok"})));

    let id = svc.submit(support::scenario::EXAMPLE_TASK).await;
    let events = svc.events(&id, None, |_, _| false).await;
    let kinds: Vec<&str> = events.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"flow_started"));
    assert_eq!(kinds.last(), Some(&"flow_finished"), "{kinds:?}");
    assert!(kinds.contains(&"plan_created") && kinds.contains(&"tool_finished"));
    let ids: Vec<u64> = events.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(ids, (1..=events.len() as u64).collect::<Vec<_>>());
    let outcome = &events.last().unwrap().2["outcome"];
    assert_eq!(outcome["status"], "completed");
    // The service asks for live text: each thought's words came first as text_deltas.
    let (mut live, mut thoughts) = (String::new(), 0);
    for (_, kind, event) in &events {
        match kind.as_str() {
            "text_delta" => live.push_str(event["text"].as_str().unwrap()),
            "thought" => {
                assert_eq!(std::mem::take(&mut live), event["text"].as_str().unwrap());
                thoughts += 1;
            }
            _ => {}
        }
    }
    assert!(thoughts > 0 && live.is_empty(), "{kinds:?}");

    // Resuming after event 3 replays from 4 to the end.
    let resumed = svc.events(&id, Some(3), |_, _| false).await;
    assert_eq!(resumed.first().map(|e| e.0), Some(4));
    assert_eq!(resumed.len(), events.len() - 3);

    let (status, flow) = svc.get(&format!("/v1/flows/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(flow["status"], "completed");
    assert_eq!(flow["task"], support::scenario::EXAMPLE_TASK);
    assert_eq!(flow["plan"]["steps"].as_array().unwrap().len(), 2);
    assert!(
        flow["plan"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "completed")
    );
    assert_eq!(flow["usage"], outcome["usage"]);
    assert!(!flow["result"].as_str().unwrap().is_empty());

    let (_, list) = svc.get("/v1/flows").await;
    assert_eq!(list["flows"][0]["id"], id.as_str());
    assert_eq!(list["flows"][0]["status"], "completed");

    let metrics = svc
        .http
        .get(svc.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("manus_flows_submitted_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("manus_flows_finished_total{status=\"completed\"} 1"));
    let calls = outcome["usage"]["calls"].as_u64().unwrap();
    assert!(
        metrics.contains(&format!("manus_llm_calls_total {calls}")),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "manus_llm_profile_info{profile=\"default\",provider=\"openai\",api_type=\"openai\""
        ),
        "the provider is named: {metrics}"
    );

    let (status, doc) = svc.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/v1/flows",
        "/v1/flows/{id}",
        "/v1/flows/{id}/events",
        "/v1/flows/{id}/answers",
        "/v1/flows/{id}/follow-up",
        "/v1/threads/{id}",
        "/v1/flows/{id}/fork",
        "/v1/flows/{id}/approvals/{approval_id}",
        "/v1/approvals",
        "/v1/flows/{id}/files/{path}",
        "/",
        "/console/{name}",
        "/healthz",
        "/metrics",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_over_http() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("ask_human", json!({"inquire": "Which colour?"})),
        done("noted the colour"),
    ]);
    let dir = Scratch::new("serve-answer");
    let svc = Service::start(&dir, &config(&server, &dir, &[])).await;
    let id = svc.submit_single("ask me a colour").await;
    let asked = svc.events(&id, None, |kind, _| kind == "question").await;
    let question = &asked.last().unwrap().2;
    assert_eq!(question["inquire"], "Which colour?");
    let qid = question["id"].as_u64().unwrap();
    let (_, flow) = svc.get(&format!("/v1/flows/{id}")).await;
    assert_eq!(flow["questions"][0]["id"], qid);

    let wrong = svc
        .http
        .post(svc.url(&format!("/v1/flows/{id}/answers")))
        .json(&json!({"question_id": qid + 100, "text": "red"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 404);
    let answered = svc
        .http
        .post(svc.url(&format!("/v1/flows/{id}/answers")))
        .json(&json!({"question_id": qid, "text": "teal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 202);
    let rest = svc
        .events(&id, Some(asked.last().unwrap().0), |_, _| false)
        .await;
    assert_eq!(rest.last().unwrap().2["outcome"]["status"], "completed");
    let requests = server.requests();
    assert!(
        support::scenario::last_tool_text(&requests[1]).contains("teal"),
        "the model got the answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_is_cancelled_with_delete() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] wait a long time", "[MANUS] never reached"]),
        done("too late").delay(60_000),
    ]);
    let dir = Scratch::new("serve-cancel");
    let svc = Service::start(&dir, &config(&server, &dir, &[])).await;
    let id = svc.submit("take your time").await;
    svc.events(&id, None, |kind, _| kind == "step_started")
        .await;
    let r = svc
        .http
        .delete(svc.url(&format!("/v1/flows/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let all = svc.events(&id, None, |_, _| false).await;
    assert_eq!(all.last().unwrap().2["outcome"]["status"], "cancelled");
    let again = svc
        .http
        .delete(svc.url(&format!("/v1/flows/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
}

/// The service holds only the last `keep_finished_flows` finished flows: the one that
/// finished first is dropped from its table and the list, and asking for it says why and
/// where its record is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_holds_the_last_finished_flows_only() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("serve-keep");
    let svc = Service::start(
        &dir,
        &config(&server, &dir, &[("server.keep_finished_flows", "1")]),
    )
    .await;
    let mut ids = vec![];
    for task in ["Note the first thing", "Note the second thing"] {
        server.push_all([
            plan_reply(&["[MANUS] Note it"]),
            done("Noted."),
            Reply::text("It is noted."),
        ]);
        let id = svc.submit(task).await;
        let events = svc.events(&id, None, |_, _| false).await;
        assert_eq!(events.last().unwrap().1, "flow_finished");
        ids.push(id);
    }
    // The first is dropped once the second has finished, just after its last event.
    let first = format!("/v1/flows/{}", ids[0]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        let (status, body) = svc.get(&first).await;
        if status != 200 || tokio::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 404, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("keep_finished_flows") && message.contains("runs show"),
        "{message}"
    );
    let (status, second) = svc.get(&format!("/v1/flows/{}", ids[1])).await;
    assert_eq!((status, &second["status"]), (200, &json!("completed")));
    let (_, list) = svc.get("/v1/flows").await;
    let listed: Vec<&str> = list["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[1].as_str()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_guard_the_api() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let dir = Scratch::new("serve-auth");
    let svc = Service::start(
        &dir,
        &config(&server, &dir, &[("server.api_tokens", "[\"s3cret\"]")]),
    )
    .await;
    let none = svc.http.get(svc.url("/v1/flows")).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(none.headers()["www-authenticate"], "Bearer");
    let body: Value = none.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer")
    );
    let wrong = svc
        .http
        .post(svc.url("/v1/flows"))
        .bearer_auth("guess")
        .json(&json!({"task": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let metrics = svc.http.get(svc.url("/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), 401);
    assert_eq!(svc.get("/healthz").await.0, 200, "health needs no token");
    let ok = svc
        .http
        .post(svc.url("/v1/flows"))
        .bearer_auth("s3cret")
        .json(&json!({"task": support::scenario::EXAMPLE_TASK}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let id = ok.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let flow = svc
        .http
        .get(svc.url(&format!("/v1/flows/{id}")))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(flow.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("serve-bad");
    let svc = Service::start(&dir, &config(&server, &dir, &[("server.max_body_kb", "1")])).await;
    let post = |body: String, ctype: &'static str| {
        svc.http
            .post(svc.url("/v1/flows"))
            .header("content-type", ctype)
            .body(body)
            .send()
    };
    let message = |v: Value| v["error"]["message"].as_str().unwrap_or("").to_string();

    let r = post("{\"task\": ".into(), "application/json")
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(!message(r.json().await.unwrap()).is_empty());
    let r = post("{\"tsak\": \"x\"}".into(), "application/json")
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert!(message(r.json().await.unwrap()).contains("tsak"));
    let r = post("{\"task\": \"  \"}".into(), "application/json")
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let r = post(
        "{\"task\": \"x\", \"mode\": \"swarm\"}".into(),
        "application/json",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 422);
    assert!(message(r.json().await.unwrap()).contains("swarm"));
    let r = post("task=x".into(), "text/plain").await.unwrap();
    assert_eq!(r.status(), 415);
    let big = json!({"task": "x".repeat(4096)}).to_string();
    let r = post(big, "application/json").await.unwrap();
    assert_eq!(r.status(), 413);

    let (status, body) = svc.get("/v1/flows/nope").await;
    assert_eq!(status, 404);
    assert!(message(body).contains("nope"));
    let (status, _) = svc.get("/v1/flows/nope/events").await;
    assert_eq!(status, 404);
    let (status, body) = svc.get("/v2/whatever").await;
    assert_eq!(status, 404);
    assert!(message(body).contains("openapi"));
    assert_eq!(server.request_count(), 0, "no flow was started");
}

/// Issue 8: the service is killed with SIGKILL after step 2 of 4 and started again; it
/// resumes the run on start (the same id) at step 3, and nothing before the kill is redone.
/// A flow that was asking a question when its service died asks again when resumed, under
/// a new number above the first: the open question is the new one only, and an answer
/// recorded for the old number (a cluster keeps answers by number) cannot be taken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_flow_asks_again_under_a_new_number() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] ask which colour"]),
        Reply::tool("ask_human", json!({"inquire": "Which colour?"})),
    ]);
    let dir = Scratch::new("serve-resume-question");
    let text = config(&server, &dir, &[]);
    let mut svc = Service::start(&dir, &text).await;
    let id = svc.submit("Ask which colour.").await;
    let db = dir.workspace().with_file_name("runs.db");
    let store = RunStore::open(&StoreUrl::Sqlite(db)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let asked = store
                .events(&id)
                .await
                .unwrap()
                .iter()
                .any(|e| matches!(e.event, manus_rt::FlowEvent::Question { id: 1, .. }));
            if asked {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the store records question 1");
    store.close().await;
    svc.kill().await;

    server.push_all([
        Reply::tool("ask_human", json!({"inquire": "Which colour, again?"})),
        done("the colour is teal"),
        Reply::text("Teal it is."),
    ]);
    let again = Service::start(&dir, &text).await;
    let open = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (_, flow) = again.get(&format!("/v1/flows/{id}")).await;
            if flow["questions"].as_array().is_some_and(|q| !q.is_empty()) {
                return flow["questions"].clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the resumed flow asks again");
    assert_eq!(open.as_array().unwrap().len(), 1, "{open}");
    assert_eq!(open[0]["id"], 2, "{open}");
    assert_eq!(open[0]["inquire"], "Which colour, again?");
    let r = again
        .http
        .post(again.url(&format!("/v1/flows/{id}/answers")))
        .json(&json!({"question_id": 2, "text": "teal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let events = again.events(&id, None, |_, _| false).await;
    assert_eq!(events.last().unwrap().2["outcome"]["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_service_resumes_its_flow_on_restart() {
    let server = ScriptedLlm::start().await;
    let steps = [
        "[MANUS] Write note one",
        "[MANUS] Write note two",
        "[MANUS] Write note three",
        "[MANUS] Write note four",
    ];
    server.push_all([
        plan_reply(&steps),
        done("note one written"),
        done("note two written"),
        done("never heard").delay(600_000),
    ]);
    let dir = Scratch::new("serve-resume");
    let text = config(&server, &dir, &[]);
    let mut svc = Service::start(&dir, &text).await;
    let id = svc.submit("Write four notes, one per step.").await;
    // Step 3 has asked the model: steps 1 and 2 are done and recorded.
    tokio::time::timeout(Duration::from_secs(90), async {
        while server.request_count() < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("step 3 asked the model");
    let (_, flow) = svc.get(&format!("/v1/flows/{id}")).await;
    assert_eq!(flow["plan"]["steps"][1]["status"], "completed", "{flow}");
    // The store commits in batches gathered for up to 20 ms: kill only once it holds both
    // steps as done, as the promise is about what was recorded.
    let db = dir.workspace().with_file_name("runs.db");
    let store = RunStore::open(&StoreUrl::Sqlite(db)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let run = store.get(&id).await.unwrap();
            let done = |step: usize| {
                run.as_ref()
                    .and_then(|r| r.plan.as_ref())
                    .is_some_and(|p| p.steps[step].status == StepStatus::Completed)
            };
            if done(0) && done(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the store records steps 1 and 2 as completed");
    store.close().await;
    svc.kill().await;
    let before = server.request_count();

    server.push_all([
        done("note three written"),
        done("note four written"),
        Reply::text("Four notes written."),
    ]);
    let again = Service::start(&dir, &text).await;
    let events = again.events(&id, None, |_, _| false).await;
    let outcome = &events.last().unwrap().2["outcome"];
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let statuses: Vec<&Value> = outcome["plan"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["status"])
        .collect();
    assert!(statuses.iter().all(|s| *s == "completed"), "{statuses:?}");
    let after: Vec<String> = server.requests()[before..]
        .iter()
        .filter_map(|r| r.last_user_text())
        .collect();
    for done_step in ["step 0 only", "step 1 only"] {
        assert!(
            server.requests()[before..].iter().all(|r| !r
                .messages()
                .iter()
                .any(|m| m.to_string().contains(done_step))),
            "{done_step} was asked again: {after:?}"
        );
    }
    assert_eq!(
        server.request_count() - before,
        3,
        "steps 3 and 4 and the summary"
    );
}

/// Issue 24, item 6: a `201` means the run is in the store. A burst of submissions is sent
/// at once and the service is killed with SIGKILL right after a random number of them were
/// answered `201`; the store, read after the kill, holds every flow that was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_flow_survives_a_sigkill_mid_burst() {
    const BURST: usize = 100;
    let server = ScriptedLlm::start().await;
    // Plans never come back before the kill: the flows wait on the model.
    server.set_fallback(Some(plan_reply(&["[MANUS] Wait"]).delay(600_000)));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut noise = support::scenario::Noise::new(seed);
    let mut lost_in_all = vec![];
    for round in 0..4 {
        let dir = Scratch::new("serve-durable");
        let mut svc = Service::start(&dir, &config(&server, &dir, &[])).await;
        // Kill once this many 201s have come back: somewhere in the burst.
        let kill_after = 1 + (noise.next() * (BURST - 1) as f64) as usize;
        let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel();
        let sends: Vec<_> = (0..BURST)
            .map(|n| {
                let (http, url, acked) = (svc.http.clone(), svc.url("/v1/flows"), acked_tx.clone());
                tokio::spawn(async move {
                    let task = format!("Durable flow {n}");
                    let Ok(r) = http.post(url).json(&json!({"task": task})).send().await else {
                        return;
                    };
                    if r.status() == 201 {
                        // The answer counts once its head is read: the body may be cut by
                        // the kill.
                        let id = r.headers()["location"].to_str().unwrap().to_string();
                        let _ = acked.send(id.trim_start_matches("/v1/flows/").to_string());
                    }
                })
            })
            .collect();
        drop(acked_tx);
        let mut acked = vec![];
        while acked.len() < kill_after {
            match tokio::time::timeout(Duration::from_secs(60), acked_rx.recv()).await {
                Ok(Some(id)) => acked.push(id),
                Ok(None) => break,
                Err(_) => panic!("no 201 within a minute ({} so far)", acked.len()),
            }
        }
        svc.kill().await;
        for send in sends {
            let _ = send.await;
        }
        while let Ok(id) = acked_rx.try_recv() {
            acked.push(id);
        }
        let db = dir.workspace().with_file_name("runs.db");
        let store = RunStore::open(&StoreUrl::Sqlite(db)).await.unwrap();
        let stored: std::collections::HashSet<String> = store
            .list(10 * BURST)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        store.close().await;
        let lost: Vec<&String> = acked.iter().filter(|id| !stored.contains(*id)).collect();
        eprintln!(
            "round {round}: killed after {kill_after} 201s; {} acknowledged, {} stored, {} of the acknowledged missing",
            acked.len(),
            stored.len(),
            lost.len()
        );
        lost_in_all.extend(lost.into_iter().cloned());
    }
    assert!(
        lost_in_all.is_empty(),
        "flows answered 201 but not in the store after the kill: {lost_in_all:?}"
    );
}

/// Issue 24, item 7: without tokens the service answers only loopback `Host`s (and those of
/// `[server] allowed_hosts`), so a web page cannot reach it by DNS rebinding; it refuses to
/// listen beyond loopback without tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_only_loopback_hosts_are_answered() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("serve-hosts");
    let svc = Service::start(
        &dir,
        &config(
            &server,
            &dir,
            &[("server.allowed_hosts", "[\"manus.internal\"]")],
        ),
    )
    .await;
    let with_host = |host: &str| {
        svc.http
            .post(svc.url("/v1/flows"))
            .header("host", host)
            .json(&json!({"task": "run bash for me"}))
            .send()
    };
    for evil in [
        "evil.example",
        "evil.example:80",
        "127.0.0.1.evil.example",
        "10.0.0.1",
    ] {
        let r = with_host(evil).await.unwrap();
        assert_eq!(r.status(), 403, "Host {evil}");
        let body: Value = r.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(evil) && message.contains("allowed_hosts"),
            "{message}"
        );
    }
    let (status, _) = {
        let r = svc
            .http
            .get(svc.url("/healthz"))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        (r.status(), ())
    };
    assert_eq!(status, 403, "nothing is answered to another host");
    assert_eq!(server.request_count(), 0, "no flow was started");
    for good in [
        "127.0.0.1",
        "localhost:8080",
        "[::1]:9",
        "LOCALHOST",
        "manus.internal:1",
    ] {
        let r = svc
            .http
            .get(svc.url("/v1/flows"))
            .header("host", good)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "Host {good}");
    }

    // Beyond loopback: refused without tokens, served with them.
    let refused = Service::command(&dir, &config(&server, &dir, &[]), "0.0.0.0:0", None)
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0") && stderr.contains("api_tokens"),
        "{stderr}"
    );
    let tokens = config(&server, &dir, &[("server.api_tokens", "[\"s3cret\"]")]);
    let open = Service::launch(Service::command(&dir, &tokens, "0.0.0.0:0", None)).await;
    assert!(open.base.contains("0.0.0.0"), "{}", open.base);
}

/// Issue 24, item 7: a thousand half-sent requests do not lock a client out. The service
/// runs under a descriptor limit of 512 (the thousand would exhaust it); it holds at most
/// half that many connections, closes the oldest idle one to make room, and closes a
/// connection that has not sent its request's head within the header-read time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_do_not_lock_a_client_out() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const HALF_SENT: usize = 1_000;
    // This test holds a thousand sockets itself.
    let (soft, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    if soft < 4_096 {
        nix::sys::resource::setrlimit(
            nix::sys::resource::Resource::RLIMIT_NOFILE,
            hard.min(4_096),
            hard,
        )
        .unwrap();
    }
    let server = ScriptedLlm::start().await;
    server.push_all([plan_reply(&["[MANUS] Wait"]).delay(600_000)]);
    let dir = Scratch::new("serve-slowloris");
    let svc = Service::launch(Service::command(
        &dir,
        &config(&server, &dir, &[]),
        "127.0.0.1:0",
        Some(512),
    ))
    .await;
    let addr = svc.base.trim_start_matches("http://").to_string();
    let closed = Arc::new(AtomicUsize::new(0));
    let mut readers = vec![];
    for _ in 0..HALF_SENT {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // The request line and a header, never the blank line that ends the head.
        stream
            .write_all(
                b"POST /v1/flows HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
            )
            .await
            .unwrap();
        let closed = closed.clone();
        readers.push(tokio::spawn(async move {
            let mut buf = [0u8; 256];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            closed.fetch_add(1, Ordering::Relaxed);
        }));
    }
    // A client that sends whole requests gets in (a fresh connection each time).
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        let list = client.get(svc.url("/v1/flows")).send().await.unwrap();
        let submit = client
            .post(svc.url("/v1/flows"))
            .json(&json!({"task": "Wait for the model"}))
            .send()
            .await
            .unwrap();
        (list.status().as_u16(), submit.status().as_u16())
    })
    .await
    .expect("the client was answered while the half-sent requests were held");
    assert_eq!(answered, (200, 201));
    let closed_then = closed.load(Ordering::Relaxed);
    eprintln!(
        "{HALF_SENT} half-sent requests: {closed_then} closed to make room when the client was answered"
    );
    assert!(
        closed_then < HALF_SENT,
        "some half-sent requests were still open: the client did not wait out the header time"
    );
    // The rest are closed once their header-read time is up.
    tokio::time::timeout(Duration::from_secs(90), async {
        for r in readers {
            r.await.unwrap();
        }
    })
    .await
    .expect("every half-sent request is closed after the header-read time");
    assert_eq!(closed.load(Ordering::Relaxed), HALF_SENT);
    let (status, _) = svc.get("/healthz").await;
    assert_eq!(status, 200);
}

/// Issue 37, item 1: the service SIGKILLed at any moment just after an approval it
/// acknowledged: restarted, the flow never asks again (the decision was recorded before
/// the answer) and the approved call runs at most once (the decision is recorded before
/// the call runs, so a restart knows the call may have run and tells the model so rather
/// than running it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_at_most_once_however_soon_the_service_is_killed() {
    let responder: support::llm_server::Responder =
        std::sync::Arc::new(|r: &support::llm_server::Request| {
            let body = r.json();
            let tools = r.tool_names();
            if tools.contains(&"planning") {
                return Some(plan_reply(&["[MANUS] Count into tally.txt"]));
            }
            if tools.is_empty() {
                return Some(Reply::text("Counted."));
            }
            let answered = body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
            Some(match answered {
                true => done("counted"),
                false => Reply::tool("bash", json!({"command": "echo once >> tally.txt"})),
            })
        });
    for delay_ms in [0u64, 1, 2, 3, 5, 8, 12, 20] {
        let server = ScriptedLlm::start().await;
        server.set_responder(Some(responder.clone()));
        let dir = Scratch::new(&format!("approve-kill-{delay_ms}"));
        let rule = (
            "approvals.tools.bash",
            r#"{ matches = ">>", argument = "command" }"#,
        );
        let text = config(&server, &dir, &[rule]);
        let mut svc = Service::start(&dir, &text).await;
        let id = svc.submit("Count once.").await;
        let seen = svc
            .events(&id, None, |kind, _| kind == "approval_requested")
            .await;
        let aid = seen.last().unwrap().2["id"].as_u64().unwrap();
        // The paused step's memory is stored before the request is published.
        let r = svc
            .http
            .post(svc.url(&format!("/v1/flows/{id}/approvals/{aid}")))
            .json(&json!({"approve": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        svc.kill().await;
        let db = dir.workspace().with_file_name("runs.db");
        let store = RunStore::open(&StoreUrl::Sqlite(db)).await.unwrap();
        // Where the run stood at the kill, for the failure messages.
        let at_kill = stored_state(&store, &id).await;
        // Restarted, the service resumes the run unless it had ended before the kill; the
        // store tells either way.
        let _again = Service::start(&dir, &text).await;
        let mut last = None;
        let ended = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let run = store.get(&id).await.unwrap().unwrap();
                if run.status.ended() {
                    return run;
                }
                last = Some(run);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!("the run never ended after {delay_ms} ms: {last:?}\nat the kill: {at_kill}")
        });
        assert_eq!(
            ended.status,
            RunStatus::Completed,
            "killed after {delay_ms} ms\nat the kill: {at_kill}"
        );
        let events = store.events(&id).await.unwrap();
        let asked = events
            .iter()
            .filter(|e| matches!(e.event, FlowEvent::ApprovalRequested { .. }))
            .count();
        assert_eq!(
            asked,
            1,
            "asked again after {delay_ms} ms\nat the kill: {at_kill}\nat the end: {}",
            stored_state(&store, &id).await
        );
        store.close().await;
        let tally = std::fs::read_to_string(dir.workspace().join("tally.txt")).unwrap_or_default();
        assert!(
            tally == "once\n" || tally.is_empty(),
            "killed {delay_ms} ms after the approval, the call ran {} times\nat the kill: {at_kill}",
            tally.lines().count()
        );
    }
}

/// A run's record in one line each: its steps (status, attempts), its events by number and
/// kind, and its memories (step, attempt, the calls they hold).
async fn stored_state(store: &RunStore, id: &str) -> String {
    let run = store.get(id).await.unwrap();
    let steps: Vec<String> = run
        .iter()
        .flat_map(|r| r.plan.iter().flat_map(|p| p.steps.iter()))
        .map(|s| format!("{} ({} attempts)", s.status.as_str(), s.attempts))
        .collect();
    let events: Vec<String> = store
        .events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| {
            let json = serde_json::to_value(&e.event).unwrap();
            format!("{} {}", e.seq, json["event"].as_str().unwrap_or("?"))
        })
        .collect();
    let memories: Vec<String> = store
        .memories(id)
        .await
        .unwrap()
        .iter()
        .map(|m| {
            let calls: Vec<&str> = m
                .messages
                .iter()
                .flat_map(|m| m.tool_calls.iter())
                .map(|c| c.id.as_str())
                .collect();
            format!("step {} attempt {} calls {calls:?}", m.step, m.attempt)
        })
        .collect();
    format!(
        "status {:?}, steps {steps:?}\n  events {events:?}\n  memories {memories:?}",
        run.map(|r| r.status)
    )
}

/// Issue 27: a `bash` call a rule names pauses its flow; the service is SIGKILLed while it
/// waits; after the restart the request is listed; approved over HTTP with edited
/// arguments, the edited command runs exactly once and the flow completes. Requests and
/// decisions show on the event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_survives_a_sigkill_and_is_answered_over_http() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Count into tally.txt"]),
        Reply::tool("bash", json!({"command": "echo asked >> tally.txt"})),
    ]);
    let dir = Scratch::new("serve-approval");
    let text = config(
        &server,
        &dir,
        &[(
            "approvals.tools.bash",
            r#"{ matches = ">>", argument = "command" }"#,
        )],
    );
    let mut svc = Service::start(&dir, &text).await;
    let id = svc.submit("Count once.").await;
    let seen = svc
        .events(&id, None, |kind, _| kind == "approval_requested")
        .await;
    let request = &seen.last().unwrap().2;
    assert_eq!(request["tool"], "bash", "{request}");
    let (_, listed) = svc.get("/v1/approvals").await;
    assert_eq!(listed["approvals"][0]["flow"], id.as_str(), "{listed}");
    let (_, flow) = svc.get(&format!("/v1/flows/{id}")).await;
    assert_eq!(flow["status"], "awaiting_approval", "{flow}");
    // Wait until the store holds the paused step, then kill the service hard.
    let db = dir.workspace().with_file_name("runs.db");
    let store = RunStore::open(&StoreUrl::Sqlite(db)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let run = store.get(&id).await.unwrap();
            let paused = run
                .as_ref()
                .and_then(|r| r.plan.as_ref())
                .is_some_and(|p| p.steps[0].status == StepStatus::AwaitingApproval);
            if paused && !store.memories(&id).await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the store records the paused step");
    store.close().await;
    svc.kill().await;
    let before = server.request_count();

    server.push_all([
        support::scenario::done("counted"),
        Reply::text("Counted once."),
    ]);
    let again = Service::start(&dir, &text).await;
    let listed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (_, listed) = again.get("/v1/approvals").await;
            if listed["approvals"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                return listed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the restarted service lists the pending approval");
    let aid = listed["approvals"][0]["id"].as_u64().unwrap();
    assert_eq!(
        server.request_count(),
        before,
        "the model was not asked again"
    );
    let r = again
        .http
        .post(again.url(&format!("/v1/flows/{id}/approvals/{aid}")))
        .json(&json!({"approve": true, "arguments": {"command": "echo approved >> tally.txt"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = again
        .http
        .post(again.url(&format!("/v1/flows/{id}/approvals/{aid}")))
        .json(&json!({"approve": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a request is decided once");
    let events = again.events(&id, None, |_, _| false).await;
    assert!(
        events
            .iter()
            .any(|(_, kind, v)| kind == "approval_decided" && v["decision"]["by"] == "loopback"),
        "{events:?}"
    );
    let outcome = &events.last().unwrap().2["outcome"];
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let tally = std::fs::read_to_string(dir.workspace().join("tally.txt")).unwrap();
    assert_eq!(tally, "approved\n", "the edited command ran exactly once");
}

/// Code mode over HTTP: a cell's `bash` call that a rule names pauses the flow with the cell
/// waiting (`awaiting_approval`, the request naming the call the cell made); approved over
/// HTTP, the cell goes on from that call and the flow completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cells_call_waits_for_an_approval_given_over_http() {
    let python = |code: &str| Reply::tool("python", json!({ "code": code }));
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Count into tally.txt"]),
        python(
            "for i in range(3):\n    bash(f'echo {i} > n{i}.txt')\n\
             bash('echo counted >> tally.txt')\nprint(open('tally.txt').read().strip())",
        ),
        python("terminate(status='success')"),
        Reply::text("Counted."),
    ]);
    let dir = Scratch::new("serve-code-approval");
    let text = config(
        &server,
        &dir,
        &[
            ("agents.manus.action", "\"code\""),
            (
                "approvals.tools.bash",
                r#"{ matches = ">>", argument = "command" }"#,
            ),
        ],
    );
    let svc = Service::start(&dir, &text).await;
    let id = svc.submit("Count once.").await;
    let seen = svc
        .events(&id, None, |kind, _| kind == "approval_requested")
        .await;
    let request = &seen.last().unwrap().2;
    assert_eq!(request["tool"], "bash", "{request}");
    assert!(
        request["arguments"]
            .as_str()
            .is_some_and(|a| a.contains("echo counted >> tally.txt")),
        "{request}"
    );
    let (_, flow) = svc.get(&format!("/v1/flows/{id}")).await;
    assert_eq!(flow["status"], "awaiting_approval", "{flow}");
    // The cell's calls before the one that waits have run; the one that waits has not.
    assert!(dir.workspace().join("n2.txt").exists());
    assert!(!dir.workspace().join("tally.txt").exists());
    let aid = request["id"].as_u64().unwrap();
    assert_eq!(svc.decide(&id, aid, json!({"approve": true})).await, 202);
    let events = svc.events(&id, None, |_, _| false).await;
    let outcome = &events.last().unwrap().2["outcome"];
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let tally = std::fs::read_to_string(dir.workspace().join("tally.txt")).unwrap();
    assert_eq!(tally, "counted\n", "the approved call ran once");
    assert_eq!(
        observation(&server, 1),
        "counted\n[tool calls made by this cell: bash, bash, bash, bash]",
        "the cell went on from the call that waited"
    );
}

/// `GET /v1/flows/{id}/events?protocol=ag-ui` streams the run as AG-UI events that the
/// official AG-UI SDK (PyPI ag-ui-protocol) accepts, in an order its rules allow
/// (tests/peers/agui_check.py): the run, its steps, the agent's words streamed from the
/// model's token stream, each tool call and result, the plan as state and its deltas; a
/// failed run ends with RUN_ERROR.
#[tokio::test(flavor = "multi_thread")]
async fn the_ag_ui_stream_passes_the_official_sdks_checks() {
    let python = std::env::var("MANUS_TEST_MCP_PYTHON").unwrap_or_else(|_| {
        panic!("MANUS_TEST_MCP_PYTHON is not set: run the suite with scripts/test.sh, which installs the AG-UI SDK")
    });
    let check = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/agui_check.py");
    let server = ScriptedLlm::start().await;
    server.push_for(
        "write the report",
        [
            plan_reply(&["[MANUS] write report.txt", "[MANUS] check it"]),
            Reply::tool(
                "str_replace_editor",
                json!({"command": "create", "path": "report.txt", "file_text": "all good\n"}),
            )
            .with_text("I will write the report now."),
            done("report.txt is written."),
            Reply::tool("bash", json!({"command": "cat report.txt"})),
            done("It says all good."),
            Reply::text("The report is written and checked."),
        ],
    );
    server.push_for(
        "a task that fails",
        [
            plan_reply(&["[MANUS] try"]),
            Reply::tool("terminate", json!({"status": "failure"})).with_text("It cannot be done."),
            Reply::text("It failed."),
        ],
    );
    let dir = Scratch::new("serve-agui");
    let svc = Service::start(
        &dir,
        &config_with(&server, &dir.workspace(), &[("flow.max_step_retries", "0")]),
    )
    .await;
    for (task, ends, must) in [
        (
            "write the report",
            "RUN_FINISHED",
            &[
                "STATE_SNAPSHOT",
                "STATE_DELTA",
                "STEP_STARTED",
                "STEP_FINISHED",
                "TEXT_MESSAGE_CONTENT",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_RESULT",
            ][..],
        ),
        ("a task that fails", "RUN_ERROR", &["STEP_FINISHED"][..]),
    ] {
        let id = svc.submit(task).await;
        let out = tokio::process::Command::new(&python)
            .arg(&check)
            .arg(svc.url(&format!("/v1/flows/{id}/events?protocol=ag-ui")))
            .output()
            .await
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {} {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(out.status.success(), "{task}: {report}");
        for kind in must.iter().chain([&ends]) {
            assert!(
                report["types"][kind].as_u64().unwrap_or(0) > 0,
                "{task}: no {kind}: {report}"
            );
        }
    }
    // A stream in AG-UI starts at the beginning.
    let r = svc
        .http
        .get(svc.url("/v1/flows/x/events?protocol=ag-ui"))
        .header("Last-Event-ID", "3")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

/// A2A with the official SDK (PyPI a2a-sdk) as the client (tests/peers/a2a_client.py): it
/// reads the agent card, sends a task with its bearer token, streams it, answers the
/// question the flow asks (input-required) and sees it complete; a message sent without
/// streaming completes; a cancel ends a working task as canceled.
#[tokio::test(flavor = "multi_thread")]
async fn a2a_clients_of_the_official_sdk_run_answer_and_cancel_tasks() {
    let python = std::env::var("MANUS_TEST_MCP_PYTHON").unwrap_or_else(|_| {
        panic!("MANUS_TEST_MCP_PYTHON is not set: run the suite with scripts/test.sh, which installs the A2A SDK")
    });
    let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a_client.py");
    let server = ScriptedLlm::start().await;
    server.push_for(
        "pick a colour",
        [
            plan_reply(&["[MANUS] ask which colour"]),
            Reply::tool("ask_human", json!({"inquire": "Which colour?"})),
            done("The colour is chosen."),
            Reply::text("The person chose a colour."),
        ],
    );
    server.push_for(
        "say hello",
        [
            plan_reply(&["[MANUS] say hello"]),
            done("Hello."),
            Reply::text("Said hello."),
        ],
    );
    server.push_for(
        "wait a long time",
        [
            plan_reply(&["[MANUS] wait"]),
            Reply::tool("bash", json!({"command": "sleep 60"})),
        ],
    );
    let dir = Scratch::new("serve-a2a");
    let config = config_with(
        &server,
        &dir.workspace(),
        &[
            ("server.api_tokens", "[\"a2a-secret\"]"),
            ("flow.max_step_retries", "0"),
        ],
    );
    let svc = Service::start(&dir, &config).await;
    let run = |args: Vec<&str>| {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg(&client)
            .arg(&svc.base)
            .args(["--token", "a2a-secret", "--timeout", "60"])
            .args(args);
        async move {
            let out = cmd.output().await.unwrap();
            let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            (
                out.status.code(),
                lines,
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        }
    };
    let (code, lines, stderr) = run(vec![
        "--text",
        "pick a colour",
        "--stream",
        "--answer",
        "teal",
    ])
    .await;
    assert_eq!(code, Some(0), "{lines:?}\n{stderr}");
    assert!(
        lines.iter().any(|l| l["state"] == "input-required"
            && l["text"]
                .as_str()
                .is_some_and(|t| t.contains("Which colour"))),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().unwrap()["final_state"],
        "completed",
        "{lines:?}"
    );
    // The answer reached the agent as its question's answer.
    assert!(
        server.tool_results().iter().any(|t| t.contains("teal")),
        "{:?}",
        server.tool_results()
    );

    let (code, lines, stderr) = run(vec!["--text", "say hello"]).await;
    assert_eq!(code, Some(0), "{lines:?}\n{stderr}");

    let (code, lines, stderr) = run(vec![
        "--text",
        "wait a long time",
        "--stream",
        "--cancel-after-working",
    ])
    .await;
    assert_eq!(code, Some(0), "{lines:?}\n{stderr}");
    assert_eq!(
        lines.last().unwrap()["final_state"],
        "canceled",
        "{lines:?}"
    );

    // Without the token the endpoint refuses; the card stays readable and says a token is needed.
    let (status, card) = svc.get("/.well-known/agent-card.json").await;
    assert_eq!(status, 200);
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");
    let r = svc
        .http
        .post(svc.url("/a2a"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Only JSON is taken: a web page may post `text/plain` anywhere without asking first.
    let r = svc
        .http
        .post(svc.url("/a2a"))
        .bearer_auth("a2a-secret")
        .header("content-type", "text/plain")
        .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "rm -rf ~"}]}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let (_, flows) = svc.get_with("/v1/flows", "a2a-secret").await;
    assert!(
        flows["flows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["task"] != "rm -rf ~"),
        "{flows}"
    );
}

/// The console's files are compiled in and answered without a token (they hold no data)
/// but behind the `Host` check, typed, never sniffed, and the page under a policy that runs
/// only its own scripts; an unknown one is a JSON 404. The workspace files need the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_from_the_binary_under_a_strict_policy() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("serve-console");
    let svc = Service::start(
        &dir,
        &config(
            &server,
            &dir,
            &[
                ("server.api_tokens", "[\"s3cret\"]"),
                ("server.allowed_hosts", "[\"manus.internal\"]"),
            ],
        ),
    )
    .await;
    let fetch = |path: &str| svc.http.get(svc.url(path)).send();
    let header = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no {name} on {}", r.url()))
    };
    let console = concat!(env!("CARGO_MANIFEST_DIR"), "/src/serve/console/");
    for (path, file, kind) in [
        ("/", "index.html", "text/html; charset=utf-8"),
        (
            "/console/index.html",
            "index.html",
            "text/html; charset=utf-8",
        ),
        ("/console/style.css", "style.css", "text/css"),
        ("/console/app.js", "app.js", "text/javascript"),
    ] {
        let r = fetch(path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, "content-type"), kind, "{path}");
        assert_eq!(header(&r, "x-content-type-options"), "nosniff");
        assert_eq!(header(&r, "referrer-policy"), "no-referrer");
        assert_eq!(header(&r, "cache-control"), "no-cache");
        let policy = r.headers().get("content-security-policy").cloned();
        if file == "index.html" {
            assert_eq!(
                policy.unwrap(),
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: \
                 data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
                 frame-ancestors 'none'"
            );
        } else {
            assert_eq!(policy, None, "{path}");
        }
        // The bytes this test was built with are the bytes the binary serves.
        let on_disk = std::fs::read_to_string(format!("{console}{file}")).unwrap();
        assert_eq!(r.text().await.unwrap(), on_disk, "{path}");
    }
    let r = fetch("/console/missing.js").await.unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("missing.js") && message.contains("app.js"),
        "{message}"
    );
    // Public, but not to a page that reached the service through a name of its own.
    let r = svc
        .http
        .get(svc.url("/"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = fetch("/v1/flows/any/files/notes.md").await.unwrap();
    assert_eq!(r.status(), 401);
    let r = svc
        .http
        .get(svc.url("/v1/flows/any/files/notes.md"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        404,
        "with the token, the unknown flow is the answer"
    );
}

/// `GET /v1/flows/{id}/files/{path}` serves what a flow wrote in the workspace, typed by
/// its extension (SVG sandboxed, anything else a download), by the file tools' rule:
/// `..`, absolute paths and links to the outside are refused (403) and their targets'
/// bytes never sent; folders, missing files, files over 20 MiB and unknown flows say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_files_are_served_confined_and_typed() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "notes/summary.md", "file_text": "# Summary\nall good\n"}),
        ),
        done("summary written"),
    ]);
    let dir = Scratch::new("serve-files");
    let svc = Service::start(&dir, &config(&server, &dir, &[])).await;
    let id = svc.submit_single("write a summary").await;
    let events = svc.events(&id, None, |_, _| false).await;
    assert_eq!(events.last().unwrap().2["outcome"]["status"], "completed");

    let ws = dir.workspace();
    let png = [
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 1, 2, 0xff,
    ];
    std::fs::write(ws.join("chart.png"), png).unwrap();
    let svg = "<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>";
    std::fs::write(ws.join("chart.svg"), svg).unwrap();
    std::fs::write(ws.join("report.html"), "<script>alert(1)</script>").unwrap();
    std::fs::write(ws.join("data.bin"), [0u8, 1, 2]).unwrap();
    std::fs::File::create(ws.join("huge.log"))
        .unwrap()
        .set_len(21 << 20)
        .unwrap();
    let outside = Scratch::new("serve-files-outside");
    const SECRET: &str = "the outside secret 7f3a";
    std::fs::write(outside.path().join("secret.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("linked")).unwrap();

    let file = |path: &str| {
        svc.http
            .get(svc.url(&format!("/v1/flows/{id}/files/{path}")))
            .send()
    };
    for (path, kind, disposition, body) in [
        (
            "notes/summary.md",
            "text/plain; charset=utf-8",
            None,
            &b"# Summary\nall good\n"[..],
        ),
        ("chart.png", "image/png", None, &png[..]),
        ("chart.svg", "image/svg+xml", None, svg.as_bytes()),
        (
            "report.html",
            "application/octet-stream",
            Some("attachment"),
            &b"<script>alert(1)</script>"[..],
        ),
        (
            "data.bin",
            "application/octet-stream",
            Some("attachment"),
            &[0u8, 1, 2][..],
        ),
    ] {
        let r = file(path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let headers = r.headers().clone();
        assert_eq!(headers["content-type"], kind, "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(
            headers
                .get("content-disposition")
                .map(|v| v.to_str().unwrap()),
            disposition,
            "{path}"
        );
        // Opened by itself, nothing in it runs with the service's origin.
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(
            policy.starts_with("sandbox;") && policy.contains("default-src 'none'"),
            "{path}: {policy}"
        );
        assert_eq!(r.bytes().await.unwrap(), body, "{path}");
    }

    // `..` and an absolute path that name the secret, their slashes encoded so that no
    // client tidies them away.
    let outside_name = outside.path().file_name().unwrap().to_string_lossy();
    let up = format!("..%2F..%2F{outside_name}%2Fsecret.txt");
    let absolute = outside.path().join("secret.txt").display().to_string();
    let absolute = absolute.replace('/', "%2F");
    for path in [
        up.as_str(),
        "notes%2F..%2F..%2Fconfig.toml",
        absolute.as_str(),
        "leak.txt",
        "linked/secret.txt",
    ] {
        let r = file(path).await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 403, "{path}: {text}");
        assert!(!text.contains(SECRET), "{path}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            ["`..`", "relative", "symbolic link"]
                .iter()
                .any(|why| message.contains(why)),
            "{path}: {message}"
        );
    }
    let long_name = format!("{}.txt", "n".repeat(5000));
    for (path, status, says) in [
        ("notes", 400, "folder"),
        ("nothing-here.txt", 404, "no such file"),
        ("huge.log", 413, "22020096 bytes"),
        (long_name.as_str(), 400, "too long"),
    ] {
        let r = file(path).await.unwrap();
        assert_eq!(r.status(), status, "{path}");
        let body: Value = r.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{path}: {message}");
    }
    let (status, body) = svc.get("/v1/flows/nope/files/notes/summary.md").await;
    assert_eq!(status, 404);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("no flow with id `nope`"), "{message}");
}

/// A value from /proc/{pid}/status in MiB (`VmRSS`, `VmHWM`).
fn memory_mib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024
}

/// The files route streams a file from the descriptor the confinement rule opened (a
/// 20 MiB file arrives byte for byte) and sends at most 16 at once: of 60 clients that read
/// only the head, 16 are being sent the file and 44 wait, then get 503 with Retry-After;
/// the service's memory stays far from 60 copies of the file; once a client leaves, the
/// next request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_files_stream_and_downloads_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = ScriptedLlm::start().await;
    server.push_all([done("nothing to do")]);
    let dir = Scratch::new("serve-streams");
    let svc = Service::start(&dir, &config(&server, &dir, &[])).await;
    let id = svc.submit_single("do nothing").await;
    svc.events(&id, None, |_, _| false).await;
    // 20 MiB (the most served) of bytes that differ along the file.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let big: Vec<u8> = (0..20 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    std::fs::write(dir.workspace().join("big.bin"), &big).unwrap();
    let path = format!("/v1/flows/{id}/files/big.bin");
    let r = svc.http.get(svc.url(&path)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], "20971520");
    assert!(r.bytes().await.unwrap() == big, "the streamed bytes differ");

    let rss_before = memory_mib(svc.pid(), "VmRSS");
    let host = svc.base.trim_start_matches("http://").to_string();
    // A client that sends the request and reads the head only: its status and headers,
    // and the open connection.
    let slow = |host: String, path: String| async move {
        let mut conn = tokio::net::TcpStream::connect(&host).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(conn.read(&mut byte).await.unwrap(), 1, "closed in the head");
            head.push(byte[0]);
        }
        (String::from_utf8(head).unwrap().to_ascii_lowercase(), conn)
    };
    let clients: Vec<_> = (0..60)
        .map(|_| tokio::spawn(slow(host.clone(), path.clone())))
        .collect();
    let mut sending = Vec::new();
    let mut refused = 0;
    for client in clients {
        let (head, conn) = tokio::time::timeout(Duration::from_secs(60), client)
            .await
            .expect("every client had an answer within 60 s")
            .unwrap();
        if head.starts_with("http/1.1 200") {
            sending.push(conn);
        } else {
            assert!(head.starts_with("http/1.1 503"), "{head}");
            assert!(head.contains("\r\nretry-after: 5\r\n"), "{head}");
            refused += 1;
        }
    }
    let (rss, peak) = (
        memory_mib(svc.pid(), "VmRSS"),
        memory_mib(svc.pid(), "VmHWM"),
    );
    println!(
        "service memory with 60 slow downloads of a 20 MiB file: {rss} MiB resident \
         ({rss_before} MiB before, peak {peak} MiB)"
    );
    assert_eq!((sending.len(), refused), (16, 44));
    assert!(
        peak < 400,
        "the service peaked at {peak} MiB with 16 files being sent"
    );
    // One client leaves; the next request gets its place and the whole file.
    drop(sending.pop());
    let r = svc.http.get(svc.url(&path)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap() == big, "the streamed bytes differ");
}

/// An A2A `SendMessage` starting a task with `text`, blocking (no `returnImmediately`).
fn a2a_blocking_send(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]},
    }})
}

/// Issue 37, item 14: a blocking A2A `SendMessage` waits at most `[server]
/// blocking_wait_secs` for its task to end or need input; then it answers with the task as
/// it stands (working), and the task goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_a2a_send_answers_after_blocking_wait_secs() {
    let server = ScriptedLlm::start().await;
    // The planner's answer takes ten minutes: the task stays working.
    server.push_all([plan_reply(&["[MANUS] Wait"]).delay(600_000)]);
    let dir = Scratch::new("serve-a2a-wait");
    let config = config(
        &server,
        &dir,
        &[
            ("server.blocking_wait_secs", "2"),
            ("llm.timeout_secs", "900"),
            ("flow.flow_timeout_secs", "900"),
        ],
    );
    let svc = Service::start(&dir, &config).await;
    let sent = std::time::Instant::now();
    let answer: Value = svc
        .http
        .post(svc.url("/a2a"))
        .json(&a2a_blocking_send("wait for the model"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the blocking SendMessage was answered within a minute")
        .json()
        .await
        .unwrap();
    let waited = sent.elapsed();
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{answer}");
    assert!(
        waited >= Duration::from_secs(2),
        "answered after {waited:?}"
    );
    let shown: Value = svc
        .http
        .post(svc.url("/a2a"))
        .json(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        shown["result"]["status"]["state"], "TASK_STATE_WORKING",
        "{shown}"
    );
}

/// Issue 37, item 14: with `max_connections = 8`, blocking A2A sends and event streams take
/// at most 7 connections (a stream past that is a 503 that says why), so a health check
/// and a cancel still get in on a fresh connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_blocking_waits_leave_room_for_health_and_cancels() {
    let server = ScriptedLlm::start().await;
    server.push_all((0..8).map(|_| plan_reply(&["[MANUS] Wait"]).delay(600_000)));
    let dir = Scratch::new("serve-long-held");
    let config = config(
        &server,
        &dir,
        &[
            ("server.max_connections", "8"),
            ("server.blocking_wait_secs", "600"),
            ("llm.timeout_secs", "900"),
            ("flow.flow_timeout_secs", "900"),
        ],
    );
    let svc = Service::start(&dir, &config).await;
    let target = svc.submit("the flow to cancel").await;
    // Each request on a connection of its own.
    let client = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let long = client();
    let mut waits = vec![];
    for i in 0..4 {
        let send = long
            .post(svc.url("/a2a"))
            .json(&a2a_blocking_send(&format!("blocking send {i}")));
        waits.push(tokio::spawn(send.send()));
    }
    // Each has its place once its flow is started: the service lists five.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = svc.get("/v1/flows").await;
        if list["flows"].as_array().unwrap().len() == 5 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut streams, mut refused) = (vec![], vec![]);
    for _ in 0..5 {
        let events = long.get(svc.url(&format!("/v1/flows/{target}/events")));
        match events.timeout(Duration::from_secs(30)).send().await {
            Ok(r) if r.status() == 200 => streams.push(r),
            Ok(r) => refused.push((r.status().as_u16(), r.text().await.unwrap())),
            Err(e) => refused.push((0, e.to_string())),
        }
    }
    // Every place for long answers is taken; a fresh connection still gets in.
    let fresh = client();
    let answered = tokio::time::timeout(Duration::from_secs(30), async {
        let health = fresh.get(svc.url("/healthz")).send().await;
        let cancel = fresh
            .delete(svc.url(&format!("/v1/flows/{target}")))
            .send()
            .await;
        (
            health
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string()),
            cancel
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string()),
        )
    })
    .await
    .expect("the health check and the cancel were answered");
    assert_eq!(answered, (Ok(200), Ok(202)));
    // Seven of the eight connections took long answers: four waits, three streams.
    assert_eq!(streams.len(), 3, "{refused:?}");
    for (status, text) in &refused {
        assert_eq!(*status, 503, "{text}");
        assert!(text.contains("max_connections = 8"), "{text}");
    }
    // The cancelled flow's streams end.
    for stream in streams {
        let text = tokio::time::timeout(Duration::from_secs(30), stream.text())
            .await
            .expect("the stream of the cancelled flow ended")
            .unwrap();
        assert!(text.contains("flow_finished"), "{text}");
    }
    for wait in &waits {
        assert!(
            !wait.is_finished(),
            "a blocking send answered before its wait"
        );
    }
}
