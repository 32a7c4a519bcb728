//! Many flows at once on one runtime: FLOWS planned flows are submitted together, the
//! scripted OpenAI-compatible server answering every model call after MODEL_MS over
//! loopback HTTP. Each flow is a plan of two [MANUS] steps of two think/act rounds (a cheap
//! in-process tool, then terminate) and a summary. The flows share the runtime's pool:
//! REPLICAS agent replicas (128 unless set) run steps, PLANNER_REPLICAS (64) make plan and
//! summary calls, and the rest queue in arrival order, as a service's flows do.
//!
//! The model server runs in a child process (this same binary, started with
//! `MANY_FLOWS_MODEL_SERVER` set), so what is measured here is the runtime alone: its CPU,
//! its memory, its time. The two processes still share the machine's cores, so the model
//! server reads what it needs of each request from the body's bytes rather than building a
//! JSON tree of every prompt, which cost it more CPU per call than the runtime spends.
//!
//! Prints flows/s, agent steps/s (think/act rounds), the runtime's CPU time per agent step
//! and per model call (and how much of it the run store's thread used), and:
//! - the step overhead: a plan step's time on its agent, from `StepStarted` to
//!   `StepFinished` as this bench reads them from the flow's event stream, minus the time
//!   the model server held the step's calls (as it measured them), per agent step; p50 and
//!   p99 over plan steps. The loopback HTTP exchange counts as the runtime's;
//! - the same step overhead's p99 in each fifth of the plan steps, in the order they began:
//!   the first fifth holds the start, when every flow is submitted and planned at once;
//! - how long steps waited for a replica (`StepStarted`'s `queued_ms`);
//! - how long submitting the flows took (`Runtime::submit`, one after another);
//! - a flow's whole time beyond the model's, per model call, waits included;
//! - the think/act turnaround: from the model's answer to the same step's next request, on
//!   the model server's clock;
//! - the runtime's peak RSS;
//! - how much of the machine's CPU time the hypervisor took for other guests during the run
//!   ("steal" in `/proc/stat`): on a shared VM the tail moves with it.
//!
//! `cargo bench --bench many_flows`; FLOWS, MODEL_MS and JITTER_MS can be set in the
//! environment. With JITTER_MS = J, flow i's model answers after MODEL_MS - J + (a fixed
//! per-flow offset in 0..=2J), so flows drift apart as real ones do; with 0 (the default)
//! every call of every flow takes exactly MODEL_MS and the flows move in lockstep, the worst
//! case. REPLICAS=FLOWS runs every step at once. RATE=R submits the flows at R per second
//! instead of all at once (an open-loop load). STORE=off runs without the run store.
//! WORKERS=N gives the runtime N tokio worker threads instead of 2 (one per core here).
//! WARM=N runs N planned flows at once before the measured ones instead of one, so the
//! model client's connection pool is already as large as the load needs.
//! DUMP=path writes each plan step's start (ms into the run) and overhead (ms per agent step),
//! one step a line, to see when in the run the tail happens. It asserts nothing but that
//! every flow completed.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use manus_rt::{
    Config, FlowEvent, FlowHandle, FlowMode, FlowOutcome, FlowStatus, Runtime, SubmitOptions,
};
use serde_json::{Value, json};
use support::llm_server::{Reply, Request, ScriptedLlm};
use support::scenario::{Scratch, config_with_for, plan_reply};

// The allocator the `manus-rt` binary uses.
manus_rt::use_mimalloc!();

/// Think/act rounds per step, and steps per flow.
const ROUNDS: u64 = 2;
const STEPS: u64 = 2;
/// Set in the child process that plays the model.
const CHILD: &str = "MANY_FLOWS_MODEL_SERVER";
/// The pool the flows share unless REPLICAS and PLANNER_REPLICAS say otherwise.
const DEFAULT_REPLICAS: u64 = 128;
const DEFAULT_PLANNER_REPLICAS: u64 = 64;

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long the model takes on flow `i`'s calls: MODEL_MS, moved by a fixed per-flow
/// offset within ±jitter.
fn model_ms_for(i: u64, model_ms: u64, jitter: u64) -> u64 {
    if jitter == 0 {
        return model_ms;
    }
    let offset = i.wrapping_mul(2_654_435_761) % (2 * jitter + 1);
    model_ms.saturating_sub(jitter) + offset
}

/// The first number that follows `cue` in the request's body, up to `end`. The body is
/// read as bytes: the cues and their numbers need no JSON escapes.
fn number_after(body: &[u8], cue: &str, end: u8) -> Option<u64> {
    let cue = cue.as_bytes();
    memchr::memmem::find_iter(body, cue).find_map(|at| {
        let rest = &body[at + cue.len()..];
        let digits = &rest[..rest.iter().position(|&b| b == end)?];
        std::str::from_utf8(digits).ok()?.parse().ok()
    })
}

/// The flow a request belongs to: every prompt carries the task, "Flow {i}: ...".
fn flow_of(body: &[u8]) -> Option<u64> {
    number_after(body, "Flow ", b':')
}

/// Which step of its flow an agent's request is for: agents are told "Your job now is step
/// N only".
fn step_of(body: &[u8]) -> Option<u64> {
    number_after(body, "Your job now is step ", b' ')
}

/// Whether the request's compact JSON holds `needle` (a key and its value, quotes and all):
/// inside a JSON string every quote is escaped, so such a pair cannot come from text.
fn holds(body: &[u8], needle: &str) -> bool {
    memchr::memmem::find(body, needle.as_bytes()).is_some()
}

/// Whether the request offers the model this tool: the tools come after the messages, and
/// an entry there names its tool as `"name":"..."`.
fn offers(body: &[u8], tool: &str) -> bool {
    memchr::memmem::rfind(body, br#""tools":["#)
        .is_some_and(|at| holds(&body[at..], &format!(r#""name":"{tool}""#)))
}

/// What the model server saw: how long it held each flow's calls in all, and, between two
/// rounds of one step, how long the runtime took from the model's answer to its next request.
#[derive(Default)]
struct Tally {
    held_us: HashMap<u64, u64>,
    /// Held time by (flow, step).
    step_held_us: HashMap<(u64, u64), u64>,
    answered: HashMap<(u64, u64), Instant>,
    gaps_us: Vec<u64>,
}

impl Tally {
    fn observe(&mut self, body: &[u8], held: Duration) {
        let Some(flow) = flow_of(body) else { return };
        let held_us = held.as_micros() as u64;
        *self.held_us.entry(flow).or_default() += held_us;
        if let Some(step) = step_of(body) {
            *self.step_held_us.entry((flow, step)).or_default() += held_us;
            let now = Instant::now();
            let arrived = now - held;
            if let Some(prev) = self.answered.insert((flow, step), now) {
                self.gaps_us
                    .push(arrived.saturating_duration_since(prev).as_micros() as u64);
            }
        }
    }

    fn report(&self) -> Value {
        let step_held: Vec<[u64; 3]> = self
            .step_held_us
            .iter()
            .map(|(&(flow, step), &us)| [flow, step, us])
            .collect();
        json!({"held": self.held_us, "step_held": step_held, "gaps": self.gaps_us})
    }
}

/// What one flow's event stream showed: when each step began on its agent and ended (as
/// read here, so the event delivery counts), and how long each waited for a replica.
#[derive(Default)]
struct Watched {
    began: HashMap<usize, Instant>,
    /// (step, when StepStarted came, its time from StepStarted to StepFinished)
    ran: Vec<(usize, Instant, Duration)>,
    queued_ms: Vec<u64>,
}

/// Read a flow's events to its end, timing its steps.
async fn watch(mut flow: FlowHandle) -> (Watched, FlowOutcome) {
    let mut w = Watched::default();
    while let Some(e) = flow.next_event().await {
        match e {
            FlowEvent::StepStarted {
                step, queued_ms, ..
            } => {
                w.began.insert(step, Instant::now());
                w.queued_ms.push(queued_ms);
            }
            FlowEvent::StepFinished { step, .. } => {
                if let Some(&t) = w.began.get(&step) {
                    w.ran.push((step, t, t.elapsed()));
                }
            }
            _ => {}
        }
    }
    (w, flow.outcome().await)
}

/// The model's answer, from the request's bytes alone: the planner gets a plan, an agent a
/// tool call (planning, then terminate once it has seen a tool result), the summary a
/// sentence.
fn answer(body: &[u8], model_ms: u64, jitter: u64) -> Reply {
    let reply = if offers(body, "terminate") {
        if holds(body, r#""role":"tool""#) {
            Reply::tool("terminate", json!({"status": "success"})).with_text("done")
        } else {
            Reply::tool(
                "planning",
                json!({"command": "create", "plan_id": "p", "title": "t", "steps": ["a"]}),
            )
        }
    } else if offers(body, "planning") {
        plan_reply(&["[MANUS] first half", "[MANUS] second half"])
    } else {
        Reply::text("Both halves are done.")
    };
    let ms = flow_of(body).map_or(model_ms, |i| model_ms_for(i, model_ms, jitter));
    reply.delay(ms)
}

/// The child: serve the model on 127.0.0.1 and print the base URL; then, for each line
/// `tally` on stdin, print its tally as JSON; stop when stdin closes.
fn serve_model(model_ms: u64, jitter: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = ScriptedLlm::start().await;
        server.set_recording(false);
        server.set_responder(Some(Arc::new(move |req: &Request| {
            Some(answer(req.raw(), model_ms, jitter))
        })));
        let tally: Arc<Mutex<Tally>> = Arc::default();
        let observed = tally.clone();
        server.set_hold_observer(Some(Arc::new(move |req: &Request, d: Duration| {
            observed.lock().unwrap().observe(req.raw(), d);
        })));
        println!("{}", server.base_url());
        std::io::stdout().flush().unwrap();
        tokio::task::spawn_blocking(move || {
            for line in std::io::stdin().lock().lines() {
                if line.unwrap_or_default().trim() == "tally" {
                    println!("{}", tally.lock().unwrap().report());
                    std::io::stdout().flush().unwrap();
                }
            }
        })
        .await
        .unwrap();
    });
}

/// The model server process; closing its stdin stops it, and it is waited for by PID.
struct ModelServer {
    child: Child,
    stdout: BufReader<ChildStdout>,
    base_url: String,
}

impl ModelServer {
    fn start() -> ModelServer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the model server process");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        ModelServer {
            child,
            stdout,
            base_url: line.trim().to_string(),
        }
    }

    fn cpu_secs(&self) -> f64 {
        cpu_secs(&format!("/proc/{}/stat", self.child.id()))
    }

    /// The model server's tally (see `Tally::report`).
    fn tally(&mut self) -> Value {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"tally\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).expect("the model server's tally")
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// User plus system CPU seconds of the process whose `stat` file this is.
fn cpu_secs(stat: &str) -> f64 {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3.
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    ticks as f64 / 100.0
}

/// CPU seconds of this process's threads named `name` (the run store's is `run-store`), so
/// the runtime's CPU can be split between the flows' threads and the store's.
fn threads_cpu_secs(name: &str) -> f64 {
    support::threads::named(name)
        .iter()
        .map(|t| cpu_secs(&t.join("stat").to_string_lossy()))
        .sum()
}

/// The machine's CPU time so far, from `/proc/stat`'s first line: all of it, and what the
/// hypervisor gave to other guests ("steal"). On a shared virtual machine, stolen time is
/// time no process here could run, so it shows how far a run's latencies are the host's.
struct MachineTicks {
    total: u64,
    steal: u64,
}

fn machine_ticks() -> MachineTicks {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    let fields: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    MachineTicks {
        total: fields.iter().sum(),
        steal: fields.get(7).copied().unwrap_or(0),
    }
}

impl MachineTicks {
    /// The share of the machine's CPU time since `before` that was stolen.
    fn stolen_since(&self, before: &MachineTicks) -> f64 {
        let total = self.total.saturating_sub(before.total);
        let steal = self.steal.saturating_sub(before.steal);
        if total == 0 {
            0.0
        } else {
            steal as f64 / total as f64
        }
    }
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn main() {
    let flows = env_or("FLOWS", 1000);
    let model_ms = env_or("MODEL_MS", 50);
    let jitter = env_or("JITTER_MS", 0).min(model_ms);
    if std::env::var_os(CHILD).is_some() {
        return serve_model(model_ms, jitter);
    }
    let store_on = std::env::var("STORE").map_or(true, |v| v != "off");
    let load = Load {
        flows,
        model_ms,
        jitter,
        rate: env_or("RATE", 0),
        replicas: env_or("REPLICAS", DEFAULT_REPLICAS),
        planner_replicas: env_or("PLANNER_REPLICAS", DEFAULT_PLANNER_REPLICAS),
        store_on,
    };
    let mut model = ModelServer::start();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("WORKERS", 2) as usize)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(&mut model, load));
}

/// What the benchmark offers the runtime.
struct Load {
    flows: u64,
    model_ms: u64,
    jitter: u64,
    /// Flows submitted per second; 0 submits them all at once.
    rate: u64,
    /// `[agents.manus] replicas`: how many steps run at once; the rest queue.
    replicas: u64,
    /// `[flow] planner_replicas`: how many plan and summary calls are made at once.
    planner_replicas: u64,
    store_on: bool,
}

async fn run(model: &mut ModelServer, load: Load) {
    let Load {
        flows,
        model_ms,
        jitter,
        rate,
        replicas,
        planner_replicas,
        store_on,
    } = load;
    let dir = Scratch::new("bench-many");
    let replicas = replicas.to_string();
    let planner_replicas = planner_replicas.to_string();
    let text = config_with_for(
        &model.base_url,
        &dir.workspace(),
        &[
            ("agents.manus.replicas", &replicas),
            ("flow.planner_replicas", &planner_replicas),
            ("agents.manus.tools", "[\"planning\", \"terminate\"]"),
            ("flow.max_step_retries", "0"),
            ("store.enabled", if store_on { "true" } else { "false" }),
        ],
    );
    let config = Config::parse(&text, "bench-many", None).unwrap();
    let rt = Runtime::builder().config(config).start().await.unwrap();

    // Warm-up: connections, token tables, allocator. One flow opens a connection or two;
    // WARM=256 fills the pool to what the measured flows use at once.
    let mut warming = vec![];
    for i in 0..env_or("WARM", 1) {
        let options = SubmitOptions {
            mode: FlowMode::Plan,
        };
        warming.push(rt.submit(&format!("warm up {i}"), options).await.unwrap());
    }
    for warm in warming {
        assert_eq!(warm.outcome().await.status, FlowStatus::Completed);
    }

    let cpu_before = cpu_secs("/proc/self/stat");
    let store_cpu_before = threads_cpu_secs("run-store");
    let machine_before = machine_ticks();
    let model_cpu_before = model.cpu_secs();
    let started = Instant::now();
    let mut handles = Vec::with_capacity(flows as usize);
    let start_at = tokio::time::Instant::now();
    for i in 0..flows {
        if rate > 0 {
            let due = start_at + std::time::Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
        let task = format!("Flow {i}: split the work in two halves.");
        let options = SubmitOptions {
            mode: FlowMode::Plan,
        };
        let flow = rt.submit(&task, options).await.unwrap();
        handles.push(tokio::spawn(watch(flow)));
    }
    let submitted = started.elapsed();
    let watched = futures_util::future::join_all(handles).await;
    let (watched, outcomes): (Vec<Watched>, Vec<FlowOutcome>) =
        watched.into_iter().map(|w| w.unwrap()).unzip();
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_secs("/proc/self/stat") - cpu_before;
    let store_cpu = threads_cpu_secs("run-store") - store_cpu_before;
    let stolen = machine_ticks().stolen_since(&machine_before);
    let model_cpu = model.cpu_secs() - model_cpu_before;

    let tally = model.tally();
    let mut overhead: Vec<f64> = vec![];
    let mut calls = 0;
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
        let n = o.usage.calls.max(1);
        calls += n;
        let held_ms = tally["held"][i.to_string()].as_u64().unwrap_or(0) as f64 / 1000.0;
        let own = o.elapsed_ms as f64 - held_ms;
        overhead.push(own.max(0.0) / n as f64);
    }
    overhead.sort_by(f64::total_cmp);
    let mut gaps: Vec<f64> = tally["gaps"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(Value::as_f64)
                .map(|us| us / 1000.0)
                .collect()
        })
        .unwrap_or_default();
    gaps.sort_by(f64::total_cmp);
    // Per plan step: its time on its agent minus the model's, spread over its rounds.
    let mut step_overhead: Vec<(Instant, f64)> = vec![];
    let mut queued: Vec<f64> = vec![];
    let step_held: HashMap<(u64, u64), u64> = tally["step_held"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some(((t[0].as_u64()?, t[1].as_u64()?), t[2].as_u64()?)))
        .collect();
    for (i, w) in watched.iter().enumerate() {
        for &(step, began, ran) in &w.ran {
            let held_us = step_held
                .get(&(i as u64, step as u64))
                .copied()
                .unwrap_or(0);
            let own_ms = ran.as_secs_f64() * 1000.0 - held_us as f64 / 1000.0;
            step_overhead.push((began, own_ms.max(0.0) / ROUNDS as f64));
        }
        queued.extend(w.queued_ms.iter().map(|&q| q as f64));
    }
    // The p99 of each fifth of the plan steps, in the order they began: the first fifth
    // holds the start, when every flow is submitted and planned at once.
    step_overhead.sort_by_key(|&(began, _)| began);
    if let Ok(path) = std::env::var("DUMP") {
        let lines: Vec<String> = step_overhead
            .iter()
            .map(|&(began, ms)| format!("{:.3} {ms:.3}", (began - started).as_secs_f64() * 1e3))
            .collect();
        std::fs::write(&path, lines.join("\n")).expect("write DUMP");
    }
    let by_fifth: Vec<String> = step_overhead
        .chunks(step_overhead.len().div_ceil(5).max(1))
        .map(|fifth| {
            let mut ms: Vec<f64> = fifth.iter().map(|&(_, ms)| ms).collect();
            ms.sort_by(f64::total_cmp);
            format!("{:.2}", percentile(&ms, 99))
        })
        .collect();
    let mut step_overhead: Vec<f64> = step_overhead.into_iter().map(|(_, ms)| ms).collect();
    step_overhead.sort_by(f64::total_cmp);
    queued.sort_by(f64::total_cmp);
    let steps = flows * STEPS * ROUNDS;
    println!(
        "many_flows: {flows} planned flows {}, {replicas} agent replicas, {planner_replicas} planner \
         replicas, model answers after {model_ms} ms{}, run store {}",
        if rate > 0 {
            format!("submitted at {rate}/s")
        } else {
            "at once".into()
        },
        if jitter > 0 {
            format!(" ± {jitter} ms per flow")
        } else {
            " (lockstep)".into()
        },
        if store_on { "on" } else { "off" }
    );
    println!(
        "  each flow: {STEPS} steps x {ROUNDS} rounds, {} model calls; wall {wall:.2} s",
        calls / flows
    );
    println!("  flows/s            {:.0}", flows as f64 / wall);
    println!(
        "  submitting them    {:.1} ms ({:.0} µs a flow)",
        submitted.as_secs_f64() * 1000.0,
        submitted.as_secs_f64() * 1e6 / flows as f64
    );
    println!("  agent steps/s      {:.0}", steps as f64 / wall);
    println!(
        "  runtime CPU        {cpu:.2} s: {:.3} ms per agent step, {:.3} ms per model call \
         (model server: {model_cpu:.2} s)",
        cpu * 1000.0 / steps as f64,
        cpu * 1000.0 / calls as f64
    );
    println!(
        "  of it the run store's thread {store_cpu:.2} s ({:.3} ms per model call), in the \
         idle scheduling class: it runs when the flows' threads leave a core free",
        store_cpu * 1000.0 / calls as f64
    );
    println!(
        "  step overhead: per agent step, a plan step's time on its agent (StepStarted to \
         StepFinished, as read from the flow's events) minus the model's, over {} plan steps: \
         p50 {:.2} ms, p99 {:.2} ms",
        step_overhead.len(),
        percentile(&step_overhead, 50),
        percentile(&step_overhead, 99)
    );
    println!(
        "  step overhead p99 by fifth of the plan steps, in the order they began: {} ms",
        by_fifth.join(" / ")
    );
    println!(
        "  waiting for a replica before a plan step: p50 {:.0} ms, p99 {:.0} ms",
        percentile(&queued, 50),
        percentile(&queued, 99)
    );
    println!(
        "  a flow's time beyond the model's, per model call (waits for replicas and \
         planner included), over flows: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&overhead, 50),
        percentile(&overhead, 99)
    );
    println!(
        "  runtime time between a step's rounds (model answer to next request), over {} \
         rounds: p50 {:.2} ms, p99 {:.2} ms",
        gaps.len(),
        percentile(&gaps, 50),
        percentile(&gaps, 99)
    );
    println!("  peak RSS           {:.1} MB", peak_rss_mb());
    println!(
        "  CPU time the hypervisor took from this machine during the run: {:.0} %",
        stolen * 100.0
    );
    rt.shutdown().await;
}
