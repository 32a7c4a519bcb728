//! The `manus-rt` command line: run a planned flow or a single agent, check a config, list
//! the tools. Progress goes to stderr (a live board on a terminal, plain lines otherwise);
//! the result goes to stdout (`--json` for machines). Exit code 0 only if the flow completed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use manus_rt::board::{Board, final_report};
use manus_rt::engine::mcp::{McpServerSpec, McpTransport, server};
use manus_rt::engine::tools::{KNOWN_TOOLS, ToolSettings, make_tool};
use manus_rt::store::{RunStore, StoredRun};
use manus_rt::{
    Config, FlowEvent, FlowHandle, FlowMode, FlowOutcome, FlowStatus, Runtime, SubmitOptions,
    telemetry,
};

manus_rt::use_mimalloc!();

const CODE_ON_HOST: &str = "Where code runs: by default tools run on this machine (the host) with your \
user's rights — python_execute and bash execute there, and file edits are confined to the workspace \
directory. With [sandbox] use_sandbox = true, python_execute, bash, file edits and the data tools work \
in a container per flow through the Docker Engine API (no network, capped memory, CPU and processes), \
on the container's files; the host workspace is untouched unless [sandbox] mount_workspace = true. \
`manus-rt sandbox doctor` checks the engine and image.";

#[derive(Parser)]
#[command(
    name = "manus-rt",
    version,
    about = "An actor-based multi-agent runtime: planned flows of LLM agents with real tools."
)]
#[command(after_help = CODE_ON_HOST)]
struct Cli {
    /// Config file (default: config/config.toml, then config/config.example.toml, then the built-in example)
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Plan the task, run each step on the agent its tag names, and summarise (the main job)
    #[command(after_help = CODE_ON_HOST)]
    RunFlow(RunArgs),
    /// Run the task with the primary agent alone, without a planner
    #[command(after_help = CODE_ON_HOST)]
    Run(RunArgs),
    /// Inspect the config
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Inspect the tools
    Tools {
        #[command(subcommand)]
        action: ToolsAction,
    },
    /// The container sandbox ([sandbox] in the config)
    Sandbox {
        #[command(subcommand)]
        action: SandboxAction,
    },
    /// Run one agent whose tools come from one MCP server
    #[command(after_help = RUN_MCP_HELP)]
    RunMcp(RunMcpArgs),
    /// Serve the runtime over HTTP: submit flows, stream their events, answer, cancel
    #[command(
        after_help = "Routes: POST/GET /v1/flows, GET/DELETE /v1/flows/{id}, GET /v1/flows/{id}/events \
(Server-Sent Events, resumable with Last-Event-ID), POST /v1/flows/{id}/answers, GET /healthz, GET /metrics, \
GET /openapi.json. With [server] api_tokens (or MANUS_API_TOKENS) set, /v1 and /metrics need a bearer token."
    )]
    Serve {
        /// Address to listen on
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        bind: String,
    },
    /// Offer manus-rt's tools (bash, python_execute, str_replace_editor, terminate by default;
    /// [mcp] serve_tools) to MCP clients, with the workspace and sandbox settings of agents
    McpServer(McpServerArgs),
    /// The recorded runs ([store] url)
    Runs {
        #[command(subcommand)]
        action: RunsAction,
    },
    /// Continue an interrupted run from its last completed step
    #[command(after_help = RESUME_HELP)]
    Resume(ResumeArgs),
}

const RESUME_HELP: &str = "A run is interrupted when the process running it died or stopped mid-flow (`manus-rt runs list` marks it). Completed steps are not run again; a step that was running starts over; the plan, the notes later steps read and the tokens spent so far are kept. With a replay profile ([llm] api_type = \"replay\"), the cassette is picked up at the step the run resumes from.";

#[derive(Subcommand)]
enum RunsAction {
    /// The newest runs: id, status, steps done, tokens, age, task
    List {
        /// How many runs to show
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print them as JSON
        #[arg(long)]
        json: bool,
    },
    /// One run: its plan with each step's status and notes, usage, memories and outcome
    Show {
        /// The run's id (as `runs list` shows it)
        id: String,
        /// Print the run, its events and its agents' memories as JSON
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct ResumeArgs {
    /// The run's id (as `runs list` shows it)
    id: String,
    /// Print the outcome as JSON on stdout (progress stays on stderr)
    #[arg(long)]
    json: bool,
    /// Write the resumed part's model exchanges to this cassette file
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
}

const RUN_MCP_HELP: &str = "The server is one of config/mcp.json (--server ID), a command \
started with stdio (--stdio \"npx -y @modelcontextprotocol/server-everything\"; split on spaces), or a \
remote URL (--url, streamable HTTP; add --sse for a legacy SSE server). The agent is the config's \
primary agent with the `mcp` profile: it holds the server's tools and `terminate`. Each prompt is a \
fresh run; in -i mode, type one request per line, and an empty line or end of input to quit.";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["server", "stdio", "url"])))]
struct RunMcpArgs {
    /// A server of the MCP servers file, by id
    #[arg(long, value_name = "ID")]
    server: Option<String>,
    /// A command that speaks MCP on stdin/stdout
    #[arg(long, value_name = "COMMAND")]
    stdio: Option<String>,
    /// A remote MCP server (streamable HTTP)
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// With --url: the server speaks the legacy HTTP+SSE transport
    #[arg(long, requires = "url")]
    sse: bool,
    /// The request to carry out
    #[arg(short, long, value_name = "PROMPT", conflicts_with = "interactive")]
    prompt: Option<String>,
    /// Read requests from standard input, one per line
    #[arg(short, long)]
    interactive: bool,
    /// Print each outcome as JSON on stdout
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct McpServerArgs {
    /// stdio: one client on stdin/stdout; http: streamable HTTP at /mcp
    #[arg(long, value_enum, default_value_t = McpTransportArg::Stdio)]
    transport: McpTransportArg,
    /// Address for --transport http
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    bind: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum McpTransportArg {
    Stdio,
    Http,
}

#[derive(Subcommand)]
enum SandboxAction {
    /// Check that the Docker engine and the sandbox image are usable, and say why not
    Doctor,
}

#[derive(clap::Args)]
struct RunArgs {
    /// What to do, in plain words
    task: String,
    /// Print the outcome as JSON on stdout (progress stays on stderr)
    #[arg(long)]
    json: bool,
    /// Write every model exchange to this cassette file (replay it with api_type = "replay")
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Load and validate the config, then print what it sets up
    Check,
}

#[derive(Subcommand)]
enum ToolsAction {
    /// List every tool with its description and arguments
    List,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::locate(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("manus-rt: invalid config: {e}");
            return ExitCode::from(2);
        }
    };
    let format = match cli.log_format {
        LogFormat::Text => telemetry::LogFormat::Text,
        LogFormat::Json => telemetry::LogFormat::Json,
    };
    let telemetry = telemetry::init(&config.telemetry, format);
    let code = match cli.command {
        Command::RunFlow(args) => run(config, args, FlowMode::Plan).await,
        Command::Run(args) => run(config, args, FlowMode::Single).await,
        Command::Config {
            action: ConfigAction::Check,
        } => {
            print!("{}", describe(&config));
            ExitCode::SUCCESS
        }
        Command::Sandbox {
            action: SandboxAction::Doctor,
        } => sandbox_doctor(&config).await,
        Command::RunMcp(args) => run_mcp(config, args).await,
        Command::Serve { bind } => serve(config, &bind).await,
        Command::McpServer(args) => mcp_server(config, args).await,
        Command::Runs { action } => runs(&config, action).await,
        Command::Resume(args) => resume(config, args).await,
        Command::Tools {
            action: ToolsAction::List,
        } => {
            let settings = ToolSettings::default();
            for name in KNOWN_TOOLS {
                if let Some(tool) = make_tool(name, &settings) {
                    let spec = tool.spec();
                    println!(
                        "{}\n  {}\n  arguments: {}\n",
                        spec.name,
                        spec.description.replace('\n', "\n  "),
                        spec.parameters
                    );
                }
            }
            ExitCode::SUCCESS
        }
    };
    // The last spans of a short run are still in the batch: send them before exiting.
    telemetry.shutdown().await;
    code
}

/// `sandbox doctor`: each check on a line; exit 0 only if all pass.
async fn sandbox_doctor(config: &Config) -> ExitCode {
    let Some(settings) = &config.sandbox else {
        println!(
            "✗ the sandbox is off in {}: set [sandbox] use_sandbox = true",
            config.source
        );
        return ExitCode::from(1);
    };
    let checks = settings.doctor().await;
    for c in &checks {
        println!("{} {}", if c.ok { "✓" } else { "✗" }, c.what);
    }
    if checks.iter().all(|c| c.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// What `config check` prints.
fn describe(c: &Config) -> String {
    let mut s = format!("config: {} is valid\n\nLLM profiles:\n", c.source);
    for (name, l) in &c.llm {
        let key = if l.api_key.is_some() {
            "key set"
        } else {
            "no key"
        };
        s.push_str(&format!(
            "  {name}: {:?} {} at {} ({key})\n",
            l.api_type,
            l.model,
            if l.base_url.is_empty() {
                "cassette"
            } else {
                &l.base_url
            }
        ));
    }
    s.push_str(&format!(
        "\nPlanner: LLM profile {}\nAgents (primary: {}):\n",
        c.planner_llm, c.flow.primary_agent
    ));
    for (a, llm) in &c.agents {
        s.push_str(&format!(
            "  [{}] profile {}, {} replica(s), llm {llm}, max_steps {}, tools: {}{}\n      {}\n",
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
            a.description
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
    match &c.sandbox {
        Some(sb) => s.push_str(&format!(
            "Sandbox: tools work in {} via {} (memory {} MiB, {} CPU, pids {}, network {}, idle {}s, at most {})\n",
            sb.image,
            sb.docker_host,
            sb.memory_limit >> 20,
            sb.cpu_limit,
            sb.pids_limit,
            if sb.network_enabled { "on" } else { "off" },
            sb.idle_timeout.as_secs(),
            sb.max_sandboxes
        )),
        None => s.push_str("Sandbox: off — code runs on this machine ([sandbox] use_sandbox = true to change)\n"),
    }
    let b = &c.browser;
    let driver = match &b.webdriver {
        manus_rt::engine::browser::WebDriverSource::Url(u) => format!("WebDriver at {u}"),
        manus_rt::engine::browser::WebDriverSource::Launch(p) => format!("launches {p}"),
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
        "\nWorkspace: {}\nFlow: step timeout {}s, flow timeout {}s, {} retr(ies) per step, on failure: {:?}\n\n{CODE_ON_HOST}\n",
        c.workspace.display(),
        c.flow.step_timeout.as_secs(),
        c.flow.flow_timeout.as_secs(),
        c.flow.max_step_retries,
        c.flow.on_step_failure
    ));
    s
}

async fn run(config: Config, args: RunArgs, mode: FlowMode) -> ExitCode {
    let Some(runtime) = start(config, args.record.as_deref()).await else {
        return ExitCode::from(2);
    };
    let outcome = drive(&runtime, &args.task, args.json, mode).await;
    runtime.shutdown().await;
    match outcome {
        Some(o) if o.status == FlowStatus::Completed => ExitCode::SUCCESS,
        Some(_) => ExitCode::from(1),
        None => ExitCode::from(2),
    }
}

/// Start the runtime and say where the model's answers come from and where tools run.
async fn start(config: Config, record: Option<&std::path::Path>) -> Option<Runtime> {
    let replaying = config.llm.values().any(|l| l.cassette.is_some());
    let mut builder = Runtime::builder().config(config);
    if let Some(path) = record {
        builder = builder.record(path);
    }
    let runtime = match builder.start().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            return None;
        }
    };
    if replaying {
        eprintln!(
            "note: the model's answers are replayed from a recorded cassette (api_type = \"replay\"); the tools run for real."
        );
    }
    match &runtime.config().sandbox {
        Some(s) => eprintln!(
            "note: code and files live in a sandbox container per flow ({} via {}, in {}){}",
            s.image,
            s.docker_host,
            s.work_dir,
            match &s.mount {
                Some(host) => format!(", which sees {} on this machine", host.display()),
                None => String::new(),
            }
        ),
        None => eprintln!(
            "note: tools run on this machine, in {}",
            runtime.config().workspace.display()
        ),
    }
    if let Some(store) = runtime.store() {
        eprintln!(
            "note: runs are recorded in {}; if this process dies mid-flow, `manus-rt resume ID` continues the run",
            store.url()
        );
    }
    Some(runtime)
}

/// Run one task to its end, showing its progress; the outcome, or `None` if it could not
/// start.
async fn drive(runtime: &Runtime, task: &str, json: bool, mode: FlowMode) -> Option<FlowOutcome> {
    match runtime.submit(task, SubmitOptions { mode }).await {
        Ok(flow) => Some(follow(flow, json).await),
        Err(e) => {
            eprintln!("manus-rt: {e}");
            None
        }
    }
}

/// Show a flow's progress, answer its questions from stdin, and return how it ended.
async fn follow(mut flow: FlowHandle, json: bool) -> FlowOutcome {
    let live = std::io::stderr().is_terminal();
    let mut board = Board::new(std::io::stderr(), live);
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let outcome = loop {
        tokio::select! {
            event = flow.next_event() => match event {
                Some(FlowEvent::FlowFinished { outcome }) => {
                    if !json {
                        board.on_event(&FlowEvent::FlowFinished { outcome: outcome.clone() });
                    }
                    break outcome;
                }
                Some(e) => {
                    board.on_event(&e);
                    if let FlowEvent::Question { id, .. } = e {
                        let answer = read_answer().await;
                        flow.answer(id, answer);
                    }
                }
                None => unreachable!("next_event yields FlowFinished before None"),
            },
            _ = ticker.tick() => board.tick(),
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\nmanus-rt: cancelling the flow…");
                flow.cancel();
            }
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome).unwrap_or_default()
        );
    } else if !live {
        // Plain mode already printed the report on stderr; stdout gets the result alone.
        println!(
            "{}",
            if outcome.summary.is_empty() {
                final_report(&outcome)
            } else {
                outcome.summary.clone()
            }
        );
    }
    outcome
}

/// `run-mcp`: the primary agent, with the `mcp` profile and one server's tools.
async fn run_mcp(mut config: Config, args: RunMcpArgs) -> ExitCode {
    let server = if let Some(id) = &args.server {
        match config.mcp_servers.iter().find(|s| &s.id == id) {
            Some(s) => s.clone(),
            None => {
                let known: Vec<&str> = config.mcp_servers.iter().map(|s| s.id.as_str()).collect();
                eprintln!(
                    "manus-rt: no MCP server `{id}` in the servers file; servers: {}",
                    if known.is_empty() {
                        "none (add config/mcp.json)".to_string()
                    } else {
                        known.join(", ")
                    }
                );
                return ExitCode::from(2);
            }
        }
    } else {
        let transport = match (&args.stdio, &args.url) {
            (Some(cmd), _) => {
                let mut words = cmd.split_whitespace().map(String::from);
                let Some(command) = words.next() else {
                    eprintln!("manus-rt: --stdio needs a command");
                    return ExitCode::from(2);
                };
                McpTransport::Stdio {
                    command,
                    args: words.collect(),
                    env: Default::default(),
                }
            }
            (None, Some(url)) if args.sse => McpTransport::Sse {
                url: url.clone(),
                headers: Default::default(),
            },
            (None, Some(url)) => McpTransport::StreamableHttp {
                url: url.clone(),
                headers: Default::default(),
            },
            (None, None) => unreachable!("clap requires one source"),
        };
        McpServerSpec {
            id: "server".into(),
            transport,
            call_timeout: config
                .mcp_servers
                .first()
                .map_or(Duration::from_secs(120), |s| s.call_timeout),
            connect_timeout: Duration::from_secs(30),
        }
    };
    let primary = config.flow.primary_agent.clone();
    let Some((agent, _)) = config.agents.iter_mut().find(|(a, _)| a.name == primary) else {
        eprintln!("manus-rt: the primary agent `{primary}` is not in the pool");
        return ExitCode::from(2);
    };
    agent.profile = manus_rt::engine::agent::profile::builtin("mcp").expect("a built-in profile");
    agent.mcp_servers = vec![server.id.clone()];
    config.mcp_servers = vec![server];
    let Some(runtime) = start(config, None).await else {
        return ExitCode::from(2);
    };
    let mut last = None;
    if let Some(prompt) = &args.prompt {
        last = drive(&runtime, prompt, args.json, FlowMode::Single).await;
    } else if args.interactive {
        loop {
            eprint!("mcp> ");
            let line = read_answer().await;
            if line.is_empty() || line.starts_with("(no answer") {
                break;
            }
            last = drive(&runtime, &line, args.json, FlowMode::Single).await;
        }
    } else {
        eprintln!("manus-rt: give a request with -p \"...\", or -i to type requests");
        runtime.shutdown().await;
        return ExitCode::from(2);
    }
    runtime.shutdown().await;
    match last {
        Some(o) if o.status == FlowStatus::Completed => ExitCode::SUCCESS,
        Some(_) => ExitCode::from(1),
        None if args.interactive => ExitCode::SUCCESS,
        None => ExitCode::from(2),
    }
}

/// `mcp-server`: serve the tools until the client leaves (stdio) or Ctrl-C (HTTP).
async fn mcp_server(config: Config, args: McpServerArgs) -> ExitCode {
    let runtime = match Runtime::builder().config(config).start().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            return ExitCode::from(2);
        }
    };
    let serve = runtime.serve_settings();
    let offered = serve.tools.join(", ");
    let served = match args.transport {
        McpTransportArg::Stdio => {
            eprintln!("manus-rt: serving {offered} over MCP on stdio");
            server::serve_stdio(serve).await
        }
        McpTransportArg::Http => match tokio::net::TcpListener::bind(&args.bind).await {
            Ok(listener) => {
                let at = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or(args.bind.clone());
                eprintln!(
                    "manus-rt: serving {offered} over MCP at http://{at}/mcp (Ctrl-C or SIGTERM stops)"
                );
                server::serve_http(serve, listener, stop_signal()).await
            }
            Err(e) => Err(format!("cannot listen on {}: {e}", args.bind)),
        },
    };
    runtime.shutdown().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            ExitCode::from(1)
        }
    }
}

/// `serve`: the HTTP service until Ctrl-C or SIGTERM.
async fn serve(config: Config, bind: &str) -> ExitCode {
    let settings = config.server.clone();
    let listener = match manus_rt::serve::listen(bind, &settings).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match Runtime::builder().config(config).start().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            return ExitCode::from(2);
        }
    };
    let at = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| bind.to_string());
    eprintln!(
        "manus-rt: serving on http://{at} ({}; API described at /openapi.json)",
        if settings.api_tokens.is_empty() {
            "no auth: set [server] api_tokens for bearer tokens"
        } else {
            "bearer tokens required"
        }
    );
    // Runs a killed predecessor left mid-flow continue here, unless configured otherwise.
    let mut resumed = vec![];
    if settings.resume_on_start {
        for id in runtime.interrupted_runs().await.unwrap_or_default() {
            match runtime.resume(&id).await {
                Ok(handle) => {
                    eprintln!("manus-rt: resuming interrupted run {id}");
                    resumed.push(handle);
                }
                Err(e) => eprintln!("manus-rt: run {id} cannot be resumed: {e}"),
            }
        }
    }
    let app = manus_rt::serve::App::new(runtime, settings);
    for handle in resumed {
        app.track(handle);
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        let _ = stop.send(true);
    });
    let mut graceful = stopped.clone();
    let server = manus_rt::serve::run(listener, app.clone(), async move {
        let _ = graceful.wait_for(|s| *s).await;
    });
    // Event streams of running flows stay open; give them a moment, then stop anyway.
    let mut late = stopped;
    tokio::select! {
        () = server => {}
        _ = async move {
            let _ = late.wait_for(|s| *s).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        } => {}
    }
    app.shutdown().await;
    ExitCode::SUCCESS
}

/// Resolves on Ctrl-C or SIGTERM, for servers that stop cleanly either way.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// One line from stdin, read off the async runtime's threads.
async fn read_answer() -> String {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => "(no answer: standard input is closed)".to_string(),
            Ok(_) => line.trim().to_string(),
        }
    })
    .await
    .unwrap_or_default()
}

/// `resume ID`: continue an interrupted run, showing its progress as `run-flow` does.
async fn resume(config: Config, args: ResumeArgs) -> ExitCode {
    let Some(runtime) = start(config, args.record.as_deref()).await else {
        return ExitCode::from(2);
    };
    let outcome = match runtime.resume(&args.id).await {
        Ok(flow) => Some(follow(flow, args.json).await),
        Err(e) => {
            eprintln!("manus-rt: {e}");
            None
        }
    };
    runtime.shutdown().await;
    match outcome {
        Some(o) if o.status == FlowStatus::Completed => ExitCode::SUCCESS,
        Some(_) => ExitCode::from(1),
        None => ExitCode::from(2),
    }
}

/// `runs list` and `runs show ID`, read from the store without starting any flow.
async fn runs(config: &Config, action: RunsAction) -> ExitCode {
    let Some(url) = &config.store else {
        eprintln!(
            "manus-rt: runs are not stored ([store] enabled = false in {})",
            config.source
        );
        return ExitCode::from(2);
    };
    let store = match RunStore::open(url).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            return ExitCode::from(2);
        }
    };
    let shown = match action {
        RunsAction::List { limit, json } => list_runs(&store, limit, json).await,
        RunsAction::Show { id, json } => show_run(&store, &id, json).await,
    };
    store.close().await;
    match shown {
        Ok(code) => code,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            ExitCode::from(2)
        }
    }
}

/// A run's status as `runs` shows it: `interrupted` for a running run whose process is gone.
fn status_of(run: &StoredRun, interrupted: &[(String, Option<String>)]) -> String {
    if interrupted.iter().any(|(id, _)| id == &run.id) {
        "interrupted".into()
    } else {
        run.status.clone()
    }
}

async fn list_runs(
    store: &RunStore,
    limit: usize,
    json: bool,
) -> Result<ExitCode, manus_rt::store::StoreError> {
    let runs = store.list(limit).await?;
    let interrupted = store.interrupted().await?;
    if json {
        let rows: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                let (done, total) = r.progress();
                serde_json::json!({
                    "id": r.id, "status": status_of(r, &interrupted), "task": r.task,
                    "steps_completed": done, "steps": total, "usage": r.usage,
                    "created_at": r.created_at, "updated_at": r.updated_at,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        println!("no runs in {}", store.url());
        return Ok(ExitCode::SUCCESS);
    }
    let now = manus_rt::store::now_ms();
    println!(
        "{:<28} {:<15} {:>5} {:>9} {:>8}  TASK",
        "ID", "STATUS", "STEPS", "TOKENS", "AGE"
    );
    for r in &runs {
        let (done, total) = r.progress();
        println!(
            "{:<28} {:<15} {:>5} {:>9} {:>8}  {}",
            r.id,
            status_of(r, &interrupted),
            format!("{done}/{total}"),
            r.usage.total(),
            age(now - r.created_at),
            r.task
                .replace('\n', " ")
                .chars()
                .take(60)
                .collect::<String>()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `42s`, `5m`, `3h`, `2d`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

async fn show_run(
    store: &RunStore,
    id: &str,
    json: bool,
) -> Result<ExitCode, manus_rt::store::StoreError> {
    let Some(run) = store.get(id).await? else {
        eprintln!(
            "manus-rt: no run `{id}` in {} (`manus-rt runs list` shows the runs)",
            store.url()
        );
        return Ok(ExitCode::from(2));
    };
    let events = store.events(id).await?;
    let memories = store.memories(id).await?;
    if json {
        let all = serde_json::json!({"run": run, "events": events, "memories": memories});
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    let status = status_of(&run, &store.interrupted().await?);
    let (done, total) = run.progress();
    println!(
        "run {} · {status} · {done}/{total} steps completed · {} tokens in {} model calls · {}s",
        run.id,
        run.usage.total(),
        run.usage.calls,
        run.elapsed_ms / 1000
    );
    println!("task: {}\n", run.task);
    match &run.plan {
        Some(plan) => println!("{}", plan.view()),
        None => println!("(no plan yet: it was planning)\n"),
    }
    if !memories.is_empty() {
        println!("Agent memories (each step's working memory when it ended):");
        for m in &memories {
            println!(
                "  step {} attempt {} ({}): {} messages",
                m.step,
                m.attempt,
                m.agent,
                m.messages.len()
            );
        }
    }
    println!("{} events stored", events.len());
    if let Some(o) = &run.outcome {
        println!("\nended {}: {}", status, o.reason);
        if !o.summary.is_empty() {
            println!("\n{}", o.summary);
        }
    } else if status == "interrupted" {
        println!("\nmanus-rt resume {} continues it", run.id);
    }
    Ok(ExitCode::SUCCESS)
}
