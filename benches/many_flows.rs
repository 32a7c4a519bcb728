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
//! The FLOWS flows are submitted REPS times (5 unless set), each batch once the one before
//! has finished, on the same runtime: one run's p99 moves with what else the host does
//! while it runs, so each repetition's figures are printed on a line, and the headline
//! p99 is the median of the repetitions' p99s, with their range beside it. Peak RSS covers
//! all of them, so memory a finished flow leaves behind shows as growth with REPS.
//!
//! Prints flows/s, agent steps/s (think/act rounds), the runtime's CPU time per agent step
//! and per model call (and how much of it the run store's thread used), and:
//! - the step overhead: a plan step's time on its agent, from `StepStarted` to
//!   `StepFinished` as this bench reads them from the flow's event stream, minus the time
//!   the model server held the step's calls (as it measured them), per agent step; p50 and
//!   p99 over plan steps. The loopback HTTP exchange counts as the runtime's;
//! - the same step overhead's p99 in each fifth of a repetition's plan steps, in the order
//!   they began: the first fifth holds the start, when every flow is submitted and planned
//!   at once;
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
//! DUMP=path writes each plan step's repetition, start (ms into the repetition) and overhead
//! (ms per agent step), one step a line, to see when in a run the tail happens. It asserts
//! nothing but that every flow completed.

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
use support::scenario::{Scratch, config_with_for, env_or, plan_reply};

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
/// How many times the flows are submitted, one batch after the other, unless REPS says.
const DEFAULT_REPS: u64 = 5;

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
        reps: env_or("REPS", DEFAULT_REPS).max(1),
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
    /// How many times the FLOWS flows are submitted, one batch after the other.
    reps: u64,
}

/// What one repetition saw: its latencies, and the process's and the machine's CPU over it.
/// Its flows' events and outcomes are dropped once read, so peak RSS is the runtime's.
struct Rep {
    latencies: Latencies,
    submitted: Duration,
    wall: f64,
    cpu: f64,
    store_cpu: f64,
    model_cpu: f64,
    stolen: f64,
}

/// Submit `load.flows` flows (numbered from `first_flow`) and wait for them all.
async fn repetition(rt: &Runtime, model: &mut ModelServer, load: &Load, first_flow: u64) -> Rep {
    let cpu_before = cpu_secs("/proc/self/stat");
    let store_cpu_before = threads_cpu_secs("run-store");
    let machine_before = machine_ticks();
    let model_cpu_before = model.cpu_secs();
    let started = Instant::now();
    let mut handles = Vec::with_capacity(load.flows as usize);
    let start_at = tokio::time::Instant::now();
    for k in 0..load.flows {
        if load.rate > 0 {
            let due = start_at + Duration::from_secs_f64(k as f64 / load.rate as f64);
            tokio::time::sleep_until(due).await;
        }
        let task = format!("Flow {}: split the work in two halves.", first_flow + k);
        let options = SubmitOptions {
            mode: FlowMode::Plan,
            ..Default::default()
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
    let model_cpu = model.cpu_secs() - model_cpu_before;
    let stolen = machine_ticks().stolen_since(&machine_before);
    let held = Held::from_tally(&model.tally());
    Rep {
        latencies: Latencies::of(first_flow, &watched, &outcomes, started, &held),
        submitted,
        wall,
        cpu,
        store_cpu,
        model_cpu,
        stolen,
    }
}

/// What the model server held, by flow and by (flow, step), in µs.
struct Held {
    flows: HashMap<u64, u64>,
    steps: HashMap<(u64, u64), u64>,
}

impl Held {
    fn from_tally(tally: &Value) -> Held {
        let flows = tally["held"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(flow, us)| Some((flow.parse().ok()?, us.as_u64()?)))
            .collect();
        let steps = tally["step_held"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| Some(((t[0].as_u64()?, t[1].as_u64()?), t[2].as_u64()?)))
            .collect();
        Held { flows, steps }
    }
}

/// One repetition's latencies, in ms.
struct Latencies {
    /// Per plan step, when it began (ms into the repetition) and its overhead per agent
    /// step, in the order the steps began.
    steps: Vec<(f64, f64)>,
    /// Per flow, its time beyond the model's per model call.
    flows: Vec<f64>,
    /// Per plan step, how long it waited for a replica.
    queued: Vec<f64>,
    calls: u64,
}

impl Latencies {
    /// From the events and outcomes of flows numbered from `first_flow`, submitted from
    /// `started`, and what the model server held of their calls.
    fn of(
        first_flow: u64,
        watched: &[Watched],
        outcomes: &[FlowOutcome],
        started: Instant,
        held: &Held,
    ) -> Latencies {
        let mut flows = vec![];
        let mut calls = 0;
        for (k, o) in outcomes.iter().enumerate() {
            assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
            let n = o.usage.calls.max(1);
            calls += n;
            let flow = first_flow + k as u64;
            let held_ms = held.flows.get(&flow).copied().unwrap_or(0) as f64 / 1000.0;
            let own = o.elapsed_ms as f64 - held_ms;
            flows.push(own.max(0.0) / n as f64);
        }
        // Per plan step: its time on its agent minus the model's, spread over its rounds.
        let mut steps = vec![];
        let mut queued = vec![];
        for (k, w) in watched.iter().enumerate() {
            let flow = first_flow + k as u64;
            for &(step, began, ran) in &w.ran {
                let held_us = held.steps.get(&(flow, step as u64)).copied().unwrap_or(0);
                let own_ms = ran.as_secs_f64() * 1000.0 - held_us as f64 / 1000.0;
                let at = (began - started).as_secs_f64() * 1000.0;
                steps.push((at, own_ms.max(0.0) / ROUNDS as f64));
            }
            queued.extend(w.queued_ms.iter().map(|&q| q as f64));
        }
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        Latencies {
            steps,
            flows,
            queued,
            calls,
        }
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn median(v: &[f64]) -> f64 {
    percentile(&sorted(v.to_vec()), 50)
}

async fn run(model: &mut ModelServer, load: Load) {
    let dir = Scratch::new("bench-many");
    let replicas = load.replicas.to_string();
    let planner_replicas = load.planner_replicas.to_string();
    let text = config_with_for(
        &model.base_url,
        &dir.workspace(),
        &[
            ("agents.manus.replicas", &replicas),
            ("flow.planner_replicas", &planner_replicas),
            ("agents.manus.tools", "[\"planning\", \"terminate\"]"),
            ("flow.max_step_retries", "0"),
            (
                "store.enabled",
                if load.store_on { "true" } else { "false" },
            ),
        ],
    );
    let config = Config::from_text(&text, "bench-many", None).unwrap();
    let rt = Runtime::builder().config(config).start().await.unwrap();

    // Warm-up: connections, token tables, allocator. One flow opens a connection or two;
    // WARM=256 fills the pool to what the measured flows use at once.
    let mut warming = vec![];
    for i in 0..env_or("WARM", 1) {
        let options = SubmitOptions {
            mode: FlowMode::Plan,
            ..Default::default()
        };
        warming.push(rt.submit(&format!("warm up {i}"), options).await.unwrap());
    }
    for warm in warming {
        assert_eq!(warm.outcome().await.status, FlowStatus::Completed);
    }

    let mut reps = vec![];
    for r in 0..load.reps {
        reps.push(repetition(&rt, model, &load, r * load.flows).await);
    }
    report(&load, &reps, &model.tally());
    rt.shutdown().await;
}

/// Print the figures: each repetition's on a line, then all of them together (`tally` is
/// the model server's, for the time between rounds).
fn report(load: &Load, reps: &[Rep], tally: &Value) {
    let Load {
        flows,
        model_ms,
        jitter,
        rate,
        replicas,
        planner_replicas,
        store_on,
        ..
    } = *load;
    let steps = flows * STEPS * ROUNDS;
    let calls: u64 = reps.iter().map(|r| r.latencies.calls).sum();
    println!(
        "many_flows: {flows} planned flows {}, {replicas} agent replicas, {planner_replicas} planner \
         replicas, model answers after {model_ms} ms{}, run store {}; {} repetitions, one after \
         the other, on one runtime",
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
        if store_on { "on" } else { "off" },
        reps.len()
    );
    println!(
        "  each flow: {STEPS} steps x {ROUNDS} rounds, {} model calls",
        calls / (flows * reps.len() as u64)
    );
    println!(
        "  step overhead: per agent step, a plan step's time on its agent (StepStarted to \
         StepFinished, as read from the flow's events) minus the model's; p99 by fifth of the \
         plan steps, in the order they began (the first fifth holds the start, when every flow \
         is submitted and planned at once)"
    );
    let mut p99s = vec![];
    for (i, rep) in reps.iter().enumerate() {
        let l = &rep.latencies;
        let ms: Vec<f64> = l.steps.iter().map(|&(_, ms)| ms).collect();
        let by_fifth: Vec<String> = l
            .steps
            .chunks(l.steps.len().div_ceil(5).max(1))
            .map(|fifth| {
                let ms = sorted(fifth.iter().map(|&(_, ms)| ms).collect());
                format!("{:.2}", percentile(&ms, 99))
            })
            .collect();
        let ms = sorted(ms);
        p99s.push(percentile(&ms, 99));
        println!(
            "  repetition {}: wall {:.2} s, {:.0} agent steps/s; step overhead p50 {:.2} ms, \
             p99 {:.2} ms (by fifth {} ms); {:.0} % of the CPU stolen",
            i + 1,
            rep.wall,
            steps as f64 / rep.wall,
            percentile(&ms, 50),
            percentile(&ms, 99),
            by_fifth.join(" / "),
            rep.stolen * 100.0
        );
    }
    if let Ok(path) = std::env::var("DUMP") {
        let lines: Vec<String> = reps
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                r.latencies
                    .steps
                    .iter()
                    .map(move |&(at, ms)| format!("{} {at:.3} {ms:.3}", i + 1))
            })
            .collect();
        std::fs::write(&path, lines.join("\n")).expect("write DUMP");
    }
    let all_steps = sorted(
        reps.iter()
            .flat_map(|r| r.latencies.steps.iter().map(|&(_, ms)| ms))
            .collect(),
    );
    let p99s = sorted(p99s);
    println!(
        "  step overhead p99, median of the repetitions' {:.2} ms (from {:.2} to {:.2} ms); \
         over all {} plan steps: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&p99s, 50),
        p99s[0],
        p99s[p99s.len() - 1],
        all_steps.len(),
        percentile(&all_steps, 50),
        percentile(&all_steps, 99)
    );
    let walls: Vec<f64> = reps.iter().map(|r| r.wall).collect();
    let wall = median(&walls);
    println!(
        "  flows/s            {:.0} (median of the repetitions)",
        flows as f64 / wall
    );
    println!(
        "  agent steps/s      {:.0} (median of the repetitions)",
        steps as f64 / wall
    );
    let submitted = median(
        &reps
            .iter()
            .map(|r| r.submitted.as_secs_f64())
            .collect::<Vec<_>>(),
    );
    println!(
        "  submitting them    {:.1} ms ({:.0} µs a flow)",
        submitted * 1000.0,
        submitted * 1e6 / flows as f64
    );
    let cpu: f64 = reps.iter().map(|r| r.cpu).sum();
    let store_cpu: f64 = reps.iter().map(|r| r.store_cpu).sum();
    let model_cpu: f64 = reps.iter().map(|r| r.model_cpu).sum();
    let all_agent_steps = steps * reps.len() as u64;
    println!(
        "  runtime CPU        {cpu:.2} s: {:.3} ms per agent step, {:.3} ms per model call \
         (model server: {model_cpu:.2} s)",
        cpu * 1000.0 / all_agent_steps as f64,
        cpu * 1000.0 / calls as f64
    );
    println!(
        "  of it the run store's thread {store_cpu:.2} s ({:.3} ms per model call), in the \
         idle scheduling class: it runs when the flows' threads leave a core free",
        store_cpu * 1000.0 / calls as f64
    );
    let queued = sorted(
        reps.iter()
            .flat_map(|r| r.latencies.queued.iter().copied())
            .collect(),
    );
    println!(
        "  waiting for a replica before a plan step: p50 {:.0} ms, p99 {:.0} ms",
        percentile(&queued, 50),
        percentile(&queued, 99)
    );
    let overhead = sorted(
        reps.iter()
            .flat_map(|r| r.latencies.flows.iter().copied())
            .collect(),
    );
    println!(
        "  a flow's time beyond the model's, per model call (waits for replicas and \
         planner included), over flows: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&overhead, 50),
        percentile(&overhead, 99)
    );
    let gaps = sorted(
        tally["gaps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .map(|us| us / 1000.0)
            .collect(),
    );
    println!(
        "  runtime time between a step's rounds (model answer to next request), over {} \
         rounds: p50 {:.2} ms, p99 {:.2} ms",
        gaps.len(),
        percentile(&gaps, 50),
        percentile(&gaps, 99)
    );
    println!("  peak RSS           {:.1} MB", peak_rss_mb());
    let stolen = reps.iter().map(|r| r.stolen * r.wall).sum::<f64>() / walls.iter().sum::<f64>();
    println!(
        "  CPU time the hypervisor took from this machine during the runs: {:.0} %",
        stolen * 100.0
    );
}
