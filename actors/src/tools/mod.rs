//! The tool contract and the set of tools an agent can hold.
//!
//! A tool is a value that owns its own state (a shell session, an edit history, a plan
//! book). Tools never run inside the agent: a tool-worker actor (`worker.rs`) owns the
//! agent's tools and runs each call, so a tool that panics takes down only its worker.

pub mod args;
pub mod ask_human;
pub mod bash;
pub mod browser_use;
pub mod chart;
#[cfg(test)]
mod confined_tests;
pub mod crawl;
pub mod data_report;
pub mod data_visualization;
pub mod editor;
pub(crate) mod files;
#[cfg(test)]
mod fuzz;
pub mod memory;
pub mod planning;
pub mod python;
pub mod recall;
pub mod terminate;
pub mod web;
pub mod web_search;
pub mod worker;

/// Reading the workspace from outside the engine, by the file tools' confinement rule.
pub use files::{WorkspaceFileError, image_type, open_workspace_file};

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;

use crate::llm::ToolSpec;
use crate::protocol::{FlowLink, TerminateStatus};
use crate::text::{clip, json_kind};

/// A boxed future that borrows the tool for the length of one call.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;

/// One tool: its schema for the model, and how to run a call.
pub trait Tool: Send + 'static {
    /// Name, description and JSON schema, exactly as the model sees them.
    fn spec(&self) -> ToolSpec;
    /// Run one call with arguments that are already valid JSON (an object).
    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a>;
}

/// What a successful call produced.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// The observation shown to the model.
    pub text: String,
    /// Set by `terminate`: the agent stops after this call.
    pub terminate: Option<TerminateStatus>,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            terminate: None,
        }
    }
}

/// A failed call. The message goes back to the model as an observation, so it says what
/// was wrong and, where it can, what to do instead.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(msg: impl Into<String>) -> Self {
        ToolError(msg.into())
    }
}

/// Where an agent's tools run, given to its tool worker when the worker starts: the same
/// for every call, since an agent serves one flow.
#[derive(Debug, Clone)]
pub struct ToolCtx {
    pub flow_id: String,
    pub agent: String,
    /// Every file a tool touches lies inside this directory.
    pub workspace: PathBuf,
    /// What a tool may ask of its flow: questions to the human, spending to count.
    pub flow: Option<FlowLink>,
    /// With `[sandbox] use_sandbox`, where code runs instead of the host.
    pub sandbox: Option<crate::sandbox::SandboxHandle>,
    /// The flow's browser, for `browser_use`.
    pub browser: Option<crate::browser::BrowserHandle>,
    /// The calling agent's model, for tools that ask it something (`extract_content`).
    pub llm: Option<crate::llm::LlmClient>,
    /// With `[memory]`, the flow's notes that outlast it (`memory_save`, `memory_search`).
    pub memory: Option<std::sync::Arc<dyn memory::MemoryBook>>,
    /// The step the current call works for (set by the worker before each call).
    pub step: Option<usize>,
}

/// Settings shared by the tools of one agent.
#[derive(Debug, Clone)]
pub struct ToolSettings {
    /// Limit for one `python_execute` run.
    pub python_timeout: Duration,
    /// Limit for one `bash` command; the shell is restarted after it.
    pub bash_timeout: Duration,
    /// The Python interpreter for `python_execute`.
    pub python: String,
    /// How long one `python_execute` interpreter lives.
    pub python_session: python::PythonSession,
    /// How long `ask_human` waits for an answer.
    pub ask_timeout: Duration,
    /// Put tool arguments and results on the `execute_tool` span, cut to this many characters.
    pub capture_content: Option<usize>,
    /// `[search]`: the engines `web_search` and `browser_use` search with.
    pub search: std::sync::Arc<web::search::SearchSettings>,
    /// `[sandbox] mode = "process"`: how `python_execute` and `bash` confine what they start
    /// on the host; `None` leaves it the user's full rights.
    pub confine: Option<crate::confine::ConfineSettings>,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            python_timeout: Duration::from_secs(30),
            bash_timeout: Duration::from_secs(120),
            python: "python3".into(),
            python_session: python::PythonSession::default(),
            ask_timeout: Duration::from_secs(600),
            capture_content: None,
            search: Default::default(),
            confine: None,
        }
    }
}

/// A built-in tool as the runtime knows it before making one. Each tool module declares its
/// own (`bash::TOOL`); [`BUILTINS`] lists them all.
#[derive(Clone, Copy)]
pub struct Builtin {
    /// The name the model calls it by, which is also its name in profiles and config.
    pub name: &'static str,
    make: fn(&ToolSettings) -> Box<dyn Tool>,
    /// The longest one call may run by the tool's own limit, if it has one.
    deadline: fn(&ToolSettings) -> Option<Duration>,
    /// Whether its calls act on the flow's browser, so the next prompt shows the browser.
    pub browser: bool,
}

impl Builtin {
    /// A tool without a time limit of its own that leaves the browser alone.
    pub const fn new(name: &'static str, make: fn(&ToolSettings) -> Box<dyn Tool>) -> Self {
        Builtin {
            name,
            make,
            deadline: |_| None,
            browser: false,
        }
    }

    /// The tool stops a call itself after `deadline`.
    pub const fn with_deadline(self, deadline: fn(&ToolSettings) -> Option<Duration>) -> Self {
        Builtin { deadline, ..self }
    }

    /// The tool's calls act on the flow's browser.
    pub const fn on_browser(self) -> Self {
        Builtin {
            browser: true,
            ..self
        }
    }
}

/// Every built-in tool, in the order `tools list` prints them.
pub const BUILTINS: &[Builtin] = &[
    python::TOOL,
    bash::TOOL,
    editor::TOOL,
    data_visualization::TOOL,
    data_report::TOOL,
    planning::TOOL,
    ask_human::TOOL,
    terminate::TOOL,
    browser_use::TOOL,
    web_search::TOOL,
    crawl::TOOL,
    memory::SAVE_TOOL,
    memory::SEARCH_TOOL,
];

/// Every tool name this build knows, in the order `tools list` prints them.
pub const KNOWN_TOOLS: &[&str] = &names::<{ BUILTINS.len() }>();

const fn names<const N: usize>() -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = BUILTINS[i].name;
        i += 1;
    }
    out
}

/// The built-in tool called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// Build a fresh instance of a tool by name.
pub fn make_tool(name: &str, settings: &ToolSettings) -> Option<Box<dyn Tool>> {
    #[cfg(test)]
    if name == tests::PANICS {
        return Some(Box::new(tests::Panics));
    }
    builtin(name).map(|b| (b.make)(settings))
}

/// The longest any built-in tool may run one call by its own limit: past it (with some
/// grace), a worker is taken to hang.
pub fn longest_deadline(settings: &ToolSettings) -> Duration {
    BUILTINS
        .iter()
        .filter_map(|b| (b.deadline)(settings))
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A scratch directory that is removed when the test ends, pass or fail.
    pub struct TempDir(pub PathBuf);

    impl TempDir {
        pub fn new(name: &str) -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "manus-tools-{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A `sleep` that no other test (or process) runs: seconds `300 + n`, and this test
    /// process's id as the fraction, so `leftovers` can find it by its exact command line.
    pub fn unique_sleep(n: u32) -> String {
        format!("{}.{}", 300 + n, std::process::id())
    }

    /// Assert that no process runs `sleep <seconds>` (waiting up to 5 s for it to go). One
    /// that `left_group` (setsid) is ended only where PID namespaces are available
    /// (`process::pid_namespaces`); elsewhere it is only cleaned up. Any found are killed by
    /// PID, so a failing test leaves nothing behind.
    pub fn assert_ended(seconds: &str, left_group: bool) {
        let find = || crate::process::sleeping(seconds);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut left = find();
        while !left.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
            left = find();
        }
        for &pid in &left {
            // SAFETY: kill takes two integers.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if !left_group || crate::process::pid_namespaces() {
            assert!(left.is_empty(), "`sleep {seconds}` still ran: {left:?}");
        }
    }

    /// A call context on the host with `ws` as the workspace.
    pub fn host_ctx(ws: &Path) -> ToolCtx {
        ToolCtx {
            flow_id: "f".into(),
            agent: "a".into(),
            workspace: ws.to_path_buf(),
            flow: None,
            sandbox: None,
            browser: None,
            llm: None,
            memory: None,
            step: None,
        }
    }

    /// The name `make_tool` gives [`Panics`] in tests.
    pub const PANICS: &str = "panic_for_test";

    /// A tool that panics, to prove a crash stays inside its worker.
    pub struct Panics;

    impl Tool for Panics {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: PANICS.into(),
                description: "panics".into(),
                parameters: serde_json::json!({"type": "object"}),
                variants: None,
            }
        }
        fn call<'a>(&'a mut self, _args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
            Box::pin(async { panic!("this tool always panics") })
        }
    }

    #[test]
    fn each_builtin_is_made_under_its_own_name() {
        let settings = ToolSettings::default();
        assert_eq!(KNOWN_TOOLS.len(), BUILTINS.len());
        for (known, b) in KNOWN_TOOLS.iter().zip(BUILTINS) {
            assert_eq!(*known, b.name);
            assert_eq!(make_tool(b.name, &settings).unwrap().spec().name, b.name);
        }
        assert!(make_tool("no_such_tool", &settings).is_none());
        let browsing: Vec<&str> = BUILTINS
            .iter()
            .filter(|b| b.browser)
            .map(|b| b.name)
            .collect();
        assert_eq!(browsing, [browser_use::TOOL.name]);
    }

    #[test]
    fn the_longest_deadline_is_that_of_the_slowest_tool() {
        let settings = ToolSettings {
            python_timeout: Duration::from_secs(7),
            bash_timeout: Duration::from_secs(90),
            ask_timeout: Duration::from_secs(8),
            ..ToolSettings::default()
        };
        assert_eq!(longest_deadline(&settings), Duration::from_secs(90));
    }
}
