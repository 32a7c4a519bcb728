//! Cluster: three `manus-rt serve` nodes on 127.0.0.1 sharing one PostgreSQL store and a
//! scripted model that answers at once. Flows (a two-step plan, one `bash` call and a
//! `terminate` per step, a summary) are submitted round-robin to the nodes as fast as they
//! are accepted; the figures:
//!
//! - flows per second, from the first submission to the last completion;
//! - claim latency, p50 and p99: from a run's queuing (`created_at`) to its first stored
//!   event (the node that claimed it started it), both from the store;
//! - store statements per flow: the nodes' `manus_store_statements_total`, over the flows
//!   (each transaction's BEGIN and COMMIT counted, heartbeats and claims included);
//! - takeover time: slow flows run, the node holding most of them is SIGKILLed; from the
//!   kill to each of its runs' `resumed` event on another node (lease `LEASE` s).
//!
//! `cargo bench --bench cluster`; `FLOWS` (default 300), `LEASE` (default 5). The store is
//! `MANUS_TEST_POSTGRES_URL`'s server (a fresh database), else a PostgreSQL server started
//! for the run (Debian's postgresql). It prints figures and asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use manus_rt::store::now_ms;
use serde_json::Value;
use support::cluster::{PrivatePostgres, any_flow, cluster, flow, owner_of, submit};
use support::llm_server::ScriptedLlm;
use support::scenario::{Scratch, env_or, postgres_database};

/// Rows of `sql` on the store, off the async threads (the client blocks).
async fn query(url: &str, sql: &'static str) -> Vec<postgres::Row> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        db.query(sql, &[]).unwrap()
    })
    .await
    .unwrap()
}

async fn statements(http: &reqwest::Client, url: &str) -> u64 {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("manus_store_statements_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn wait_completed(url: &str, count: i64) {
    loop {
        let rows = query(url, "SELECT count(*) FROM manus_runs WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')").await;
        let done: i64 = rows[0].get(0);
        if done >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    // The store's server is started (and stopped) outside the async runtime: its client
    // blocks.
    let private;
    let url = match postgres_database() {
        Some(url) => url,
        None => {
            private = PrivatePostgres::start();
            private.url.clone()
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(&url));
}

async fn bench(url: &str) {
    let url = url.to_string();
    let flows = env_or("FLOWS", 300) as usize;
    let lease = env_or("LEASE", 5);
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    server.set_responder(Some(any_flow(0.0)));
    let dir = Scratch::new("bench-cluster");
    let mut nodes = cluster(&dir, &server, &url, 3, lease).await;
    let http = reqwest::Client::new();

    let before: u64 = {
        let mut s = 0;
        for n in &nodes {
            s += statements(&http, &n.url).await;
        }
        s
    };
    let started = Instant::now();
    for i in 0..flows {
        submit(&http, &nodes[i % 3], &format!("flow {i}")).await;
    }
    let submitted = started.elapsed();
    wait_completed(&url, flows as i64).await;
    let took = started.elapsed();
    let mut after = 0;
    for n in &nodes {
        after += statements(&http, &n.url).await;
    }
    let failed: i64 = query(
        &url,
        "SELECT count(*) FROM manus_runs WHERE status <> 'completed'",
    )
    .await[0]
        .get(0);
    let rows = query(
        &url,
        "SELECT r.created_at, e.at FROM manus_runs r JOIN manus_events e ON e.run_id = r.id AND e.seq = 0",
    )
    .await;
    let mut latency: Vec<i64> = rows
        .iter()
        .map(|r| r.get::<_, i64>(1) - r.get::<_, i64>(0))
        .collect();
    latency.sort();
    println!(
        "cluster of 3 nodes, {flows} flows (2 steps each) submitted round-robin in {:.2} s, all ended in {:.2} s ({} not completed)",
        submitted.as_secs_f64(),
        took.as_secs_f64(),
        failed
    );
    println!(
        "  flows per second:            {:.1}",
        flows as f64 / took.as_secs_f64()
    );
    println!(
        "  claim latency (queued → started): p50 {} ms, p99 {} ms, max {} ms",
        percentile(&latency, 0.5),
        percentile(&latency, 0.99),
        latency.last().unwrap()
    );
    println!(
        "  store statements per flow:   {:.1} ({} in all, heartbeats and claims included)",
        (after - before) as f64 / flows as f64,
        after - before
    );

    // Takeover: slow flows, then the node holding the most is killed.
    server.set_responder(Some(any_flow(3.0)));
    let mut slow = vec![];
    for i in 0..9 {
        slow.push(submit(&http, &nodes[i % 3], &format!("slow flow {i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut held: Vec<Vec<String>> = vec![vec![]; 3];
    for id in &slow {
        let run: Value = flow(&http, &nodes[0], id).await;
        if run["status"] == "running"
            && let Some(n) = owner_of(&nodes, &run)
        {
            held[n].push(id.clone());
        }
    }
    let victim = (0..3).max_by_key(|&n| held[n].len()).unwrap();
    let killed_at = now_ms();
    nodes[victim].signal("-KILL");
    let taken = held[victim].clone();
    let killed = nodes.remove(victim);
    wait_completed(&url, (flows + slow.len()) as i64).await;
    let rows = query(
        &url,
        "SELECT run_id, at FROM manus_events WHERE kind = 'resumed'",
    )
    .await;
    let mut takeover: Vec<i64> = rows
        .iter()
        .filter(|r| taken.contains(&r.get::<_, String>(0)))
        .map(|r| r.get::<_, i64>(1) - killed_at)
        .collect();
    takeover.sort();
    println!(
        "  takeover after SIGKILL of {} ({} running flows, lease {lease} s): first resumed after {} ms, last after {} ms",
        killed.name,
        taken.len(),
        takeover.first().copied().unwrap_or(-1),
        takeover.last().copied().unwrap_or(-1)
    );
}
