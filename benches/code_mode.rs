//! Code as the action against tool calls, on a task that needs many tool calls: sum a column
//! of each of 30 CSV files and chart the sums. The same scripted model answers both ways,
//! each answer after `LATENCY_MS` (default 300) as a hosted model would:
//!
//! - tool mode: one `python_execute` call per file, one to write the table of sums, one
//!   `data_visualization` call, `terminate`: 33 model calls;
//! - code mode: one cell that reads the 30 files, writes the table and calls
//!   `data_visualization` as a function, then a cell that calls `terminate`: 2 model calls.
//!
//! For each it prints the model calls, the input tokens of every request the agent sent
//! (counted with the model's tokenizer from the requests the scripted server received), the
//! wall time of the step, and checks that both drew the same chart data.
//!
//! `cargo bench --bench code_mode` prints the figures; it asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use manus_rt::engine::llm::Message;
use manus_rt::engine::llm::tokens::{count_messages, encoding_for};
use manus_rt::{Config, FlowMode, Runtime, SubmitOptions};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with};

const FILES: usize = 30;

fn latency() -> u64 {
    std::env::var("LATENCY_MS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300)
}

/// 30 CSV files of 200 rows each, `amount` a column among others.
fn write_files(workspace: &std::path::Path) {
    std::fs::create_dir_all(workspace.join("sales")).unwrap();
    for f in 0..FILES {
        let mut text = String::from("day,region,amount\n");
        for r in 0..200 {
            text += &format!("{r},r{},{}.{}\n", r % 4, (f * 7 + r * 13) % 500, r % 100);
        }
        std::fs::write(workspace.join(format!("sales/day{f:02}.csv")), text).unwrap();
    }
}

const CHART: &str = "{\"data_path\": \"sums.csv\", \"chart_type\": \"bar\", \"x\": \"file\", \"y\": \"amount\", \
                     \"title\": \"Amount per file\", \"y_label\": \"amount\", \"output\": \"svg\", \
                     \"output_path\": \"sums.svg\"}";

fn tool_mode() -> Vec<Reply> {
    let mut replies = vec![];
    for f in 0..FILES {
        let code = format!(
            "import csv\nprint(round(sum(float(r['amount']) for r in csv.DictReader(open('sales/day{f:02}.csv'))), 2))"
        );
        replies.push(Reply::tool("python_execute", json!({ "code": code })));
    }
    // The model would copy the 30 sums it read; the script computes them again instead.
    let table = "import csv, glob\nwith open('sums.csv', 'w') as out:\n    out.write('file,amount\\n')\n    \
                 for name in sorted(glob.glob('sales/*.csv')):\n        \
                 out.write('%s,%.2f\\n' % (name[6:11], sum(float(r['amount']) for r in csv.DictReader(open(name)))))\n\
                 print('written')";
    replies.push(Reply::tool("python_execute", json!({ "code": table })));
    let chart: serde_json::Value = serde_json::from_str(CHART).unwrap();
    replies.push(Reply::tool("data_visualization", chart));
    replies.push(Reply::tool("terminate", json!({ "status": "success" })));
    replies
}

fn code_mode() -> Vec<Reply> {
    let cell = format!(
        "import csv, glob, json\n\
         with open('sums.csv', 'w') as out:\n    out.write('file,amount\\n')\n    \
         for name in sorted(glob.glob('sales/*.csv')):\n        \
         out.write('%s,%.2f\\n' % (name[6:11], sum(float(r['amount']) for r in csv.DictReader(open(name)))))\n\
         print(data_visualization(**json.loads({CHART:?}))[:200])"
    );
    vec![
        Reply::tool("python", json!({ "code": cell })),
        Reply::tool("python", json!({ "code": "terminate(status='success')" })),
    ]
}

struct Figures {
    status: String,
    calls: usize,
    tokens: usize,
    seconds: f64,
    sums: String,
}

async fn one(name: &str, replies: Vec<Reply>, action: &str) -> Figures {
    let server = ScriptedLlm::start().await;
    let delay = latency();
    server.push_all(replies.into_iter().map(|r| r.delay(delay)));
    let dir = Scratch::new(name);
    write_files(&dir.workspace());
    let text = config_with(
        &server,
        &dir.workspace(),
        &[
            ("agents.data_analysis.action", action),
            ("agents.data_analysis.max_steps", "60"),
            ("flow.primary_agent", "\"data_analysis\""),
        ],
    );
    let config = Config::from_text(&text, "bench", None).expect("bench config");
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let options = SubmitOptions {
        mode: FlowMode::Single,
        ..Default::default()
    };
    let started = Instant::now();
    let flow = rt
        .submit(
            "sum the amount of each sales file and chart the sums",
            options,
        )
        .await
        .unwrap();
    let outcome = flow.outcome().await;
    let seconds = started.elapsed().as_secs_f64();
    rt.shutdown().await;
    let bpe = encoding_for("gpt-4o-mini");
    let tokens: usize = server
        .requests()
        .iter()
        .map(|r| {
            let messages: Vec<Message> = r
                .messages()
                .iter()
                .filter_map(|m| serde_json::from_value(m.clone()).ok())
                .collect();
            let tools = r.body["tools"].to_string();
            count_messages(bpe, &messages.iter().collect::<Vec<_>>())
                + bpe.encode_ordinary(&tools).len()
        })
        .sum();
    Figures {
        status: format!("{:?}", outcome.status),
        calls: server.requests().len(),
        tokens,
        seconds,
        sums: std::fs::read_to_string(dir.workspace().join("sums.csv")).unwrap_or_default(),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "code mode against tool calls: sum a column of {FILES} CSV files and chart the sums, the model answering after {} ms",
        latency()
    );
    let tools = one("bench-tool-mode", tool_mode(), "\"tools\"").await;
    let code = one("bench-code-mode", code_mode(), "\"code\"").await;
    for (name, f) in [("tool calls", &tools), ("code (cells)", &code)] {
        println!(
            "  {name:<13} {:>3} model calls {:>8} input tokens (tool schemas included) {:>7.2} s  ({})",
            f.calls, f.tokens, f.seconds, f.status
        );
    }
    println!(
        "  code mode: {:.1}x fewer model calls, {:.1}x fewer input tokens, {:.1}x less wall time; same sums: {}",
        tools.calls as f64 / code.calls as f64,
        tools.tokens as f64 / code.tokens as f64,
        tools.seconds / code.seconds,
        !tools.sums.is_empty() && tools.sums == code.sums
    );
}
