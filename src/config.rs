//! `config.toml`: the file format, its validation (every error names the key and, where it
//! can, the line), and the mapping onto the engine's typed settings.
//!
//! Lookup: `--config FILE`, else `config/config.toml`, else `config/config.example.toml`,
//! else the example compiled into the binary, so `manus-rt run-flow` works anywhere.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use manus_actors::agent::{AgentProfile, AgentSpec, profile};
use manus_actors::browser::{BrowserSettings, ProxySettings, WebDriverSource};
use manus_actors::llm::{ApiType, Cassette, LlmSettings, RetryPolicy};
use manus_actors::mcp::{McpHandle, McpServerSpec};
use manus_actors::planner::{FlowSettings, OnStepFailure};
use manus_actors::sandbox::SandboxSettings;
use manus_actors::tools::web::search::{Engine, SearchSettings};
use manus_actors::tools::{KNOWN_TOOLS, ToolSettings};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::store::StoreUrl;
use crate::telemetry::{OtlpProtocol, TelemetrySettings};

/// The example config, as shipped; it runs with no API key (it replays a cassette).
pub const EMBEDDED_EXAMPLE: &str = include_str!("../config/config.example.toml");
/// The cassette the example config replays, named `builtin:example-flow` there.
pub const EMBEDDED_CASSETTE: &str = include_str!("../config/cassettes/example-flow.jsonl");
const BUILTIN_CASSETTE: &str = "builtin:example-flow";

/// A config problem, with where it is.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub source: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.source, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

// ─── The file format ───────────────────────────────────────────────────────────────────

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    llm: LlmSection,
    #[serde(default)]
    runtime: RuntimeToml,
    #[serde(default)]
    tools: ToolsToml,
    #[serde(default)]
    agents: BTreeMap<String, Spanned<AgentToml>>,
    #[serde(default)]
    flow: FlowToml,
    #[serde(default)]
    telemetry: TelemetryToml,
    #[serde(default)]
    sandbox: SandboxToml,
    #[serde(default)]
    browser: BrowserToml,
    #[serde(default)]
    search: SearchToml,
    #[serde(default)]
    mcp: McpToml,
    #[serde(default)]
    store: StoreToml,
    #[serde(default)]
    server: ServerToml,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreToml {
    enabled: Option<bool>,
    url: Option<Spanned<String>>,
    keep_days: Option<Spanned<i64>>,
    keep_runs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerToml {
    api_tokens: Option<Vec<String>>,
    max_body_kb: Option<usize>,
    resume_on_start: Option<bool>,
    keep_finished_flows: Option<Spanned<usize>>,
    allowed_hosts: Option<Spanned<Vec<String>>>,
    max_connections: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BrowserToml {
    webdriver_url: Option<Spanned<String>>,
    chromedriver_path: Option<String>,
    headless: Option<bool>,
    chromium_path: Option<String>,
    extra_args: Option<Vec<String>>,
    proxy: Option<Spanned<ProxyToml>>,
    max_content_length: Option<Spanned<usize>>,
    page_load_timeout_secs: Option<Spanned<u64>>,
    viewport: Option<Spanned<ViewportToml>>,
    screenshots: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxyToml {
    server: String,
    username: Option<String>,
    password: Option<String>,
    /// An environment variable holding the password (wins over `password`).
    password_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewportToml {
    width: u32,
    height: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchToml {
    engine: Option<Spanned<String>>,
    fallback_engines: Option<Spanned<Vec<String>>>,
    searxng_url: Option<Spanned<String>>,
    brave_url: Option<Spanned<String>>,
    brave_api_key_env: Option<String>,
    duckduckgo_url: Option<Spanned<String>>,
    max_retries: Option<u32>,
    retry_delay_secs: Option<u64>,
    lang: Option<String>,
    country: Option<String>,
    timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpToml {
    servers_file: Option<Spanned<String>>,
    call_timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    serve_tools: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxToml {
    use_sandbox: Option<bool>,
    docker_host: Option<String>,
    image: Option<String>,
    work_dir: Option<String>,
    memory_limit: Option<Spanned<String>>,
    cpu_limit: Option<f64>,
    pids_limit: Option<i64>,
    network_enabled: Option<bool>,
    idle_timeout_secs: Option<u64>,
    max_sandboxes: Option<usize>,
    mount_workspace: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetryToml {
    otlp_endpoint: Option<String>,
    protocol: Option<OtlpProtocol>,
    service_name: Option<String>,
    sample_ratio: Option<f64>,
    capture_content: Option<bool>,
    content_max_chars: Option<usize>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum ApiTypeToml {
    Openai,
    Azure,
    Ollama,
    Replay,
}

/// Declares the `[llm]` keys once: the struct, the key list, field-by-field reading and
/// merging a named profile over the default.
macro_rules! llm_keys {
    ($($key:ident: $ty:ty),* $(,)?) => {
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct LlmToml { $($key: Option<$ty>,)* }

        impl LlmToml {
            /// Read `key`'s value into its field; false if `key` is not an `[llm]` key.
            fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
                match key {
                    $(stringify!($key) => { self.$key = Some(map.next_value()?); Ok(true) })*
                    _ => Ok(false),
                }
            }
            /// This profile with the default's values where it sets none.
            fn over(&self, base: &LlmToml) -> LlmToml {
                LlmToml { $($key: self.$key.clone().or_else(|| base.$key.clone()),)* }
            }
        }
    };
}

llm_keys! {
    api_type: ApiTypeToml,
    base_url: String,
    model: String,
    api_key: String,
    api_key_env: String,
    api_version: String,
    max_tokens: u32,
    max_input_tokens: usize,
    temperature: f32,
    timeout_secs: u64,
    max_retries: u32,
    cassette: String,
    input_price_per_mtok: f64,
    output_price_per_mtok: f64,
    vision: bool,
}

/// `[llm]`: the default profile's keys, and `[llm.NAME]` tables for named profiles.
#[derive(Debug, Default)]
struct LlmSection {
    base: LlmToml,
    named: BTreeMap<String, LlmToml>,
}

impl<'de> Deserialize<'de> for LlmSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SectionVisitor;
        impl<'de> Visitor<'de> for SectionVisitor {
            type Value = LlmSection;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the [llm] table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LlmSection, A::Error> {
                let mut section = LlmSection::default();
                while let Some(key) = map.next_key::<String>()? {
                    if !section.base.read(&key, &mut map)? {
                        let profile = map.next_value_seed(NamedProfile(&key))?;
                        section.named.insert(key, profile);
                    }
                }
                Ok(section)
            }
        }
        d.deserialize_map(SectionVisitor)
    }
}

/// A `[llm.NAME]` table; anything else under `[llm]` is an unknown key.
struct NamedProfile<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for NamedProfile<'_> {
    type Value = LlmToml;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<LlmToml, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NamedProfile<'_> {
    type Value = LlmToml;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a known [llm] key or a [llm.{}] profile table; `{}` is neither (keys: api_type, base_url, model, \
             api_key, api_key_env, api_version, max_tokens, max_input_tokens, temperature, timeout_secs, \
             max_retries, cassette, vision)",
            self.0, self.0
        )
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LlmToml, A::Error> {
        LlmToml::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuntimeToml {
    workspace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsToml {
    python: Option<String>,
    python_timeout_secs: Option<u64>,
    bash_timeout_secs: Option<u64>,
    ask_timeout_secs: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentToml {
    profile: Option<Spanned<String>>,
    description: Option<String>,
    replicas: Option<u32>,
    llm: Option<Spanned<String>>,
    max_steps: Option<u32>,
    tools: Option<Spanned<Vec<String>>>,
    max_observe: Option<usize>,
    memory_messages: Option<usize>,
    memory_tokens: Option<usize>,
    system_prompt: Option<String>,
    next_step_prompt: Option<String>,
    mcp_servers: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowToml {
    primary_agent: Option<Spanned<String>>,
    planner_llm: Option<Spanned<String>>,
    step_timeout_secs: Option<u64>,
    flow_timeout_secs: Option<u64>,
    planner_replicas: Option<Spanned<u32>>,
    max_step_retries: Option<u32>,
    on_step_failure: Option<OnStepFailure>,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
}

// ─── The loaded config ─────────────────────────────────────────────────────────────────

/// A validated config, mapped onto the engine's types.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from (a path, or "embedded example").
    pub source: String,
    /// LLM profiles by name; `default` is `[llm]`.
    pub llm: BTreeMap<String, Arc<LlmSettings>>,
    pub planner_llm: String,
    pub workspace: PathBuf,
    pub tools: ToolSettings,
    /// The pool, in name order; each agent names its LLM profile.
    pub agents: Vec<(AgentTemplate, String)>,
    pub flow: FlowSettings,
    /// `[telemetry]` with the `OTEL_*` environment applied.
    pub telemetry: TelemetrySettings,
    /// `[sandbox]` when `use_sandbox = true`; code runs on the host otherwise.
    pub sandbox: Option<SandboxSettings>,
    /// `[browser]`; a browser starts only when an agent first uses it.
    pub browser: BrowserSettings,
    /// The MCP servers of the servers file, in id order.
    pub mcp_servers: Vec<McpServerSpec>,
    /// The tools `manus-rt mcp-server` offers (`[mcp] serve_tools`).
    pub mcp_serve_tools: Vec<String>,
    /// Where runs are recorded (`[store] url`); `None` with `[store] enabled = false`.
    pub store: Option<StoreUrl>,
    /// How long ended runs are kept (`[store] keep_days`, `keep_runs`); unbounded by default.
    pub retention: crate::store::Retention,
    /// `[server]`, for `manus-rt serve`; `MANUS_API_TOKENS` (comma-separated) adds tokens.
    pub server: crate::serve::ServerSettings,
}

/// An agent of the pool before it is bound to a flow's LLM client.
#[derive(Debug, Clone)]
pub struct AgentTemplate {
    pub name: String,
    pub description: String,
    pub profile: AgentProfile,
    pub replicas: u32,
    /// Ids of the MCP servers whose tools this agent gets.
    pub mcp_servers: Vec<String>,
}

impl AgentTemplate {
    pub fn bind(
        &self,
        llm: manus_actors::llm::LlmClient,
        tools: &ToolSettings,
        workspace: &Path,
        sandbox: Option<manus_actors::sandbox::SandboxHandle>,
        browser: Option<manus_actors::browser::BrowserHandle>,
        mcp: Vec<McpHandle>,
    ) -> AgentSpec {
        AgentSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            profile: self.profile.clone(),
            replicas: self.replicas,
            slots: Arc::new(tokio::sync::Semaphore::new(self.replicas as usize)),
            tool_specs: manus_actors::tools::worker::specs_for(&self.profile.tools, tools).into(),
            llm,
            tool_settings: tools.clone(),
            workspace: workspace.to_path_buf(),
            sandbox,
            browser,
            mcp,
            system: AgentSpec::opening(&self.profile, workspace, &self.name),
        }
    }

    /// Whether this agent holds a tool that needs the browser.
    pub fn uses_browser(&self) -> bool {
        self.profile.tools.iter().any(|t| t == "browser_use")
    }
}

impl Config {
    /// Find and load the config: `explicit`, else the usual places, else the embedded example.
    pub fn locate(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        if let Some(path) = explicit {
            return Config::load(path);
        }
        for candidate in ["config/config.toml", "config/config.example.toml"] {
            let p = Path::new(candidate);
            if p.exists() {
                return Config::load(p);
            }
        }
        Config::parse(EMBEDDED_EXAMPLE, "embedded example config", None)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            source: path.display().to_string(),
            line: None,
            message: format!("cannot read it: {e}"),
        })?;
        Config::parse(&text, &path.display().to_string(), path.parent())
    }

    /// Parse and validate config text. `dir` resolves relative cassette paths.
    pub fn parse(text: &str, source: &str, dir: Option<&Path>) -> Result<Config, ConfigError> {
        let err = |line: Option<usize>, message: String| ConfigError {
            source: source.to_string(),
            line,
            message,
        };
        let at = |span: std::ops::Range<usize>| {
            Some(text[..span.start.min(text.len())].matches('\n').count() + 1)
        };
        let file: ConfigFile = toml::from_str(text).map_err(|e| {
            let line = e.span().and_then(&at);
            let mut message = e.message().trim().to_string();
            if let Some(n) = line {
                message = format!("{message}\n  in {}", locate_line(text, n));
            }
            err(line, message)
        })?;

        // Telemetry first: content capture reaches into the model and tool settings.
        let tt = &file.telemetry;
        if let Some(r) = tt.sample_ratio
            && !(0.0..=1.0).contains(&r)
        {
            return Err(err(
                None,
                format!("[telemetry] sample_ratio = {r} must be between 0.0 and 1.0"),
            ));
        }
        if let Some(url) = &tt.otlp_endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(err(
                None,
                format!(
                    "[telemetry] otlp_endpoint = \"{url}\" must start with http:// or https://"
                ),
            ));
        }
        let telemetry = TelemetrySettings {
            otlp_endpoint: tt.otlp_endpoint.clone(),
            protocol: tt.protocol.unwrap_or(OtlpProtocol::Http),
            service_name: tt.service_name.clone().unwrap_or_else(|| "manus-rt".into()),
            sample_ratio: tt.sample_ratio.unwrap_or(1.0),
            capture_content: tt
                .capture_content
                .unwrap_or(false)
                .then(|| tt.content_max_chars.unwrap_or(2000)),
        }
        .with_env();

        // LLM profiles.
        let mut llm = BTreeMap::new();
        let mut named: Vec<(String, LlmToml)> = vec![("default".into(), file.llm.base.clone())];
        named.extend(
            file.llm
                .named
                .iter()
                .map(|(k, v)| (k.clone(), v.over(&file.llm.base))),
        );
        for (name, t) in named {
            let mut settings = llm_settings(&name, &t, dir).map_err(|m| err(None, m))?;
            settings.capture_content = telemetry.capture_content;
            llm.insert(name, Arc::new(settings));
        }
        let profile_ref = |r: &Option<Spanned<String>>, key: &str| -> Result<String, ConfigError> {
            match r {
                None => Ok("default".into()),
                Some(s) if llm.contains_key(s.get_ref()) => Ok(s.get_ref().clone()),
                Some(s) => Err(err(
                    at(s.span()),
                    format!(
                        "{key} = \"{}\": no such LLM profile; defined: {}",
                        s.get_ref(),
                        llm.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )),
            }
        };

        // MCP servers, before the pool, whose agents may name them.
        let m = &file.mcp;
        let call_timeout = Duration::from_secs(m.call_timeout_secs.unwrap_or(120).max(1));
        let connect_timeout = Duration::from_secs(m.connect_timeout_secs.unwrap_or(30).max(1));
        let base = dir.unwrap_or(Path::new("config"));
        let mcp_servers = match &m.servers_file {
            Some(f) => {
                let path = base.join(f.get_ref());
                if !path.exists() {
                    return Err(err(
                        at(f.span()),
                        format!(
                            "[mcp] servers_file = \"{}\": {} does not exist",
                            f.get_ref(),
                            path.display()
                        ),
                    ));
                }
                crate::mcp_servers::load(&path, call_timeout, connect_timeout)?
            }
            None if base.join("mcp.json").exists() => {
                crate::mcp_servers::load(&base.join("mcp.json"), call_timeout, connect_timeout)?
            }
            None => vec![],
        };
        let mcp_serve_tools = match &m.serve_tools {
            Some(list) => {
                known_tools(list, "[mcp] serve_tools").map_err(|msg| err(at(list.span()), msg))?;
                list.get_ref().clone()
            }
            None => ["bash", "python_execute", "str_replace_editor", "terminate"]
                .map(String::from)
                .to_vec(),
        };

        // The agent pool.
        if file.agents.is_empty() {
            return Err(err(
                None,
                "the agent pool is empty: add at least one [agents.NAME] table".into(),
            ));
        }
        let mut agents = vec![];
        for (name, spanned) in &file.agents {
            let a = spanned.get_ref();
            let key = |k: &str| format!("[agents.{name}] {k}");
            let profile_id = a
                .profile
                .as_ref()
                .map(|p| p.get_ref().clone())
                .unwrap_or_else(|| {
                    if profile::builtin(name).is_some() {
                        name.clone()
                    } else {
                        "manus".into()
                    }
                });
            let mut prof = profile::builtin(&profile_id).ok_or_else(|| {
                err(
                    a.profile.as_ref().and_then(|p| at(p.span())),
                    format!(
                        "{} = \"{profile_id}\": no such profile; built-in profiles: {}",
                        key("profile"),
                        profile::BUILTIN_PROFILES.join(", ")
                    ),
                )
            })?;
            if let Some(tools) = &a.tools {
                known_tools(tools, &key("tools")).map_err(|msg| err(at(tools.span()), msg))?;
                prof.tools = tools.get_ref().clone();
            }
            let mcp_of_agent = match &a.mcp_servers {
                Some(ids) => {
                    if let Some(bad) = ids
                        .get_ref()
                        .iter()
                        .find(|id| !mcp_servers.iter().any(|s| &s.id == *id))
                    {
                        return Err(err(
                            at(ids.span()),
                            format!(
                                "{}: no MCP server `{bad}` in the servers file; servers: {}",
                                key("mcp_servers"),
                                if mcp_servers.is_empty() {
                                    "none (add config/mcp.json, or set [mcp] servers_file)"
                                        .to_string()
                                } else {
                                    mcp_servers
                                        .iter()
                                        .map(|s| s.id.clone())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                }
                            ),
                        ));
                    }
                    ids.get_ref().clone()
                }
                None => mcp_servers.iter().map(|s| s.id.clone()).collect(),
            };
            if !prof.tools.iter().any(|t| t == "terminate") {
                prof.tools.push("terminate".into());
            }
            prof.max_steps = a.max_steps.unwrap_or(prof.max_steps);
            prof.max_observe = a.max_observe.unwrap_or(prof.max_observe);
            prof.memory_messages = a.memory_messages.unwrap_or(prof.memory_messages);
            prof.memory_tokens = a.memory_tokens.unwrap_or(prof.memory_tokens);
            if let Some(s) = &a.system_prompt {
                prof.system_prompt = s.clone();
            }
            if let Some(s) = &a.next_step_prompt {
                prof.next_step_prompt = s.clone();
            }
            if prof.max_steps == 0 {
                return Err(err(
                    at(spanned.span()),
                    format!("{} must be at least 1", key("max_steps")),
                ));
            }
            let llm_name = profile_ref(&a.llm, &key("llm"))?;
            let description = a.description.clone().unwrap_or_else(|| match profile_id.as_str() {
                "data_analysis" => "Analyses data files with Python and reports findings with numbers.".into(),
                _ => "A general agent: runs Python and shell commands, edits files, asks the user.".into(),
            });
            let template = AgentTemplate {
                name: name.to_ascii_lowercase(),
                description,
                profile: prof,
                replicas: a.replicas.unwrap_or(4).max(1),
                mcp_servers: mcp_of_agent,
            };
            agents.push((template, llm_name));
        }

        let f = &file.flow;
        let primary_agent = match &f.primary_agent {
            Some(p)
                if agents
                    .iter()
                    .any(|(a, _)| a.name.eq_ignore_ascii_case(p.get_ref())) =>
            {
                p.get_ref().to_ascii_lowercase()
            }
            Some(p) => {
                return Err(err(
                    at(p.span()),
                    format!(
                        "[flow] primary_agent = \"{}\": no such agent in the pool; agents: {}",
                        p.get_ref(),
                        agents
                            .iter()
                            .map(|(a, _)| a.name.clone())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            None if agents.iter().any(|(a, _)| a.name == "manus") => "manus".into(),
            None => agents[0].0.name.clone(),
        };
        let planner_llm = profile_ref(&f.planner_llm, "[flow] planner_llm")?;
        let planner_replicas = match &f.planner_replicas {
            Some(n) if *n.get_ref() == 0 => {
                return Err(err(
                    at(n.span()),
                    "[flow] planner_replicas must be at least 1".into(),
                ));
            }
            Some(n) => *n.get_ref(),
            // As many planner calls at once as agent steps can run.
            None => agents.iter().map(|(a, _)| a.replicas).sum(),
        };
        let flow = FlowSettings {
            primary_agent,
            planner_replicas,
            step_timeout: Duration::from_secs(f.step_timeout_secs.unwrap_or(900)),
            flow_timeout: Duration::from_secs(f.flow_timeout_secs.unwrap_or(3600)),
            max_step_retries: f.max_step_retries.unwrap_or(1),
            on_step_failure: f.on_step_failure.unwrap_or(OnStepFailure::Continue),
            max_tokens: f.max_tokens,
            max_cost: f.max_cost,
        };
        let defaults = ToolSettings::default();
        let t = &file.tools;
        let tools = ToolSettings {
            python: t.python.clone().unwrap_or(defaults.python),
            python_timeout: t
                .python_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(defaults.python_timeout),
            bash_timeout: t
                .bash_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(defaults.bash_timeout),
            ask_timeout: t
                .ask_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(defaults.ask_timeout),
            capture_content: telemetry.capture_content,
            search: Arc::new(search_settings(&file.search, &at).map_err(|(l, m)| err(l, m))?),
        };
        let browser = browser_settings(&file.browser, &at).map_err(|(l, m)| err(l, m))?;
        let workspace = PathBuf::from(
            file.runtime
                .workspace
                .clone()
                .unwrap_or_else(|| "workspace".into()),
        );
        let sb = &file.sandbox;
        let memory_limit = match &sb.memory_limit {
            Some(m) => parse_bytes(m.get_ref()).ok_or_else(|| {
                err(
                    at(m.span()),
                    format!(
                        "[sandbox] memory_limit = \"{}\": use a size such as \"512m\" or \"2g\"",
                        m.get_ref()
                    ),
                )
            })?,
            None => 512 * 1024 * 1024,
        };
        let sandbox = sb.use_sandbox.unwrap_or(false).then(|| SandboxSettings {
            docker_host: sb.docker_host.clone().unwrap_or_else(|| {
                std::env::var("DOCKER_HOST")
                    .ok()
                    .filter(|h| h.starts_with("unix://"))
                    .unwrap_or_else(|| "unix:///var/run/docker.sock".into())
            }),
            image: sb
                .image
                .clone()
                .unwrap_or_else(|| "manus-rt-sandbox:latest".into()),
            work_dir: sb.work_dir.clone().unwrap_or_else(|| "/workspace".into()),
            memory_limit,
            cpu_limit: sb.cpu_limit.unwrap_or(1.0),
            pids_limit: sb.pids_limit.unwrap_or(256),
            network_enabled: sb.network_enabled.unwrap_or(false),
            idle_timeout: Duration::from_secs(sb.idle_timeout_secs.unwrap_or(600)),
            max_sandboxes: sb.max_sandboxes.unwrap_or(8).max(1),
            mount: sb
                .mount_workspace
                .unwrap_or(false)
                .then(|| workspace.clone()),
        });
        if let Some(s) = &sandbox
            && !s.work_dir.starts_with('/')
        {
            return Err(err(
                None,
                format!(
                    "[sandbox] work_dir = \"{}\" must be an absolute path",
                    s.work_dir
                ),
            ));
        }
        let store = match (&file.store.enabled, &file.store.url) {
            (Some(false), _) => None,
            (_, None) => Some(StoreUrl::Sqlite(PathBuf::from("runs.db"))),
            (_, Some(url)) => Some(StoreUrl::parse(url.get_ref()).map_err(|why| {
                err(
                    at(url.span()),
                    format!("[store] url = \"{}\": {why}", url.get_ref()),
                )
            })?),
        };
        // Retention: each bound in its range, or absent (runs are kept forever).
        let bound = |key: &str, v: &Option<Spanned<i64>>, max: i64, unit: &str| match v {
            None => Ok(None),
            Some(n) if (1..=max).contains(n.get_ref()) => Ok(Some(*n.get_ref())),
            Some(n) => Err(err(
                at(n.span()),
                format!(
                    "[store] {key} = {} is out of range: use 1 to {max} ({unit}), or leave it \
                     out to keep ended runs forever",
                    n.get_ref()
                ),
            )),
        };
        let retention = crate::store::Retention {
            keep_days: bound("keep_days", &file.store.keep_days, 36_500, "days")?.map(|d| d as u32),
            keep_runs: bound("keep_runs", &file.store.keep_runs, 1_000_000_000, "runs")?
                .map(|n| n as u64),
        };
        let mut api_tokens = file.server.api_tokens.clone().unwrap_or_default();
        if let Ok(env) = std::env::var("MANUS_API_TOKENS") {
            api_tokens.extend(
                env.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(String::from),
            );
        }
        if api_tokens.iter().any(|t| t.trim().is_empty()) {
            return Err(err(None, "[server] api_tokens: a token is empty".into()));
        }
        let keep_finished = match &file.server.keep_finished_flows {
            None => crate::serve::ServerSettings::default().keep_finished,
            Some(n) if *n.get_ref() == 0 => {
                return Err(err(
                    at(n.span()),
                    "[server] keep_finished_flows = 0: keep at least one finished flow, so \
                     its result can be read once it ends"
                        .into(),
                ));
            }
            Some(n) => *n.get_ref(),
        };
        let allowed_hosts = match &file.server.allowed_hosts {
            None => vec![],
            Some(hosts) => {
                // A host name or address, as a `Host` header names it, without a port.
                let bad = hosts.get_ref().iter().find(|h| {
                    h.parse::<axum::http::uri::Authority>()
                        .map_or(true, |a| a.port().is_some() || a.host() != h.as_str())
                });
                if let Some(h) = bad {
                    return Err(err(
                        at(hosts.span()),
                        format!(
                            "[server] allowed_hosts: \"{h}\" is not a host name or address \
                             without a port (e.g. \"manus.internal\", \"10.0.0.5\", \"[fd00::5]\")"
                        ),
                    ));
                }
                hosts.get_ref().clone()
            }
        };
        let max_connections = match &file.server.max_connections {
            None => crate::serve::ServerSettings::default().max_connections,
            Some(n) if (1..=1_000_000).contains(n.get_ref()) => *n.get_ref() as usize,
            Some(n) => {
                return Err(err(
                    at(n.span()),
                    format!(
                        "[server] max_connections = {} is out of range: use 1 to 1000000",
                        n.get_ref()
                    ),
                ));
            }
        };
        let server = crate::serve::ServerSettings {
            allowed_hosts,
            max_connections,
            api_tokens,
            max_body_bytes: file.server.max_body_kb.unwrap_or(64).max(1) * 1024,
            resume_on_start: file.server.resume_on_start.unwrap_or(true),
            keep_finished,
        };
        Ok(Config {
            store,
            retention,
            sandbox,
            server,
            browser,
            mcp_servers,
            mcp_serve_tools,
            telemetry,
            source: source.to_string(),
            llm,
            planner_llm,
            workspace,
            tools,
            agents,
            flow,
        })
    }
}

/// Every name in `list` is a tool this build has; the error names `key`.
fn known_tools(list: &Spanned<Vec<String>>, key: &str) -> Result<(), String> {
    match list
        .get_ref()
        .iter()
        .find(|t| !KNOWN_TOOLS.contains(&t.as_str()))
    {
        Some(bad) => Err(format!(
            "{key}: unknown tool `{bad}`; known tools: {}",
            KNOWN_TOOLS.join(", ")
        )),
        None => Ok(()),
    }
}

/// `512m`, `2g`, `1048576` → bytes.
fn parse_bytes(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = digits.parse().ok()?;
    let mult = match unit.trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult).filter(|b| *b > 0)
}

/// Line `n` of the file with the table it belongs to, e.g. `[agents.manus] max_steps = "ten"`.
fn locate_line(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let here = lines.get(n - 1).map(|l| l.trim()).unwrap_or("");
    if here.starts_with('[') {
        return here.to_string();
    }
    let table = lines[..(n - 1).min(lines.len())]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['));
    match table {
        Some(t) => format!("{t} {here}"),
        None => here.to_string(),
    }
}

/// One LLM profile's settings, with defaults and secrets from the environment.
fn llm_settings(name: &str, t: &LlmToml, dir: Option<&Path>) -> Result<LlmSettings, String> {
    let key = |k: &str| {
        if name == "default" {
            format!("[llm] {k}")
        } else {
            format!("[llm.{name}] {k}")
        }
    };
    let api_type = t.api_type.unwrap_or(ApiTypeToml::Openai);
    if api_type == ApiTypeToml::Replay {
        let source = t
            .cassette
            .as_deref()
            .ok_or_else(|| format!("{} is required when api_type = \"replay\"", key("cassette")))?;
        let cassette = if source == BUILTIN_CASSETTE {
            Cassette::parse(BUILTIN_CASSETTE, EMBEDDED_CASSETTE)
        } else {
            let p = Path::new(source);
            let p = if p.is_relative() {
                dir.unwrap_or(Path::new(".")).join(p)
            } else {
                p.to_path_buf()
            };
            Cassette::load(&p)
        }
        .map_err(|e| format!("{}: {e}", key("cassette")))?;
        return Ok(LlmSettings {
            input_price_per_mtok: t.input_price_per_mtok.unwrap_or(0.0),
            output_price_per_mtok: t.output_price_per_mtok.unwrap_or(0.0),
            ..LlmSettings::replay(name, Arc::new(cassette))
        });
    }
    let base_url = match (api_type, &t.base_url) {
        (_, Some(u)) => u.clone(),
        (ApiTypeToml::Ollama, None) => "http://127.0.0.1:11434/v1".into(),
        (ApiTypeToml::Azure, None) => {
            return Err(format!(
                "{} is required when api_type = \"azure\"",
                key("base_url")
            ));
        }
        _ => "https://api.openai.com/v1".into(),
    };
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(format!(
            "{} = \"{base_url}\" must start with http:// or https://",
            key("base_url")
        ));
    }
    let model = t.model.clone().ok_or_else(|| {
        format!(
            "{} is required (the model's name on the server)",
            key("model")
        )
    })?;
    // A named environment variable wins over a key written in the file.
    let env_name = t.api_key_env.clone().or_else(|| {
        (api_type == ApiTypeToml::Openai && t.api_key.is_none()).then(|| "OPENAI_API_KEY".into())
    });
    let api_key = env_name
        .and_then(|v| std::env::var(v).ok())
        .filter(|v| !v.is_empty())
        .or_else(|| t.api_key.clone());
    let defaults = RetryPolicy::default();
    Ok(LlmSettings {
        profile: name.to_string(),
        api_type: if api_type == ApiTypeToml::Azure {
            ApiType::Azure
        } else {
            ApiType::OpenAi
        },
        base_url,
        api_key,
        api_version: t.api_version.clone(),
        max_tokens: t.max_tokens.unwrap_or(4096),
        max_input_tokens: t.max_input_tokens,
        temperature: t.temperature.unwrap_or(0.2),
        timeout: Duration::from_secs(t.timeout_secs.unwrap_or(120)),
        retry: RetryPolicy {
            max_retries: t.max_retries.unwrap_or(defaults.max_retries),
            ..defaults
        },
        input_price_per_mtok: t.input_price_per_mtok.unwrap_or(0.0),
        output_price_per_mtok: t.output_price_per_mtok.unwrap_or(0.0),
        capture_content: None,
        cassette: None,
        vision: t.vision.unwrap_or_else(|| sees_images(&model)),
        model,
    })
}

/// Whether a model name belongs to a family known to accept images; `[llm] vision` says
/// so explicitly for any other.
fn sees_images(model: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "gpt-4o",
        "gpt-4.1",
        "gpt-4-turbo",
        "gpt-5",
        "claude",
        "gemini",
        "gemma3",
        "llava",
        "pixtral",
        "vision",
        "-vl",
    ];
    let m = model.to_ascii_lowercase();
    FAMILIES.iter().any(|f| m.contains(f)) || ["o1", "o3", "o4"].iter().any(|o| m.starts_with(o))
}

/// Where a config error is: its line (if known) and the message.
type Located = (Option<usize>, String);

/// `http://` or `https://`, or an error naming the key and its line.
fn web_url(
    v: &Spanned<String>,
    key: &str,
    at: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
) -> Result<String, Located> {
    let u = v.get_ref();
    if u.starts_with("http://") || u.starts_with("https://") {
        Ok(u.trim_end_matches('/').to_string())
    } else {
        Err((
            at(v.span()),
            format!("{key} = \"{u}\" must start with http:// or https://"),
        ))
    }
}

/// `[browser]` with its defaults, checked.
fn browser_settings(
    b: &BrowserToml,
    at: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
) -> Result<BrowserSettings, Located> {
    let defaults = BrowserSettings::default();
    let webdriver = match (&b.webdriver_url, &b.chromedriver_path) {
        (Some(u), Some(_)) => {
            return Err((
                at(u.span()),
                "[browser] webdriver_url and chromedriver_path are both set: attach to a running WebDriver \
                 (webdriver_url) or launch chromedriver (chromedriver_path), not both"
                    .into(),
            ));
        }
        (Some(u), None) => WebDriverSource::Url(web_url(u, "[browser] webdriver_url", at)?),
        (None, Some(p)) => WebDriverSource::Launch(p.clone()),
        (None, None) => defaults.webdriver,
    };
    let positive = |v: &Option<Spanned<u64>>, key: &str, default: u64| match v {
        Some(n) if *n.get_ref() == 0 => {
            Err((at(n.span()), format!("[browser] {key} must be at least 1")))
        }
        Some(n) => Ok(*n.get_ref()),
        None => Ok(default),
    };
    let max_content_length = positive(
        &b.max_content_length
            .as_ref()
            .map(|v| Spanned::new(v.span(), *v.get_ref() as u64)),
        "max_content_length",
        defaults.max_content_length as u64,
    )? as usize;
    let page_load = positive(
        &b.page_load_timeout_secs,
        "page_load_timeout_secs",
        defaults.page_load_timeout.as_secs(),
    )?;
    let viewport = match &b.viewport {
        Some(v) => {
            let ViewportToml { width, height } = *v.get_ref();
            if !(200..=8000).contains(&width) || !(200..=8000).contains(&height) {
                return Err((
                    at(v.span()),
                    format!(
                        "[browser] viewport {width}x{height}: width and height must be between 200 and 8000 pixels"
                    ),
                ));
            }
            (width, height)
        }
        None => defaults.viewport,
    };
    let proxy = match &b.proxy {
        Some(p) => {
            let t = p.get_ref();
            if t.server.trim().is_empty() {
                return Err((at(p.span()), "[browser.proxy] server is empty".into()));
            }
            let password = t
                .password_env
                .as_ref()
                .and_then(|v| std::env::var(v).ok())
                .or_else(|| t.password.clone());
            Some(ProxySettings {
                server: t.server.clone(),
                username: t.username.clone(),
                password,
            })
        }
        None => None,
    };
    Ok(BrowserSettings {
        webdriver,
        headless: b.headless.unwrap_or(defaults.headless),
        chromium_path: b.chromium_path.clone(),
        extra_args: b.extra_args.clone().unwrap_or_default(),
        proxy,
        max_content_length,
        page_load_timeout: Duration::from_secs(page_load),
        viewport,
        screenshots: b.screenshots.unwrap_or(defaults.screenshots),
    })
}

/// `[search]` with its defaults, checked; the Brave key comes from the environment.
fn search_settings(
    t: &SearchToml,
    at: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
) -> Result<SearchSettings, Located> {
    let defaults = SearchSettings::default();
    let known = || Engine::ALL.map(Engine::name).join(", ");
    let engine = |name: &str, line: Option<usize>| {
        Engine::by_name(name).ok_or_else(|| {
            (
                line,
                format!(
                    "[search]: unknown search engine `{name}`; known engines: {}",
                    known()
                ),
            )
        })
    };
    let mut engines = vec![];
    if let Some(e) = &t.engine {
        engines.push(engine(e.get_ref(), at(e.span()))?);
    }
    if let Some(list) = &t.fallback_engines {
        for name in list.get_ref() {
            let e = engine(name, at(list.span()))?;
            if !engines.contains(&e) {
                engines.push(e);
            }
        }
    }
    if engines.is_empty() {
        engines = defaults.engines.clone();
    }
    let url = |v: &Option<Spanned<String>>, key: &str| {
        v.as_ref()
            .map(|u| web_url(u, &format!("[search] {key}"), at))
            .transpose()
    };
    let key_env = t.brave_api_key_env.as_deref().unwrap_or("BRAVE_API_KEY");
    Ok(SearchSettings {
        engines,
        searxng_url: url(&t.searxng_url, "searxng_url")?,
        brave_url: url(&t.brave_url, "brave_url")?.unwrap_or(defaults.brave_url),
        brave_api_key: std::env::var(key_env).ok().filter(|k| !k.is_empty()),
        duckduckgo_url: url(&t.duckduckgo_url, "duckduckgo_url")?
            .unwrap_or(defaults.duckduckgo_url),
        max_retries: t.max_retries.unwrap_or(defaults.max_retries),
        retry_delay: t
            .retry_delay_secs
            .map(Duration::from_secs)
            .unwrap_or(defaults.retry_delay),
        lang: t.lang.clone().unwrap_or(defaults.lang),
        country: t.country.clone().unwrap_or(defaults.country),
        timeout: t
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(defaults.timeout),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, "test.toml", None)
    }

    const MINIMAL: &str =
        "[llm]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\n[agents.manus]\n";

    #[test]
    fn the_embedded_example_loads() {
        let c = Config::parse(EMBEDDED_EXAMPLE, "example", None).unwrap();
        assert!(c.agents.iter().any(|(a, _)| a.name == "manus"));
        assert!(c.agents.iter().any(|(a, _)| a.name == "data_analysis"));
    }

    #[test]
    fn sandbox_settings_parse_and_sizes_are_checked() {
        let c = parse(&format!(
            "{MINIMAL}\n[sandbox]\nuse_sandbox = true\nmemory_limit = \"64m\"\n"
        ))
        .unwrap();
        let s = c.sandbox.unwrap();
        assert_eq!(s.memory_limit, 64 << 20);
        assert_eq!(
            (s.work_dir.as_str(), s.network_enabled),
            ("/workspace", false)
        );
        assert!(
            parse(MINIMAL).unwrap().sandbox.is_none(),
            "off unless asked for"
        );
        let e = parse(&format!(
            "{MINIMAL}\n[sandbox]\nuse_sandbox = true\nmemory_limit = \"lots\"\n"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(9), "{e}");
        assert!(e.message.contains("memory_limit"), "{e}");
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("512MB"), Some(512 << 20));
        assert_eq!(parse_bytes("0"), None);
    }

    #[test]
    fn store_and_server_settings() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.store, Some(StoreUrl::Sqlite("runs.db".into())));
        assert!(c.server.resume_on_start);
        let c = parse(&format!(
            "{MINIMAL}\n[store]\nurl = \"postgres://u:p@127.0.0.1:5432/runs\"\n\n[server]\nresume_on_start = false\n"
        ))
        .unwrap();
        assert!(matches!(c.store, Some(StoreUrl::Postgres(_))));
        assert!(!c.server.resume_on_start);
        let c = parse(&format!("{MINIMAL}\n[store]\nenabled = false\n")).unwrap();
        assert_eq!(c.store, None);

        let e = parse(&format!("{MINIMAL}\n[store]\nurl = \"mysql://h/db\"\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(
            e.message.contains("[store] url = \"mysql://h/db\"") && e.message.contains("sqlite://"),
            "{e}"
        );
        let e = parse(&format!("{MINIMAL}\n[store]\nurl = \"sqlite://\"\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        let e = parse(&format!("{MINIMAL}\n[store]\npath = \"x\"\n")).unwrap_err();
        assert!(e.message.contains("path"), "{e}");

        assert_eq!(c.server.keep_finished, 10_000);
        assert!(!c.retention.bounded(), "runs are kept forever by default");
        let c = parse(&format!(
            "{MINIMAL}\n[store]\nkeep_days = 30\nkeep_runs = 5000\n"
        ))
        .unwrap();
        assert_eq!(
            (c.retention.keep_days, c.retention.keep_runs),
            (Some(30), Some(5000))
        );
        for (key, bad) in [
            ("keep_days", "0"),
            ("keep_days", "36501"),
            ("keep_runs", "-1"),
        ] {
            let e = parse(&format!("{MINIMAL}\n[store]\n{key} = {bad}\n")).unwrap_err();
            assert_eq!(e.line, Some(8), "{e}");
            assert!(
                e.message.contains(&format!("[store] {key} = {bad}"))
                    && e.message.contains("out of range: use 1 to"),
                "{e}"
            );
        }
        let c = parse(&format!("{MINIMAL}\n[server]\nkeep_finished_flows = 3\n")).unwrap();
        assert_eq!(c.server.keep_finished, 3);
        let c = parse(&format!(
            "{MINIMAL}\n[server]\nallowed_hosts = [\"Manus.internal\", \"[fd00::5]\"]\nmax_connections = 64\n"
        ))
        .unwrap();
        assert_eq!(c.server.max_connections, 64);
        assert!(c.server.host_allowed(Some("manus.internal:8080")));
        for bad in ["\"h:80\"", "\"\"", "\"a/b\""] {
            let e = parse(&format!("{MINIMAL}\n[server]\nallowed_hosts = [{bad}]\n")).unwrap_err();
            assert_eq!(e.line, Some(8), "{e}");
            assert!(e.message.contains("without a port"), "{e}");
        }
        let e = parse(&format!("{MINIMAL}\n[server]\nmax_connections = 0\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("use 1 to 1000000"), "{e}");
        let e = parse(&format!("{MINIMAL}\n[server]\nkeep_finished_flows = 0\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("keep_finished_flows = 0"), "{e}");
    }

    #[test]
    fn browser_and_search_settings_parse_and_bad_keys_are_named() {
        let c = parse(&format!(
            "{MINIMAL}\n[browser]\nwebdriver_url = \"http://127.0.0.1:9515/\"\nheadless = false\n\
             viewport = {{ width = 800, height = 600 }}\n[browser.proxy]\nserver = \"http://127.0.0.1:3128\"\nusername = \"u\"\n\
             [search]\nengine = \"searxng\"\nfallback_engines = [\"duckduckgo\"]\nsearxng_url = \"http://127.0.0.1:8888\"\n"
        ))
        .unwrap();
        let b = &c.browser;
        assert_eq!(
            b.webdriver,
            WebDriverSource::Url("http://127.0.0.1:9515".into())
        );
        assert_eq!((b.headless, b.viewport), (false, (800, 600)));
        assert_eq!(b.proxy.as_ref().unwrap().username.as_deref(), Some("u"));
        assert_eq!(
            c.tools.search.engines,
            vec![Engine::Searxng, Engine::Duckduckgo]
        );
        let d = parse(MINIMAL).unwrap();
        assert_eq!(
            d.browser.webdriver,
            WebDriverSource::Launch("chromedriver".into())
        );
        assert!(
            d.llm["default"].vision == sees_images("m")
                && sees_images("gpt-4o-mini")
                && !sees_images("qwen2.5:7b")
        );

        let bad = |extra: &str| parse(&format!("{MINIMAL}\n{extra}")).unwrap_err();
        let e = bad("[browser]\nheadles = true\n");
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("headles"), "{e}");
        let e = bad("[browser]\nwebdriver_url = \"127.0.0.1:9515\"\n");
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("must start with http://"), "{e}");
        let e =
            bad("[browser]\nwebdriver_url = \"http://x\"\nchromedriver_path = \"chromedriver\"\n");
        assert!(e.message.contains("both set"), "{e}");
        let e = bad("[browser]\npage_load_timeout_secs = 0\n");
        assert_eq!(e.line, Some(8), "{e}");
        let e = bad("[browser]\nviewport = { width = 10, height = 600 }\n");
        assert!(e.message.contains("between 200 and 8000"), "{e}");
        let e = bad("[browser.proxy]\nuser = \"x\"\nserver = \"http://p\"\n");
        assert!(e.message.contains("user"), "{e}");
        let e = bad("[search]\nengine = \"google\"\n");
        assert_eq!(e.line, Some(8), "{e}");
        assert!(
            e.message.contains("unknown search engine `google`")
                && e.message.contains("searxng, brave, duckduckgo"),
            "{e}"
        );
        let e = bad("[search]\nfallback_engines = [\"bing\"]\n");
        assert!(e.message.contains("`bing`"), "{e}");
        let e = bad("[search]\nsearxng_url = \"ftp://x\"\n");
        assert!(e.message.contains("[search] searxng_url"), "{e}");
        let e = bad("[llm.v]\nvision = \"yes\"\n");
        assert!(
            e.message.contains("vision") || e.message.contains("bool"),
            "{e}"
        );
    }

    #[test]
    fn named_profiles_merge_over_the_default() {
        let c = parse(&format!("{MINIMAL}\n[llm.fast]\nmodel = \"small\"\n")).unwrap();
        assert_eq!(c.llm["fast"].model, "small");
        assert_eq!(c.llm["fast"].base_url, "http://127.0.0.1:1/v1");
    }

    #[test]
    fn errors_name_key_and_line() {
        let e = parse("[llm]\nmodel = \"m\"\nmodle = \"x\"\n[agents.manus]\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("modle"), "{e}");

        let e = parse(&format!("{MINIMAL}max_steps = \"ten\"\n")).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");

        let e = parse(&format!("{MINIMAL}llm = \"nope\"\n")).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(
            e.message.contains("[agents.manus] llm") && e.message.contains("nope"),
            "{e}"
        );

        let e = parse(&format!("{MINIMAL}colour = 1\n")).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("colour"), "{e}");

        let e = parse("[llm]\nmodel = \"m\"\n").unwrap_err();
        assert!(e.message.contains("pool is empty"), "{e}");

        let e = parse(&format!("{MINIMAL}\n[flow]\nprimary_agent = \"ghost\"\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");

        let e = parse(&format!("{MINIMAL}\n[flow]\nplanner_replicas = 0\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("[flow] planner_replicas"), "{e}");

        let e = parse(&format!("{MINIMAL}tools = [\"bash\", \"teleport\"]\n")).unwrap_err();
        assert!(e.message.contains("teleport"), "{e}");
    }
}
