//! The command line's shape (clap): every subcommand, flag and help text. What a command
//! does lives in its own module; this file only says what it is called and what it takes.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

pub const CODE_ON_HOST: &str = "Where code runs: by default tools run on this machine (the host) with your \
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
pub struct Cli {
    /// Config file (default: config/config.toml, then config/config.example.toml, then the built-in example)
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Plan the task, run each step on the agent its tag names, and summarise (the main job)
    #[command(after_help = CODE_ON_HOST)]
    RunFlow(RunArgs),
    /// Run the task with the primary agent alone, without a planner
    #[command(after_help = CODE_ON_HOST)]
    Run(RunArgs),
    /// Talk with the runtime: each line you type is a turn of one conversation, planned and
    /// run as a flow that sees the earlier turns and works in the same workspace
    #[command(after_help = CHAT_HELP)]
    Chat(ChatArgs),
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
(Server-Sent Events, resumable with Last-Event-ID; ?protocol=ag-ui for AG-UI events), POST /v1/flows/{id}/answers, POST /v1/flows/{id}/follow-up (the conversation's next turn), GET /v1/threads/{id}, POST /v1/flows/{id}/approvals/{n}, POST /v1/flows/{id}/fork (rerun a finished run from a step), GET /v1/approvals, \
GET /v1/flows/{id}/files/{path} (a workspace file, read-only), GET /.well-known/agent-card.json and POST /a2a (A2A 1.0), GET / (the web console), GET /healthz, GET /metrics, GET /openapi.json. With [server] api_tokens (or MANUS_API_TOKENS) set, /v1, /a2a \
and /metrics need a bearer token. With [cluster], flows are queued in the shared store and run by whichever node has room."
    )]
    Serve {
        /// Address to listen on
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        bind: String,
    },
    /// Sign in to a remote MCP server of the servers file whose `oauth.grant` is
    /// "authorization_code": prints the authorization URL to open in a browser, receives the
    /// answer on a loopback redirect (127.0.0.1, a free port) and stores the tokens
    McpLogin {
        /// The server's id in the servers file
        server: String,
        /// How long to wait for the browser, in seconds
        #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        wait_secs: u64,
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
    /// Rerun a finished run from step N in a fresh workspace: the steps before it replay
    /// their recorded model answers (no model call; their tools run again), then it goes live
    #[command(after_help = FORK_HELP)]
    Fork(ForkArgs),
    /// How well a model and config do: run a suite of cases (evals/README.md), check each
    /// outcome, and print pass rates, tokens, cost and time
    #[command(after_help = EVAL_HELP)]
    Eval(EvalArgs),
    /// Tool calls waiting for a person's approval ([approvals]): list them, approve or reject
    #[command(after_help = APPROVALS_HELP)]
    Approvals {
        #[command(subcommand)]
        action: ApprovalsAction,
    },
    /// The notes agents saved across runs ([memory]): list, search or forget them
    #[command(after_help = MEMORY_HELP)]
    Memory {
        #[command(subcommand)]
        action: MemoryAction,
    },
}

const MEMORY_HELP: &str = "Notes live in the run store ([store] url) in namespaces: `thread:ID` (one conversation), `user:NAME` (a service token's user, or the local user of the CLI) and `global`. Deleting runs (`runs prune`, [store] keep_days/keep_runs) never deletes notes; `memory forget` does.";

#[derive(Subcommand)]
pub enum MemoryAction {
    /// The newest notes: id, namespace, source, text
    List {
        /// Only the notes of this namespace (`user:alice`, `thread:ID`, `global`)
        #[arg(long)]
        namespace: Option<String>,
        /// How many notes to show
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print them as JSON
        #[arg(long)]
        json: bool,
    },
    /// The notes that match any word of QUERY, best first
    Search {
        query: String,
        /// Only these namespaces (repeat it for several); every one by default
        #[arg(long)]
        namespace: Vec<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Print them as JSON
        #[arg(long)]
        json: bool,
    },
    /// Delete notes by id (as `memory list` shows them)
    Forget {
        #[arg(required = true)]
        ids: Vec<String>,
        /// Print the ids deleted as JSON
        #[arg(long)]
        json: bool,
    },
}

const EVAL_HELP: &str = "Each case runs as a flow of its own, in a fresh workspace (kept under \
--out for a look afterwards) with its own run id. The shipped suite runs offline, each case \
replaying its recorded cassette: `manus-rt eval evals/basic --config config/eval-replay.toml`. \
With your model: `manus-rt eval evals/basic --config config/config.toml --repeat 3 --json > mine.json`, \
then `manus-rt eval --compare theirs.json mine.json`. pass@1 is the share of runs that passed; \
pass@k the chance that one of k runs passes, pass^k that all k do (k = --repeat). A run the \
harness could not make (the runtime would not start) is counted apart, not as a failure. Exit \
code 0 when every run passed, 1 when one did not, 2 when the suite or config is invalid.";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["suite", "compare"])))]
pub struct EvalArgs {
    /// The suite: a directory of case directories, or one case's directory
    pub suite: Option<PathBuf>,
    /// Runs per case (the k of pass@k and pass^k)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Runs at once
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel: u32,
    /// Only the case named NAME, or else those whose names contain it (may be given several times)
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<String>,
    /// Print the report as JSON on stdout (progress stays on stderr)
    #[arg(long)]
    pub json: bool,
    /// Where the runs' workspaces go (default: eval-runs/TIME in the current directory)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write each case's model exchanges to its cassette.jsonl, for replay (one run per case)
    #[arg(long, conflicts_with = "repeat")]
    pub record: bool,
    /// Show two reports written by --json side by side, and exit
    #[arg(long, num_args = 2, value_names = ["A.json", "B.json"], conflicts_with_all = ["suite", "record"])]
    pub compare: Vec<PathBuf>,
}

const APPROVALS_HELP: &str = "These commands read and write the run store, so they work from \
any terminal on runs whose process has stopped: a run started with --json or without a \
terminal stops (exit code 3) when it waits for an approval; a run whose process died waits \
too. After a decision, `manus-rt resume ID` goes on: an approved call runs once (with the \
edited arguments, if given), a rejection's reason is what the model reads as the call's \
result. A run still running in a process is answered there (its terminal, or the service).";

#[derive(Subcommand)]
pub enum ApprovalsAction {
    /// The approval requests no one has decided: of one run, or of every unfinished run
    List {
        /// Only this run's
        run: Option<String>,
        /// Print them as JSON
        #[arg(long)]
        json: bool,
    },
    /// Approve request N of run ID, as asked or with other arguments
    Approve {
        run: String,
        id: u64,
        /// Run the call with these arguments instead (JSON, as the tool takes them)
        #[arg(long, value_name = "JSON")]
        arguments: Option<String>,
    },
    /// Reject request N of run ID; the model reads the reason as the call's result
    Reject {
        run: String,
        id: u64,
        /// Why (for the model, which goes on without the call)
        #[arg(long)]
        reason: String,
    },
}

const RESUME_HELP: &str = "A run is interrupted when the process running it died or stopped mid-flow (`manus-rt runs list` marks it). Completed steps are not run again; a step that was running starts over; the plan, the notes later steps read and the tokens spent so far are kept. With a replay profile ([llm] api_type = \"replay\"), the cassette is picked up at the step the run resumes from.";

#[derive(Subcommand)]
pub enum RunsAction {
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
    /// Delete ended runs (with their events and memories) past the retention
    #[command(after_help = PRUNE_HELP)]
    Prune {
        /// Delete ended runs not updated for this many days (default: [store] keep_days)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=36_500))]
        keep_days: Option<u32>,
        /// Keep only the newest this many ended runs (default: [store] keep_runs)
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
        keep_runs: Option<u64>,
        /// Print the deleted runs' ids as JSON
        #[arg(long)]
        json: bool,
    },
}

const PRUNE_HELP: &str = "Runs still running, or interrupted and resumable, are never deleted. With neither bound given here nor set in [store], nothing is deleted and the command exits 2. A service with [store] keep_days or keep_runs prunes by itself, in the background.";

const CHAT_HELP: &str = "Each line is a turn: a flow of its own in the run store, linked to the \
conversation, planned knowing the earlier turns' tasks, plans, notes and answers, in the same \
workspace. The board shows each turn as it runs. Ctrl-C cancels the running turn and the chat goes \
on; at the prompt, Ctrl-C, Ctrl-D or /exit ends the chat. `manus-rt runs show ID` shows a turn, \
`manus-rt chat --continue ID` or `run-flow --continue ID \"…\"` takes the conversation up again later.";

#[derive(clap::Args)]
pub struct ChatArgs {
    /// Take up the conversation of run RUN (any of its turns) instead of starting one
    #[arg(long = "continue", value_name = "RUN")]
    pub continues: Option<String>,
    /// Give each turn to the primary agent alone, without a planner
    #[arg(long)]
    pub single: bool,
    /// Write every model exchange to this cassette file
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub approvals: ApprovalArgs,
}

#[derive(clap::Args)]
pub struct ResumeArgs {
    /// The run's id (as `runs list` shows it)
    pub id: String,
    /// Print the outcome as JSON on stdout (progress stays on stderr)
    #[arg(long)]
    pub json: bool,
    /// Write the resumed part's model exchanges to this cassette file
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub approvals: ApprovalArgs,
}

const FORK_HELP: &str = "A fork is a new run with its own id (`runs show` names the run and step it came from). Each step before N that completed in the run runs again on its recorded model answers, in order: no model call is made for it and it costs nothing, while its tool calls run for real and rebuild its files in the fork's workspace; each tool result is compared with the recorded one. Steps from N on run live from the stored plan (no new plan is made). At the end the fork reports how many answers were replayed and every tool result that differed. Only a finished run (completed, failed or cancelled) can be forked, and only by a runtime without [sandbox] use_sandbox or [cluster] (a fork works in a fresh workspace of this machine's).";

#[derive(clap::Args)]
pub struct ForkArgs {
    /// The run's id (as `runs list` shows it)
    pub id: String,
    /// The step to go live from, numbered from 0 as `runs show` lists them
    #[arg(long, value_name = "N")]
    pub at_step: usize,
    /// The task, edited (the run's own by default)
    #[arg(long, value_name = "TEXT")]
    pub task: Option<String>,
    /// Step N's text, edited (with its [AGENT] tag if it should keep one)
    #[arg(long, value_name = "TEXT")]
    pub step_text: Option<String>,
    /// Where the fork works: a new or empty directory (default: a new one,
    /// <workspace>-forks/<fork id>, beside the config's workspace)
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print the outcome as JSON on stdout (progress stays on stderr)
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub approvals: ApprovalArgs,
}

const RUN_MCP_HELP: &str = "The server is one of config/mcp.json (--server ID), a command \
started with stdio (--stdio \"npx -y @modelcontextprotocol/server-everything\"; split on spaces), or a \
remote URL (--url, streamable HTTP; add --sse for a legacy SSE server). The agent is the config's \
primary agent with the `mcp` profile: it holds the server's tools and `terminate`. Each prompt is a \
fresh run; in -i mode, type one request per line, and an empty line or end of input to quit.";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["server", "stdio", "url"])))]
pub struct RunMcpArgs {
    /// A server of the MCP servers file, by id
    #[arg(long, value_name = "ID")]
    pub server: Option<String>,
    /// A command that speaks MCP on stdin/stdout
    #[arg(long, value_name = "COMMAND")]
    pub stdio: Option<String>,
    /// A remote MCP server (streamable HTTP)
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// With --url: the server speaks the legacy HTTP+SSE transport
    #[arg(long, requires = "url")]
    pub sse: bool,
    /// The request to carry out
    #[arg(short, long, value_name = "PROMPT", conflicts_with = "interactive")]
    pub prompt: Option<String>,
    /// Read requests from standard input, one per line
    #[arg(short, long)]
    pub interactive: bool,
    /// Print each outcome as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct McpServerArgs {
    /// stdio: one client on stdin/stdout; http: streamable HTTP at /mcp
    #[arg(long, value_enum, default_value_t = McpTransportArg::Stdio)]
    pub transport: McpTransportArg,
    /// Address for --transport http
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub bind: String,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum McpTransportArg {
    Stdio,
    Http,
}

#[derive(Subcommand)]
pub enum SandboxAction {
    /// Check that the Docker engine and the sandbox image are usable, and say why not
    Doctor,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// What to do, in plain words
    pub task: String,
    /// Make the task a follow-up to run RUN (any turn of its conversation): the next turn,
    /// which sees what the earlier turns did and works in the same workspace
    #[arg(long = "continue", value_name = "RUN")]
    pub continues: Option<String>,
    /// Print the outcome as JSON on stdout (progress stays on stderr)
    #[arg(long)]
    pub json: bool,
    /// Write every model exchange to this cassette file (replay it with api_type = "replay")
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub approvals: ApprovalArgs,
}

/// What a run that no one can answer does with a tool call that needs approval.
#[derive(clap::Args)]
pub struct ApprovalArgs {
    /// When no one can answer at the terminal (--json, or stdin not a terminal) and a tool
    /// call needs approval: `stop` the run (exit 3) once nothing else runs, to be decided
    /// with `manus-rt approvals` and continued with `manus-rt resume`; or `reject` it
    #[arg(long, value_enum, default_value_t = OnApproval::Stop, value_name = "stop|reject")]
    pub on_approval: OnApproval,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnApproval {
    Stop,
    Reject,
}

#[derive(Subcommand)]
pub enum ConfigAction {
    /// Load and validate the config, then print what it sets up
    Check {
        /// Also ask the default profile's model server a few tiny questions: does it
        /// answer, stream, make native tool calls, follow a JSON schema, take images; and
        /// which [llm] tool_calls mode to pick
        #[arg(long)]
        probe: bool,
    },
}

#[derive(Subcommand)]
pub enum ToolsAction {
    /// List every tool with its description and arguments
    List,
}
