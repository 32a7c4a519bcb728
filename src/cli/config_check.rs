//! `config check`: load and validate the config (done before any command runs), then print
//! what it sets up: the model profiles, the agent pool, telemetry, the sandbox, the browser,
//! the MCP servers, budgets, the run store, the service's connections and the workspace.

use std::process::ExitCode;

use manus_rt::Config;
use manus_rt::engine::agent::Action;
use manus_rt::engine::browser::WebDriverSource;
use manus_rt::engine::confine::Support;
use manus_rt::engine::llm::ApiType;
use manus_rt::engine::tools::python::PythonSession;

use super::args::CODE_ON_HOST;

pub async fn run(config: &Config, probe: bool) -> ExitCode {
    print!("{}", describe(config));
    if !probe {
        return ExitCode::SUCCESS;
    }
    println!();
    match super::probe::run(config).await {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(report) => {
            print!("{report}");
            eprintln!("manus-rt: the model server could not be probed");
            ExitCode::FAILURE
        }
    }
}

/// What `config check` prints.
fn describe(c: &Config) -> String {
    let mut s = format!("config: {} is valid\n\nLLM profiles:\n", c.source);
    if let Some(found) = &c.model_source {
        s.push_str(&format!("  ({found})\n"));
    }
    for (name, l) in &c.llm {
        let key = if l.api_key.is_some() {
            "key set"
        } else {
            "no key"
        };
        let api = match l.api_type {
            ApiType::Http(p) => p.label(),
            ApiType::Replay => "replayed",
        };
        s.push_str(&format!(
            "  {name}: {api} model {} at {} ({key}; {} tool calls)\n",
            l.model,
            if l.base_url.is_empty() {
                "cassette"
            } else {
                &l.base_url
            },
            l.tool_calls.name()
        ));
    }
    s.push_str(&format!(
        "\nPlanner: LLM profile {}\nAgents (primary: {}):\n",
        c.planner_llm, c.flow.primary_agent
    ));
    for (a, llm) in &c.agents {
        s.push_str(&format!(
            "  [{}] profile {}, {} replica(s), llm {llm}, max_steps {}, tools: {}{}{}\n      {}\n",
            a.name.to_ascii_uppercase(),
            a.profile.id,
            a.replicas,
            a.profile.max_steps,
            a.profile.tools.join(", "),
            if a.mcp_servers.is_empty() {
                String::new()
            } else {
                format!(
                    ", and the tools of MCP server(s) {}",
                    a.mcp_servers.join(", ")
                )
            },
            match a.profile.action {
                Action::Tools => "",
                Action::Code => "; acts by Python cells that call these tools as functions",
            },
            a.description
        ));
    }
    let py = &c.tools;
    s.push_str(&format!(
        "Python: `{}`, {} ({} s a call)\n",
        py.python,
        match py.python_session {
            PythonSession::Flow => "one interpreter per agent for the flow: variables carry over",
            PythonSession::Call => "a fresh interpreter for every call",
        },
        py.python_timeout.as_secs()
    ));
    if let Some(m) = &c.memory {
        let name = |scope: &manus_rt::store::memory::Scope| {
            serde_json::to_value(scope)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        };
        let search: Vec<String> = m.search.iter().map(name).collect();
        s.push_str(&format!(
            "Memory: notes kept per {}, searched in {} ({} a search){}\n",
            name(&m.save_to),
            search.join(", "),
            m.max_results,
            if m.distill {
                "; an end-of-run pass keeps what each run's model lists"
            } else {
                ""
            }
        ));
    }
    let t = &c.telemetry;
    match &t.otlp_endpoint {
        Some(url) => s.push_str(&format!(
            "\nTelemetry: traces to {url} ({:?}) as {}, sampling {:.0}%, contents {}\n",
            t.protocol,
            t.service_name,
            t.sample_ratio * 100.0,
            t.capture_content
                .map(|n| format!("captured (up to {n} chars)"))
                .unwrap_or_else(|| "not captured".into())
        )),
        None => s.push_str(
            "\nTelemetry: off (set [telemetry] otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)\n",
        ),
    }
    match (&c.sandbox, &c.tools.confine) {
        (Some(sb), _) => s.push_str(&format!(
            "Sandbox: mode container — tools work in {} via {} (memory {} MiB, {} CPU, pids {}, network {}, idle {}s, at most {})\n",
            sb.image,
            sb.engines_text(),
            sb.memory_limit >> 20,
            sb.cpu_limit,
            sb.pids_limit,
            if sb.network_enabled { "on" } else { "off" },
            sb.idle_timeout.as_secs(),
            sb.max_sandboxes
        )),
        (None, Some(confine)) => {
            s.push_str(&format!(
                "Sandbox: mode process — code runs on this machine confined to the workspace \
                 (memory {} MiB a process, processes {}, network {}); this kernel: {}\n",
                confine.memory_limit >> 20,
                confine.processes,
                confine.network,
                Support::here().describe()
            ));
            for gap in Support::here().gaps() {
                s.push_str(&format!("  ! {gap}\n"));
            }
        }
        (None, None) => match &c.unconfined {
            Some(warning) => s.push_str(&format!("Sandbox: WARNING {warning}\n")),
            None => s.push_str(
                "Sandbox: mode none — code runs on this machine with your rights ([sandbox] mode = \
                 \"process\" confines it to the workspace, \"container\" runs it in Docker)\n",
            ),
        },
    }
    if c.sandbox_old_spelling {
        s.push_str(
            "  note: [sandbox] use_sandbox = true is deprecated: write mode = \"container\"\n",
        );
    }
    let b = &c.browser;
    let driver = match &b.webdriver {
        WebDriverSource::Url(u) => format!("WebDriver at {u}"),
        WebDriverSource::Launch(p) => format!("launches {p}"),
        WebDriverSource::Pool(urls) => format!("spreads browsers over {}", urls.join(", ")),
    };
    s.push_str(&format!(
        "Browser: {driver} on first use, {}, {}x{}, page load limit {}s, screenshots {}, search: {}\n",
        if b.headless { "headless" } else { "with a window" },
        b.viewport.0,
        b.viewport.1,
        b.page_load_timeout.as_secs(),
        if b.screenshots { "on" } else { "off" },
        c.tools
            .search
            .engines
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(" → ")
    ));
    if c.mcp_servers.is_empty() {
        s.push_str("MCP servers: none (add config/mcp.json or set [mcp] servers_file)\n");
    } else {
        s.push_str("MCP servers:\n");
        for m in &c.mcp_servers {
            s.push_str(&format!(
                "  {}: {} (calls time out after {}s)\n",
                m.id,
                m.transport.describe(),
                m.call_timeout.as_secs()
            ));
        }
    }
    let budget = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    s.push_str(&format!(
        "Budgets: max_tokens {}, max_cost {}\n",
        budget(c.flow.max_tokens.map(|v| v.to_string())),
        budget(c.flow.max_cost.map(|v| v.to_string()))
    ));
    match &c.store {
        Some(url) => s.push_str(&format!(
            "Run store: {} (`manus-rt serve` resumes interrupted runs on start: {})\n",
            url.describe(),
            if c.server.resume_on_start {
                "yes"
            } else {
                "no"
            }
        )),
        None => s.push_str("Run store: off ([store] enabled = false): runs cannot be resumed\n"),
    }
    s.push_str(&format!(
        "Service: at most {} connections open, {} of them for event streams and blocking \
         waits; a blocking A2A SendMessage answers after {}s at most\n",
        manus_rt::serve::conns::cap(c.server.max_connections),
        manus_rt::serve::conns::long_held(c.server.max_connections),
        c.server.blocking_wait.as_secs()
    ));
    s.push_str(&format!(
        "\nWorkspace: {}\nFlow: step timeout {}s, flow timeout {}s, {} retr(ies) per step, on failure: {:?}\n\n{CODE_ON_HOST}\n",
        c.workspace.display(),
        c.flow.step_timeout.as_secs(),
        c.flow.flow_timeout.as_secs(),
        c.flow.max_step_retries,
        c.flow.on_step_failure
    ));
    s
}
