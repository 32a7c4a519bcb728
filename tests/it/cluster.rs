//! Cluster mode against the test suite's PostgreSQL, with real `manus-rt serve` processes on
//! 127.0.0.1 sharing one store and one scripted model: flows submitted to any node all
//! complete, spread over the nodes; a node SIGKILLed mid-run has its flows finished by the
//! others, no completed step run again; a node paused (SIGSTOP) past its lease and then let
//! go on writes nothing to the runs taken from it; any node streams any run's events in
//! order, and takes its answers, approvals and cancels, over the JSON API and over A2A.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::cluster::{Node, any_flow, cluster, flow, logged_flow, owner_of, submit};
use crate::support::llm_server::{Reply, Request, Responder, ScriptedLlm};
use crate::support::scenario::{Scratch, postgres_database};

/// The test server's fresh database, a scripted model answering `any_flow(secs)`, and `n`
/// nodes on them with a `lease` in seconds; `None` (the test is skipped) without the server.
async fn started(
    name: &str,
    n: usize,
    lease: u64,
    secs: f64,
) -> Option<(ScriptedLlm, Scratch, Vec<Node>, reqwest::Client)> {
    let (server, dir, nodes, http, _) = started_with(name, n, lease, any_flow(secs)).await?;
    Some((server, dir, nodes, http))
}

/// `started` with the model answering by `responder`; the store's URL too.
async fn started_with(
    name: &str,
    n: usize,
    lease: u64,
    responder: Responder,
) -> Option<(ScriptedLlm, Scratch, Vec<Node>, reqwest::Client, String)> {
    let store = postgres_database()?;
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    server.set_responder(Some(responder));
    let dir = Scratch::new(name);
    let nodes = cluster(&dir, &server, &store, n, lease).await;
    Some((server, dir, nodes, reqwest::Client::new(), store))
}

/// Every run of the store as `node` lists them, by id.
async fn runs(http: &reqwest::Client, node: &Node) -> HashMap<String, Value> {
    let body: Value = http
        .get(format!("{}/v1/flows", node.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap().to_string(), f.clone()))
        .collect()
}

/// Wait until every run of `ids` is completed, as `node` sees them.
async fn all_completed(http: &reqwest::Client, node: &Node, ids: &[String], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut left = vec![];
        for id in ids {
            let run: Value = flow(http, node, id).await;
            match run["status"].as_str() {
                Some("completed") => {}
                Some("queued" | "running") => left.push(format!("{id}: {}", run["status"])),
                _ => panic!("{id} ended otherwise: {run}"),
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "not completed in time: {left:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A run's events as `node` streams them, to its end.
async fn events(http: &reqwest::Client, node: &Node, id: &str) -> Vec<(u64, Value)> {
    let text = http
        .get(format!("{}/v1/flows/{id}/events", node.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut out = vec![];
    let mut seq = 0;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("id: ") {
            seq = n.parse().unwrap();
        } else if let Some(data) = line.strip_prefix("data: ") {
            out.push((seq, serde_json::from_str(data).unwrap()));
        }
    }
    out
}

/// The stored history of a run holds one end, and no completed step started again.
fn one_history(id: &str, events: &[(u64, Value)]) {
    let numbers: Vec<u64> = events.iter().map(|(n, _)| *n).collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "{id}: events out of order: {numbers:?}"
    );
    let finished = events
        .iter()
        .filter(|(_, e)| e["event"] == "flow_finished")
        .count();
    assert_eq!(finished, 1, "{id}");
    let mut completed = std::collections::HashSet::new();
    for (_, e) in events {
        let step = e["step"].as_u64();
        match e["event"].as_str() {
            Some("step_finished") if e["status"] == "completed" => {
                assert!(
                    completed.insert(step),
                    "{id}: step {step:?} completed twice"
                );
            }
            Some("step_started") => {
                assert!(
                    !completed.contains(&step),
                    "{id}: completed step {step:?} started again"
                );
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_share_three_hundred_flows() {
    let Some((_server, _dir, nodes, http)) = started("cluster-300", 3, 5, 0.0).await else {
        return;
    };
    let mut ids = vec![];
    for i in 0..300 {
        ids.push(submit(&http, &nodes[i % 3], &format!("flow {i}")).await);
    }
    all_completed(&http, &nodes[0], &ids, Duration::from_secs(600)).await;
    let mut per_node = [0; 3];
    for id in &ids {
        let run: Value = flow(&http, &nodes[2], id).await;
        if let Some(n) = owner_of(&nodes, &run) {
            per_node[n] += 1;
        }
    }
    assert_eq!(per_node.iter().sum::<usize>(), 300, "{per_node:?}");
    assert!(
        per_node.iter().all(|&n| n > 0),
        "every node ran flows: {per_node:?}"
    );
    // A node that did not run it streams any run, in order, to its end.
    for id in ids.iter().step_by(25) {
        let run: Value = flow(&http, &nodes[0], id).await;
        let elsewhere = (owner_of(&nodes, &run).unwrap() + 1) % 3;
        one_history(id, &events(&http, &nodes[elsewhere], id).await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_nodes_flows_finish_on_the_others() {
    let Some((_server, _dir, mut nodes, http)) = started("cluster-kill", 3, 3, 1.5).await else {
        return;
    };
    let mut ids = vec![];
    for i in 0..9 {
        ids.push(submit(&http, &nodes[i % 3], &format!("slow flow {i}")).await);
    }
    // Once every flow runs somewhere, kill the node that runs the most.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let all = runs(&http, &nodes[0]).await;
    let mut held = [0; 3];
    for id in &ids {
        if all[id]["status"] == "running"
            && let Some(n) = owner_of(&nodes, &all[id])
        {
            held[n] += 1;
        }
    }
    let victim = (0..3).max_by_key(|&n| held[n]).unwrap();
    assert!(held[victim] > 0, "{held:?}");
    let taken: Vec<&String> = ids
        .iter()
        .filter(|id| all[*id]["status"] == "running" && owner_of(&nodes, &all[*id]) == Some(victim))
        .collect();
    let killed = nodes.remove(victim);
    killed.signal("-KILL");
    all_completed(&http, &nodes[0], &ids, Duration::from_secs(120)).await;
    for id in &ids {
        let history = events(&http, &nodes[1], id).await;
        one_history(id, &history);
    }
    // The killed node's runs were taken over: they resumed on another node.
    let now = runs(&http, &nodes[1]).await;
    for id in taken {
        assert!(
            !now[id]["node"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{}:", killed.name)),
            "{id} still names the killed node"
        );
        let history = events(&http, &nodes[0], id).await;
        assert!(
            history.iter().any(|(_, e)| e["event"] == "resumed"),
            "{id} was not resumed"
        );
        // One of the two nodes holds it, the other reads it from the store: both number
        // its events as stored, so a stream resumes on either.
        let elsewhere = events(&http, &nodes[1], id).await;
        assert_eq!(
            history, elsewhere,
            "{id}: the nodes number its events apart"
        );
        // Its history starts twice (once per node); as AG-UI it is one run, on both nodes.
        for node in &nodes {
            let agui = agui_events(&http, node, id).await;
            let count = |kind: &str| agui.iter().filter(|e| e["type"] == kind).count();
            assert_eq!(count("RUN_STARTED"), 1, "{id} on {}: {agui:?}", node.name);
            assert_eq!(count("RUN_FINISHED"), 1, "{id} on {}: {agui:?}", node.name);
            assert_eq!(agui[0]["type"], "RUN_STARTED", "{id}: {agui:?}");
        }
    }
}

/// A run's AG-UI events as `node` streams them, to its end.
async fn agui_events(http: &reqwest::Client, node: &Node, id: &str) -> Vec<Value> {
    let text = http
        .get(format!("{}/v1/flows/{id}/events?protocol=ag-ui", node.url))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// A stream of a finished run resumed with `Last-Event-ID` (as every EventSource does when
/// a stream ends) ends at once, empty, when it is at or past the run's last event, on the
/// node that ran it and on the one that did not; before the end it sends only what is
/// left; a number no event can have is a 400, never a replay from the start.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_resumed_at_a_finished_runs_end_ends_at_once() {
    let Some((_server, _dir, nodes, http)) = started("cluster-resume", 2, 5, 0.0).await else {
        return;
    };
    let id = submit(&http, &nodes[0], "a short flow").await;
    all_completed(
        &http,
        &nodes[0],
        std::slice::from_ref(&id),
        Duration::from_secs(60),
    )
    .await;
    let history = events(&http, &nodes[0], &id).await;
    let last = history.last().unwrap().0;
    assert!(last > 3, "{history:?}");
    let resumed = |node: &Node, from: String| {
        let call = http
            .get(format!("{}/v1/flows/{id}/events", node.url))
            .header("Last-Event-ID", from)
            .send();
        async move {
            // The test's own bound: a stream that never ends fails here, not by hanging.
            let answer = tokio::time::timeout(Duration::from_secs(20), async {
                let r = call.await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            })
            .await;
            answer.expect("the stream did not end")
        }
    };
    for node in &nodes {
        for from in [last, last + 5] {
            let (status, text) = resumed(node, from.to_string()).await;
            assert_eq!(status, 200, "{text}");
            assert!(
                !text.contains("data:"),
                "from {from} on {}: {text}",
                node.name
            );
        }
        let (status, text) = resumed(node, (last - 2).to_string()).await;
        assert_eq!(status, 200, "{text}");
        let ids: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .collect();
        let want = [(last - 1).to_string(), last.to_string()];
        assert_eq!(ids, want, "on {}: {text}", node.name);
        for from in [1u64 << 63, u64::MAX] {
            let (status, text) = resumed(node, from.to_string()).await;
            assert_eq!(status, 400, "from {from} on {}: {text}", node.name);
            assert!(text.contains("9223372036854775807"), "{text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_paused_past_its_lease_writes_nothing_and_acts_no_more() {
    let Some(store) = postgres_database() else {
        return;
    };
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    let dir = Scratch::new("cluster-stop");
    let ran = dir.path().join("ran.log");
    server.set_responder(Some(logged_flow(1.5, Some(ran.clone()))));
    let nodes = cluster(&dir, &server, &store, 2, 3).await;
    let http = reqwest::Client::new();
    let mut ids = vec![];
    for i in 0..4 {
        ids.push(submit(&http, &nodes[0], &format!("paused flow {i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = runs(&http, &nodes[1]).await;
    let paused = (0..2)
        .max_by_key(|&n| {
            ids.iter()
                .filter(|id| {
                    owner_of(&nodes, &all[*id]) == Some(n) && all[*id]["status"] == "running"
                })
                .count()
        })
        .unwrap();
    let other = 1 - paused;
    nodes[paused].signal("-STOP");
    // Past the lease (3 s) and the time the other node needs to take the runs over.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let resumed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    nodes[paused].signal("-CONT");
    all_completed(&http, &nodes[other], &ids, Duration::from_secs(120)).await;
    // Let the paused node's flows try to go on, act and write.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in &ids {
        one_history(id, &events(&http, &nodes[other], id).await);
    }
    let log = nodes[paused].log();
    assert!(log.contains("this node's leases lapsed"), "{log}");
    // A command it started before the pause may end during it; after the pause, the node
    // starts nothing: its own clock says its leases lapsed.
    let workspace = dir.path().join(&nodes[paused].name);
    let lines = std::fs::read_to_string(&ran).unwrap();
    let late: Vec<&str> = lines
        .lines()
        .filter(|l| {
            let (at, place) = l.split_once(' ').unwrap();
            place.starts_with(&*workspace.to_string_lossy())
                && at.parse::<i64>().unwrap() >= resumed_at
        })
        .collect();
    assert!(
        late.is_empty(),
        "the paused node ran commands after it was let go on:\n{}\n(all:\n{lines})",
        late.join("\n")
    );
}

/// Issue 37, item 7: a `running` run with no lease row and no live owner (its lease row
/// lost, its process gone) is an orphan, and a node claims it and finishes it.
#[tokio::test(flavor = "multi_thread")]
async fn an_orphaned_running_run_is_claimed() {
    let Some((_server, _dir, nodes, http, url)) =
        started_with("cluster-orphan", 2, 3, any_flow(2.0)).await
    else {
        return;
    };
    let id = submit(&http, &nodes[0], "an orphan to be").await;
    let holder = running_on(&http, &nodes, &id).await;
    nodes[holder].signal("-KILL");
    let owner = flow(&http, &nodes[1 - holder], &id).await["node"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::task::block_in_place(|| {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        db.execute("DELETE FROM manus_leases WHERE run_id = $1", &[&id])
            .unwrap();
        db.execute("DELETE FROM manus_owners WHERE id = $1", &[&owner])
            .unwrap();
    });
    all_completed(&http, &nodes[1 - holder], &[id], Duration::from_secs(60)).await;
}

/// Issue 37, item 3 on a cluster: PostgreSQL stopped for 20 s, four times the lease,
/// while two nodes run six flows. The nodes' own clocks stop their flows once their leases
/// lapse; what they wrote before waits and lands when the store is back; then every run is
/// taken up from its last completed step and ends `completed`, by itself, each completed
/// step run once. Prints how long that took after the store came back.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_converges_after_a_twenty_second_store_outage() {
    use crate::support::cluster::PrivatePostgres;
    if postgres_database().is_none() {
        return;
    }
    // The PostgreSQL client blocks: off the runtime's own threads.
    let mut pg = tokio::task::block_in_place(PrivatePostgres::start);
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    server.set_responder(Some(any_flow(1.0)));
    let dir = Scratch::new("cluster-outage");
    let nodes = cluster(&dir, &server, &pg.url, 2, 5).await;
    let http = reqwest::Client::new();
    let mut ids = vec![];
    for i in 0..6 {
        ids.push(submit(&http, &nodes[i % 2], &format!("outage flow {i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    tokio::task::block_in_place(|| pg.stop());
    tokio::time::sleep(Duration::from_secs(20)).await;
    tokio::task::block_in_place(|| pg.restart());
    let back = Instant::now();
    let deadline = back + Duration::from_secs(120);
    loop {
        let mut left = vec![];
        for id in &ids {
            let read = http
                .get(format!("{}/v1/flows/{id}", nodes[0].url))
                .send()
                .await;
            let run = match read {
                Ok(r) => r.json::<Value>().await.unwrap_or_default(),
                Err(_) => Value::Null,
            };
            match run["status"].as_str() {
                Some("completed") => {}
                Some("failed" | "cancelled") => panic!(
                    "{id} ended otherwise: {run}\nits events: {:?}\n{}\n{}",
                    events(&http, &nodes[0], id).await,
                    nodes[0].log(),
                    nodes[1].log()
                ),
                _ => left.push(format!("{id}: {}", run["status"])),
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not converged: {left:?}\n{}\n{}",
            nodes[0].log(),
            nodes[1].log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "every run completed {:?} after the store came back",
        back.elapsed()
    );
    for id in &ids {
        one_history(id, &events(&http, &nodes[0], id).await);
    }
    let logs = nodes[0].log() + &nodes[1].log();
    assert!(logs.contains("this node's leases lapsed"), "{logs}");
}

/// The node (by index) that runs flow `id`, once one does.
async fn running_on(http: &reqwest::Client, nodes: &[Node], id: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let run: Value = flow(http, &nodes[0], id).await;
        if run["status"] == "running"
            && let Some(n) = owner_of(nodes, &run)
        {
            return n;
        }
        assert!(Instant::now() < deadline, "{id} never ran: {run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A model for steering: a one-step plan whose step asks "Which colour?" when the task
/// says colour (then ends saying the answer), or else waits a minute in `bash`.
fn steering() -> Responder {
    Arc::new(|r: &Request| {
        let body = r.json();
        let tools = r.tool_names();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let task = messages
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .unwrap_or_default();
        if tools.contains(&"planning") {
            return Some(Reply::tool(
                "planning",
                json!({"command": "create", "plan_id": "p", "title": "One", "steps": ["[MANUS] the one part"]}),
            ));
        }
        if tools.is_empty() {
            return Some(Reply::text("Done."));
        }
        let results: Vec<String> = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].to_string())
            .collect();
        Some(match results.last() {
            None if task.contains("colour") => {
                Reply::tool("ask_human", json!({"inquire": "Which colour?"}))
            }
            None => Reply::tool("bash", json!({"command": "sleep 60"})),
            Some(answer) => Reply::tool("terminate", json!({"status": "success"}))
                .with_text(&format!("the person said {answer}")),
        })
    })
}

/// The node that does not run a flow takes its answers and cancels (and approvals) and
/// the node that runs it carries them out, through the store, within a second or so.
#[tokio::test(flavor = "multi_thread")]
async fn answers_and_cancels_reach_the_node_running_the_flow() {
    let Some((server, _dir, nodes, http)) = started("cluster-commands", 2, 5, 0.0).await else {
        return;
    };
    server.set_responder(Some(steering()));
    let asking = submit(&http, &nodes[0], "ask for a colour").await;
    let slow = submit(&http, &nodes[0], "wait a long time").await;
    // Where each runs, once it runs.
    let running = running_on(&http, &nodes, &asking).await;
    let elsewhere = 1 - running;
    // The question, as the node running the flow shows it; the other node answers it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let question = loop {
        let run: Value = flow(&http, &nodes[running], &asking).await;
        if let Some(q) = run["questions"].as_array().and_then(|q| q.first()) {
            break q["id"].as_u64().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the question never opened: {run}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Its event reaches the store within a batch: the other node lists it too (folded from
    // the stored events), and takes the answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let run: Value = flow(&http, &nodes[elsewhere], &asking).await;
        let listed = run["questions"].as_array().is_some_and(|q| {
            q.iter()
                .any(|q| q["id"] == question && q["inquire"] == "Which colour?")
        });
        if listed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the other node never showed the question: {run}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = http
        .post(format!(
            "{}/v1/flows/{asking}/answers",
            nodes[elsewhere].url
        ))
        .json(&json!({"question_id": question, "text": "teal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    all_completed(
        &http,
        &nodes[elsewhere],
        std::slice::from_ref(&asking),
        Duration::from_secs(30),
    )
    .await;
    let run: Value = flow(&http, &nodes[elsewhere], &asking).await;
    assert!(
        run["plan"]["steps"][0]["notes"]
            .as_str()
            .unwrap()
            .contains("teal"),
        "{run}"
    );

    let elsewhere = 1 - running_on(&http, &nodes, &slow).await;
    let sent = Instant::now();
    let r = http
        .delete(format!("{}/v1/flows/{slow}", nodes[elsewhere].url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run: Value = flow(&http, &nodes[elsewhere], &slow).await;
        if run["status"] == "cancelled" {
            break;
        }
        assert!(Instant::now() < deadline, "not cancelled: {run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
}

/// SIGTERM drains a node: it takes no more flows, gives its running ones `drain_secs`, hands
/// the rest back and exits cleanly; the other node resumes them, and a stream picked up
/// elsewhere with `Last-Event-ID` goes on from the next event.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_a_node_and_hands_its_flows_back() {
    let Some((_server, _dir, mut nodes, http)) = started("cluster-drain", 2, 5, 4.0).await else {
        return;
    };
    let mut ids = vec![];
    for i in 0..4 {
        ids.push(submit(&http, &nodes[i % 2], &format!("long flow {i}")).await);
    }
    // Once both nodes run flows, stop the first.
    let deadline = Instant::now() + Duration::from_secs(30);
    let held = loop {
        let mut held = vec![];
        for id in &ids {
            let run = flow(&http, &nodes[1], id).await;
            if run["status"] == "running" && owner_of(&nodes, &run) == Some(0) {
                held.push(id.clone());
            }
        }
        if !held.is_empty() {
            break held;
        }
        assert!(Instant::now() < deadline, "node-1 never ran a flow");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    nodes[0].signal("-TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let exited = loop {
        if let Some(status) = nodes[0].child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the node did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exited.success(), "{exited}: {}", nodes[0].log());
    assert!(
        nodes[0].log().contains("unfinished flow(s) back"),
        "{}",
        nodes[0].log()
    );
    all_completed(&http, &nodes[1], &ids, Duration::from_secs(60)).await;
    for id in &held {
        let history = events(&http, &nodes[1], id).await;
        one_history(id, &history);
        assert!(
            history.iter().any(|(_, e)| e["event"] == "resumed"),
            "{id} was not handed over"
        );
    }
    // Resumed by number on the node left.
    let text = http
        .get(format!("{}/v1/flows/{}/events", nodes[1].url, ids[0]))
        .header("Last-Event-ID", "3")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let first = text.lines().find_map(|l| l.strip_prefix("id: "));
    assert_eq!(first, Some("4"), "{text}");
}

/// One A2A JSON-RPC call to `node`; the `result` (the test fails on an `error`, or on no
/// answer within a minute).
async fn a2a(http: &reqwest::Client, node: &Node, method: &str, params: Value) -> Value {
    let call = http
        .post(format!("{}/a2a", node.url))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .timeout(Duration::from_secs(60))
        .send();
    let answer: Value = call.await.unwrap().json().await.unwrap();
    assert!(answer["error"].is_null(), "{method}: {answer}");
    answer["result"].clone()
}

fn a2a_message(text: &str, task: Option<&str>) -> Value {
    let mut m =
        json!({"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m
}

/// `SendMessage` of a new task to `node`, answered at once: the task's id (it is queued).
async fn a2a_start(http: &reqwest::Client, node: &Node, text: &str) -> String {
    let started = a2a(
        http,
        node,
        "SendMessage",
        json!({"message": a2a_message(text, None), "configuration": {"returnImmediately": true}}),
    )
    .await;
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
            .contains(&started["task"]["status"]["state"].as_str().unwrap()),
        "{started}"
    );
    started["task"]["id"].as_str().unwrap().to_string()
}

/// A2A on a cluster: the official SDK's client runs a task through one node (queued, run
/// by whichever node has room, its question answered); and any node takes a task's answer,
/// shows it and cancels it when another node runs it, through the store.
#[tokio::test(flavor = "multi_thread")]
async fn a2a_tasks_run_on_any_node_and_are_steered_from_any_node() {
    let Some((server, _dir, nodes, http)) = started("cluster-a2a", 2, 5, 0.0).await else {
        return;
    };
    server.set_responder(Some(steering()));
    let python = std::env::var("MANUS_TEST_MCP_PYTHON").unwrap_or_else(|_| {
        panic!("MANUS_TEST_MCP_PYTHON is not set: run the suite with scripts/test.sh, which installs the A2A SDK")
    });
    let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a_client.py");
    let out = tokio::process::Command::new(&python)
        .arg(&client)
        .arg(&nodes[0].url)
        .args(["--timeout", "60", "--text", "pick a colour", "--stream"])
        .args(["--answer", "teal"])
        .output()
        .await
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{lines:?}\n{stderr}");
    assert!(
        lines.iter().any(|l| l["state"] == "input-required"),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().unwrap()["final_state"],
        "completed",
        "{lines:?}"
    );

    // A task started on one node, steered through the node that does not run it; the
    // question's event reaches the store within a batch, then that node shows it.
    let task = a2a_start(&http, &nodes[0], "choose a colour").await;
    let other = &nodes[1 - running_on(&http, &nodes, &task).await];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = a2a(&http, other, "GetTask", json!({"id": task})).await;
        if shown["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" {
            assert_eq!(
                shown["status"]["message"]["parts"][0]["text"],
                "Which colour?"
            );
            break;
        }
        assert!(Instant::now() < deadline, "not shown elsewhere: {shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = a2a(
        &http,
        other,
        "SendMessage",
        json!({"message": a2a_message("ochre", Some(&task))}),
    )
    .await;
    assert_eq!(
        done["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    // The answer reached the agent: its step's notes say what the person said.
    let run = flow(&http, other, &task).await;
    assert!(
        run["plan"]["steps"][0]["notes"]
            .as_str()
            .unwrap()
            .contains("ochre"),
        "{run}"
    );
    let shown = a2a(&http, other, "GetTask", json!({"id": task})).await;
    assert_eq!(shown["artifacts"][0]["name"], "result", "{shown}");

    // Cancelled through the node that does not run it.
    let slow = a2a_start(&http, &nodes[0], "wait a long time").await;
    let elsewhere = 1 - running_on(&http, &nodes, &slow).await;
    let cancelled = a2a(&http, &nodes[elsewhere], "CancelTask", json!({"id": slow})).await;
    assert_eq!(
        cancelled["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
}

/// Conversations on a cluster: a turn submitted through node A is continued through node B
/// (`POST /v1/flows/{id}/follow-up`, queued like any run and claimed by whichever node has
/// room); the follow-up's model requests show the first turn, and both nodes list the
/// thread's two turns.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_started_through_one_node_is_continued_through_the_other() {
    let Some((server, _dir, nodes, http)) = started("cluster-thread", 2, 5, 0.0).await else {
        return;
    };
    server.set_recording(true);
    let first = submit(&http, &nodes[0], "Count the parts").await;
    all_completed(
        &http,
        &nodes[0],
        std::slice::from_ref(&first),
        Duration::from_secs(60),
    )
    .await;
    let r = http
        .post(format!("{}/v1/flows/{first}/follow-up", nodes[1].url))
        .json(&json!({"task": "Now count them again"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "queued");
    let second = body["id"].as_str().unwrap().to_string();
    all_completed(
        &http,
        &nodes[1],
        std::slice::from_ref(&second),
        Duration::from_secs(60),
    )
    .await;
    let planning = server
        .requests()
        .into_iter()
        .map(|r| r.first_user_text())
        .find(|t| t.contains("Now count them again") && t.contains("Task (this turn"))
        .expect("the follow-up's planning request");
    assert!(
        planning.contains("Turn 0: Count the parts") && planning.contains("Both parts are done."),
        "{planning}"
    );
    for node in &nodes {
        let thread: Value = http
            .get(format!("{}/v1/threads/{second}", node.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ids: Vec<&str> = thread["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [first.as_str(), second.as_str()],
            "{}: {thread}",
            node.name
        );
    }
}
