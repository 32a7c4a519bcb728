//! Traces and accounting, end to end: the CLI runs a two-agent flow against the scripted
//! model with an OTLP/HTTP receiver on 127.0.0.1, and the tests check what reached the
//! receiver (one trace; flow → step → agent → chat/tool; GenAI attribute names and values;
//! token sums equal to what the model server reported; contents only when opted in), that a
//! dead collector costs nothing but a warning, and that token and cost budgets stop a flow.

use crate::support;

use std::collections::BTreeMap;
use std::process::Output;

use support::llm_server::ScriptedLlm;
use support::otlp::{OtlpReceiver, SpanRecord};
use support::scenario::{EXAMPLE_TASK, Scratch, config_text, config_with, example_script};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

async fn run_cli(dir: &Scratch, config: &str, env: &[(&str, &str)]) -> (Output, serde_json::Value) {
    let path = dir.write_config(config);
    let out = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_TRACES_SAMPLER_ARG")
        .envs(env.iter().copied())
        .arg("--config")
        .arg(&path)
        .args(["run-flow", EXAMPLE_TASK, "--json"])
        .output()
        .await
        .unwrap();
    let outcome = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, outcome)
}

fn by_id(spans: &[SpanRecord]) -> BTreeMap<Vec<u8>, &SpanRecord> {
    spans.iter().map(|s| (s.span_id.clone(), s)).collect()
}

fn parent<'a>(s: &SpanRecord, ids: &BTreeMap<Vec<u8>, &'a SpanRecord>) -> Option<&'a SpanRecord> {
    ids.get(&s.parent_span_id).copied()
}

fn named<'a>(spans: &'a [SpanRecord], name: &str) -> Vec<&'a SpanRecord> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn telemetry(endpoint: &str, extra: &str) -> String {
    format!("\n[telemetry]\notlp_endpoint = \"{endpoint}\"\n{extra}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_is_one_trace_with_the_genai_tree() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let otlp = OtlpReceiver::start().await;
    let dir = Scratch::new("otel-tree");
    let config = config_text(&server, &dir.workspace(), &telemetry(&otlp.endpoint(), ""));
    let (out, outcome) = run_cli(&dir, &config, &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let spans = otlp.spans();
    let ids = by_id(&spans);
    assert!(
        spans.iter().all(|s| s.trace_id == spans[0].trace_id),
        "one trace per flow"
    );
    assert!(
        spans
            .iter()
            .all(|s| s.service_name.as_deref() == Some("manus-rt"))
    );

    let roots = named(&spans, "invoke_workflow planning_flow");
    assert_eq!(roots.len(), 1);
    let root = roots[0];
    assert!(root.parent_span_id.is_empty() || !ids.contains_key(&root.parent_span_id));
    assert_eq!(root.attr("gen_ai.operation.name"), Some("invoke_workflow"));
    assert_eq!(root.attr("manus.flow.status"), Some("Completed"));
    // A first run is turn 0 of a conversation of its own (a follow-up's trace names the
    // thread it continues: `manus.thread.id`, `manus.thread.turn`).
    assert!(root.attr("manus.flow.id").is_some());
    assert_eq!(root.attr("manus.thread.id"), root.attr("manus.flow.id"));

    for (step, agent) in [(0, "manus"), (1, "data_analysis")] {
        let steps = named(&spans, &format!("step {step}"));
        assert_eq!(steps.len(), 1, "step {step}");
        assert_eq!(
            parent(steps[0], &ids).map(|p| p.name.as_str()),
            Some(root.name.as_str())
        );
        assert_eq!(steps[0].attr("manus.step.status"), Some("completed"));
        let agents = named(&spans, &format!("invoke_agent {agent}"));
        assert_eq!(agents.len(), 1, "{agent}");
        assert_eq!(
            parent(agents[0], &ids).map(|p| p.span_id.clone()),
            Some(steps[0].span_id.clone())
        );
        assert_eq!(agents[0].attr("gen_ai.agent.name"), Some(agent));
        assert_eq!(
            agents[0].attr("gen_ai.operation.name"),
            Some("invoke_agent")
        );
    }

    // Every model call is a CLIENT span with the GenAI request and response attributes.
    let chats: Vec<&SpanRecord> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), server.requests().len());
    for c in &chats {
        assert_eq!(c.name, "chat gpt-4o-mini");
        assert_eq!(c.kind, 3, "CLIENT");
        assert_eq!(c.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(c.attr("gen_ai.provider.name"), Some("openai"));
        assert_eq!(c.attr("gen_ai.request.model"), Some("gpt-4o-mini"));
        assert_eq!(c.int("gen_ai.request.max_tokens"), Some(4096));
        assert!(c.attr("gen_ai.request.temperature").is_some());
        assert!(
            c.attr("gen_ai.response.id")
                .is_some_and(|id| id.starts_with("chatcmpl-"))
        );
        assert!(
            c.attr("gen_ai.response.finish_reasons")
                .is_some_and(|r| r.starts_with('['))
        );
        let p = parent(c, &ids).expect("a chat span has a parent");
        assert!(
            p.name.starts_with("invoke_agent ") || p.name == "plan" || p.name == "summarise",
            "chat under {}",
            p.name
        );
    }

    // Tool spans are children of their agent's span, though they ran in another actor.
    let tools: Vec<&SpanRecord> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    let tool_names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t.attr("gen_ai.tool.name"))
        .collect();
    for expected in ["str_replace_editor", "bash", "python_execute", "terminate"] {
        assert!(tool_names.contains(&expected), "{tool_names:?}");
    }
    for t in &tools {
        assert!(
            parent(t, &ids).is_some_and(|p| p.name.starts_with("invoke_agent ")),
            "{}",
            t.name
        );
        assert!(
            t.attr("gen_ai.tool.call.id")
                .is_some_and(|id| id.starts_with("call_"))
        );
        assert_eq!(t.attr("gen_ai.operation.name"), Some("execute_tool"));
    }

    // Token sums equal what the model server reported (10 prompt + 5 completion per call).
    let input: i64 = chats
        .iter()
        .filter_map(|c| c.int("gen_ai.usage.input_tokens"))
        .sum();
    let output: i64 = chats
        .iter()
        .filter_map(|c| c.int("gen_ai.usage.output_tokens"))
        .sum();
    let calls = server.requests().len() as i64;
    assert_eq!((input, output), (10 * calls, 5 * calls));
    assert_eq!(root.int("gen_ai.usage.input_tokens"), Some(input));
    assert_eq!(outcome["usage"]["prompt_tokens"], input);
    assert_eq!(outcome["usage_by_agent"]["planner"]["calls"], 2);

    // No contents unless asked for.
    for key in [
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ] {
        assert!(
            spans.iter().all(|s| s.attr(key).is_none()),
            "{key} must be opt-in"
        );
    }
}

/// In code mode a cell is an `execute_tool python` span under its agent, and the tool calls
/// it makes are `execute_tool` spans under the cell's, though they ran in the tool worker.
#[tokio::test(flavor = "multi_thread")]
async fn a_cells_tool_calls_are_spans_under_the_cell() {
    use support::llm_server::Reply;
    let python = |code: &str| Reply::tool("python", serde_json::json!({ "code": code }));
    let script = "primes = [n for n in range(2, 100) if all(n % d for d in range(2, n))]\n\
                  open('primes.txt', 'w').write('\\n'.join(map(str, primes)) + '\\n')\n";
    let server = ScriptedLlm::start().await;
    let mut replies = vec![example_script().remove(0)];
    replies.extend([
        python(&format!(
            "str_replace_editor(command='create', path='primes.py', file_text={script:?})\n\
             print(bash('python3 primes.py && wc -l primes.txt'))"
        )),
        python("terminate(status='success')"),
        python(
            "nums = [int(x) for x in open('primes.txt').read().split()]\n\
             print(len(nums), sum(nums))\nterminate(status='success')",
        ),
        Reply::text("25 primes below 100, summing to 1060."),
    ]);
    server.push_all(replies);
    let otlp = OtlpReceiver::start().await;
    let dir = Scratch::new("otel-cells");
    let config = config_with(
        &server,
        &dir.workspace(),
        &[
            ("telemetry.otlp_endpoint", &format!("{:?}", otlp.endpoint())),
            ("agents.manus.action", "\"code\""),
            ("agents.data_analysis.action", "\"code\""),
        ],
    );
    let (out, outcome) = run_cli(&dir, &config, &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(outcome["status"], "completed", "{outcome}");
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("primes.txt"))
            .unwrap()
            .lines()
            .count(),
        25
    );

    let spans = otlp.spans();
    let ids = by_id(&spans);
    let cells = named(&spans, "execute_tool python");
    assert_eq!(cells.len(), 3, "one span per cell");
    for cell in &cells {
        assert!(
            parent(cell, &ids).is_some_and(|p| p.name.starts_with("invoke_agent ")),
            "a cell runs under its agent"
        );
    }
    for tool in ["str_replace_editor", "bash", "terminate"] {
        let calls = named(&spans, &format!("execute_tool {tool}"));
        assert!(!calls.is_empty(), "{tool} was called");
        for call in calls {
            assert_eq!(
                parent(call, &ids).map(|p| p.name.as_str()),
                Some("execute_tool python"),
                "{tool} runs under its cell"
            );
        }
    }
}

/// A graph plan's independent steps are sibling spans under the workflow that overlap in
/// time, and a revision after a failed step is a `replan` span under the workflow too.
#[tokio::test(flavor = "multi_thread")]
async fn parallel_steps_are_overlapping_siblings_and_a_revision_is_a_replan_span() {
    let server = ScriptedLlm::start().await;
    let otlp = OtlpReceiver::start().await;
    server.push_all([
        support::llm_server::Reply::tool(
            "planning",
            serde_json::json!({"command": "create", "plan_id": "p", "title": "Two at once",
                "steps": [{"text": "[MANUS] left", "depends_on": []},
                          {"text": "[MANUS] right", "depends_on": []}]}),
        ),
        support::llm_server::Reply::tool(
            "planning",
            serde_json::json!({"command": "update", "plan_id": "p",
                "steps": [{"text": "[MANUS] left, another way", "depends_on": []}]}),
        ),
        support::llm_server::Reply::text("both sides done"),
    ]);
    let job = |i: usize| format!("Your job now is step {i} only");
    server.push_for(
        &job(0),
        [support::scenario::give_up("left is gone").delay(300)],
    );
    server.push_for(&job(1), [support::scenario::done("right done").delay(300)]);
    server.push_for(&job(2), [support::scenario::done("left done")]);
    let dir = Scratch::new("otel-graph");
    let mut config = config_with(
        &server,
        &dir.workspace(),
        &[
            ("flow.on_step_failure", "\"replan\""),
            ("flow.max_step_retries", "0"),
        ],
    );
    config += &telemetry(&otlp.endpoint(), "");
    let (out, outcome) = run_cli(&dir, &config, &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(outcome["status"], "completed", "{outcome:#}");

    let spans = otlp.spans();
    let ids = by_id(&spans);
    let root = named(&spans, "invoke_workflow planning_flow")[0];
    assert_eq!(root.int("manus.plan.revisions"), Some(1));
    let step = |i: usize| {
        let s = named(&spans, &format!("step {i}"));
        assert_eq!(s.len(), 1, "step {i}");
        assert_eq!(
            parent(s[0], &ids).map(|p| p.span_id.clone()),
            Some(root.span_id.clone())
        );
        s[0]
    };
    let (left, right, again) = (step(0), step(1), step(2));
    assert!(
        left.overlaps(right),
        "the independent steps overlap in time"
    );
    assert_eq!(left.attr("manus.step.status"), Some("failed"));
    let replans = named(&spans, "replan");
    assert_eq!(replans.len(), 1);
    assert_eq!(
        parent(replans[0], &ids).map(|p| p.span_id.clone()),
        Some(root.span_id.clone())
    );
    assert!(replans[0].start_ns >= left.end_ns && replans[0].end_ns <= again.start_ns);
}

#[tokio::test(flavor = "multi_thread")]
async fn contents_are_captured_only_when_opted_in_and_cut_to_size() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let otlp = OtlpReceiver::start().await;
    let dir = Scratch::new("otel-content");
    let extra = telemetry(
        &otlp.endpoint(),
        "capture_content = true\ncontent_max_chars = 300\n",
    );
    let (out, _) = run_cli(&dir, &config_text(&server, &dir.workspace(), &extra), &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = otlp.spans();
    let ids = by_id(&spans);
    let plan_chat = spans
        .iter()
        .find(|s| s.name.starts_with("chat ") && parent(s, &ids).is_some_and(|p| p.name == "plan"))
        .expect("the planning call has a span");
    let input = plan_chat
        .attr("gen_ai.input.messages")
        .expect("the prompt is on the span");
    assert!(
        input.contains("You plan work") && input.contains("characters cut"),
        "{input}"
    );
    assert!(
        input.chars().count() <= 300 + 60,
        "cut to content_max_chars"
    );
    assert!(
        plan_chat
            .attr("gen_ai.output.messages")
            .is_some_and(|m| m.contains("planning"))
    );
    let bash = spans
        .iter()
        .find(|s| s.name == "execute_tool bash")
        .unwrap();
    assert!(
        bash.attr("gen_ai.tool.call.arguments")
            .is_some_and(|a| a.contains("primes.py"))
    );
    assert!(
        bash.attr("gen_ai.tool.call.result")
            .is_some_and(|r| r.contains("25"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_collector_costs_a_warning_not_the_run() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = Scratch::new("otel-dead");
    let endpoint = format!("http://127.0.0.1:{closed}/v1/traces");
    let (out, outcome) = run_cli(
        &dir,
        &config_text(&server, &dir.workspace(), &telemetry(&endpoint, "")),
        &[],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(outcome["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_standard_otel_variables_configure_export() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let otlp = OtlpReceiver::start().await;
    let dir = Scratch::new("otel-env");
    let base = otlp.endpoint().trim_end_matches("/v1/traces").to_string();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
        ("OTEL_SERVICE_NAME", "agents-prod"),
    ];
    let (out, _) = run_cli(&dir, &config_text(&server, &dir.workspace(), ""), &env).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = otlp.spans();
    assert!(!spans.is_empty());
    assert!(
        spans
            .iter()
            .all(|s| s.service_name.as_deref() == Some("agents-prod"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_budget_stops_the_flow_with_its_reason() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let dir = Scratch::new("budget-tokens");
    // Each call reports 15 tokens: the planner's call and two agent calls pass 40.
    let (out, outcome) = run_cli(
        &dir,
        &config_text(&server, &dir.workspace(), "max_tokens = 40\n"),
        &[],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(outcome["status"], "budget_exceeded");
    let reason = outcome["reason"].as_str().unwrap();
    assert!(
        reason.contains("45 tokens") && reason.contains("max_tokens = 40"),
        "{reason}"
    );
    assert_eq!(
        server.requests().len(),
        3,
        "nothing is asked after the budget is gone"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn costs_come_from_the_price_table_and_a_cost_budget_stops_the_flow() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let dir = Scratch::new("budget-cost");
    let prices = [
        ("llm.input_price_per_mtok", "2.0"),
        ("llm.output_price_per_mtok", "8.0"),
    ];
    let (out, outcome) = run_cli(&dir, &config_with(&server, &dir.workspace(), &prices), &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = server.requests().len() as f64;
    let expected = calls * (10.0 * 2.0 + 5.0 * 8.0) / 1e6;
    let cost = outcome["usage"]["cost"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");

    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let dir = Scratch::new("budget-cost-stop");
    let mut over: Vec<(&str, &str)> = prices.to_vec();
    over.push(("flow.max_cost", "0.0001"));
    let (out, outcome) = run_cli(&dir, &config_with(&server, &dir.workspace(), &over), &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(outcome["status"], "budget_exceeded");
    assert!(
        outcome["reason"]
            .as_str()
            .unwrap()
            .contains("max_cost = 0.0001"),
        "{}",
        outcome["reason"]
    );
    assert_eq!(
        server.requests().len(),
        2,
        "0.00006 per call: the second call passes 0.0001"
    );
}
