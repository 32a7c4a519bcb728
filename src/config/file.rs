//! The file's shape: one serde type per table of `config.toml`, every field optional (the
//! builders supply the defaults), unknown keys refused. Numbers and text are read `Spanned`
//! (integers as `i64`, whatever the setting's type), so a builder's range check names the
//! line. The `[llm]` keys are declared once, in `llm_keys!`, which also gives the list of
//! them that errors show. Knows nothing of the engine's settings, the environment or the
//! disk.

use std::collections::BTreeMap;
use std::fmt;

use manus_actors::planner::OnStepFailure;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::telemetry::OtlpProtocol;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    #[serde(default)]
    pub(super) llm: LlmSection,
    #[serde(default)]
    pub(super) runtime: RuntimeToml,
    #[serde(default)]
    pub(super) tools: ToolsToml,
    #[serde(default)]
    pub(super) agents: BTreeMap<String, Spanned<AgentToml>>,
    #[serde(default)]
    pub(super) flow: FlowToml,
    #[serde(default)]
    pub(super) telemetry: TelemetryToml,
    #[serde(default)]
    pub(super) sandbox: SandboxToml,
    #[serde(default)]
    pub(super) browser: BrowserToml,
    #[serde(default)]
    pub(super) search: SearchToml,
    #[serde(default)]
    pub(super) mcp: McpToml,
    #[serde(default)]
    pub(super) store: StoreToml,
    #[serde(default)]
    pub(super) server: ServerToml,
    #[serde(default)]
    pub(super) cluster: ClusterToml,
    #[serde(default)]
    pub(super) approvals: ApprovalsToml,
    #[serde(default)]
    pub(super) memory: MemoryToml,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MemoryToml {
    pub(super) enabled: Option<bool>,
    pub(super) save_to: Option<Spanned<String>>,
    pub(super) search: Option<Spanned<Vec<String>>>,
    pub(super) max_results: Option<Spanned<i64>>,
    pub(super) distill: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsToml {
    pub(super) timeout_secs: Option<Spanned<i64>>,
    pub(super) on_timeout: Option<Spanned<String>>,
    /// Rules by tool name: `"always"`, `"never"` or a table (`approvals.rs`).
    #[serde(default)]
    pub(super) tools: BTreeMap<String, Spanned<toml::Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreToml {
    pub(super) enabled: Option<bool>,
    pub(super) url: Option<Spanned<String>>,
    pub(super) keep_days: Option<Spanned<i64>>,
    pub(super) keep_runs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerToml {
    pub(super) api_tokens: Option<Spanned<Vec<String>>>,
    pub(super) max_body_kb: Option<Spanned<i64>>,
    pub(super) resume_on_start: Option<bool>,
    pub(super) keep_finished_flows: Option<Spanned<i64>>,
    pub(super) allowed_hosts: Option<Spanned<Vec<String>>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) blocking_wait_secs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClusterToml {
    pub(super) enabled: Option<Spanned<bool>>,
    pub(super) node_id: Option<Spanned<String>>,
    pub(super) lease_secs: Option<Spanned<i64>>,
    pub(super) max_flows: Option<Spanned<i64>>,
    pub(super) drain_secs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BrowserToml {
    pub(super) webdriver_url: Option<Spanned<String>>,
    pub(super) webdriver_urls: Option<Spanned<Vec<String>>>,
    pub(super) chromedriver_path: Option<Spanned<String>>,
    pub(super) headless: Option<bool>,
    pub(super) chromium_path: Option<Spanned<String>>,
    pub(super) extra_args: Option<Spanned<Vec<String>>>,
    pub(super) proxy: Option<Spanned<ProxyToml>>,
    pub(super) max_content_length: Option<Spanned<i64>>,
    pub(super) page_load_timeout_secs: Option<Spanned<i64>>,
    pub(super) viewport: Option<Spanned<ViewportToml>>,
    pub(super) screenshots: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProxyToml {
    pub(super) server: Spanned<String>,
    pub(super) username: Option<Spanned<String>>,
    pub(super) password: Option<Spanned<String>>,
    /// An environment variable holding the password (wins over `password`).
    pub(super) password_env: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ViewportToml {
    pub(super) width: u32,
    pub(super) height: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchToml {
    pub(super) engine: Option<Spanned<String>>,
    pub(super) fallback_engines: Option<Spanned<Vec<String>>>,
    pub(super) searxng_url: Option<Spanned<String>>,
    pub(super) brave_url: Option<Spanned<String>>,
    pub(super) brave_api_key_env: Option<Spanned<String>>,
    pub(super) duckduckgo_url: Option<Spanned<String>>,
    pub(super) max_retries: Option<Spanned<i64>>,
    pub(super) retry_delay_secs: Option<Spanned<i64>>,
    pub(super) lang: Option<Spanned<String>>,
    pub(super) country: Option<Spanned<String>>,
    pub(super) timeout_secs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct McpToml {
    pub(super) servers_file: Option<Spanned<String>>,
    pub(super) call_timeout_secs: Option<Spanned<i64>>,
    pub(super) connect_timeout_secs: Option<Spanned<i64>>,
    pub(super) serve_tools: Option<Spanned<Vec<String>>>,
    pub(super) max_sessions: Option<Spanned<i64>>,
    pub(super) session_idle_secs: Option<Spanned<i64>>,
    pub(super) allowed_origins: Option<Spanned<Vec<String>>>,
    pub(super) sampling: Option<Spanned<SamplingToml>>,
    pub(super) oauth_issuer: Option<Spanned<String>>,
    pub(super) oauth_audience: Option<Spanned<String>>,
    pub(super) oauth_scopes: Option<Spanned<Vec<String>>>,
}

/// `[mcp] sampling`: what a server's request to use the flow's model gets.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum SamplingToml {
    Allow,
    Approve,
    Deny,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SandboxToml {
    pub(super) mode: Option<Spanned<SandboxModeToml>>,
    pub(super) use_sandbox: Option<Spanned<bool>>,
    pub(super) network: Option<Spanned<NetworkToml>>,
    pub(super) docker_host: Option<Spanned<String>>,
    pub(super) hosts: Option<Spanned<Vec<HostToml>>>,
    pub(super) image: Option<Spanned<String>>,
    pub(super) work_dir: Option<Spanned<String>>,
    pub(super) memory_limit: Option<Spanned<String>>,
    pub(super) cpu_limit: Option<Spanned<f64>>,
    pub(super) pids_limit: Option<Spanned<i64>>,
    pub(super) file_size_limit: Option<Spanned<String>>,
    pub(super) open_files: Option<Spanned<i64>>,
    pub(super) cpu_time_limit_secs: Option<Spanned<i64>>,
    pub(super) network_enabled: Option<bool>,
    pub(super) idle_timeout_secs: Option<Spanned<i64>>,
    pub(super) max_sandboxes: Option<Spanned<i64>>,
    pub(super) mount_workspace: Option<bool>,
    pub(super) fallback: Option<Spanned<FallbackToml>>,
}

/// `[sandbox] network`: on, off, or the hosts code may reach.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "true, false, or a list of hosts such as [\"pypi.org\", \"*.example.com:8443\"]"
)]
pub(super) enum NetworkToml {
    Switch(bool),
    Hosts(Vec<String>),
}

/// `[sandbox] fallback`: what process mode does where the kernel cannot confine.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum FallbackToml {
    /// Run unconfined, saying so loudly (the default: the first command still works).
    None,
    /// Refuse to start.
    Refuse,
}

/// One of `[sandbox] hosts`: a socket's URL, or a TCP engine with its TLS files.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum HostToml {
    Socket(String),
    Tls(TlsHostToml),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsHostToml {
    pub(super) url: String,
    pub(super) ca: String,
    pub(super) cert: String,
    pub(super) key: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TelemetryToml {
    pub(super) otlp_endpoint: Option<Spanned<String>>,
    pub(super) protocol: Option<OtlpProtocol>,
    pub(super) service_name: Option<Spanned<String>>,
    pub(super) sample_ratio: Option<Spanned<f64>>,
    pub(super) capture_content: Option<bool>,
    pub(super) content_max_chars: Option<Spanned<i64>>,
}

/// `[agents.NAME] action`: tool calls or Python cells (see `manus_actors::agent::Action`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum ActionToml {
    Tools,
    Code,
}

/// `[sandbox] mode`: where and how code the model wrote runs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum SandboxModeToml {
    Process,
    Container,
    None,
}

/// `[tools] python_session`: how long a `python_execute` interpreter lives.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum PythonSessionToml {
    Flow,
    Call,
}

/// `[llm] tool_calls`: how tool calls travel (see `manus_actors::llm::CallMode`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum ToolCallsToml {
    Native,
    Text,
    Constrained,
    Auto,
}

/// Declares the `[llm]` keys once: the struct, the list of keys, field-by-field reading and
/// merging a named profile over the default.
macro_rules! llm_keys {
    ($($key:ident: $ty:ty),* $(,)?) => {
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct LlmToml { $(pub(super) $key: Option<$ty>,)* }

        impl LlmToml {
            /// Every `[llm]` key, in declaration order.
            pub(super) const KEYS: &[&str] = &[$(stringify!($key)),*];

            /// Read `key`'s value into its field; false if `key` is not an `[llm]` key.
            fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
                match key {
                    $(stringify!($key) => { self.$key = Some(map.next_value()?); Ok(true) })*
                    _ => Ok(false),
                }
            }
            /// This profile with the default's values where it sets none.
            pub(super) fn over(&self, base: &LlmToml) -> LlmToml {
                LlmToml { $($key: self.$key.clone().or_else(|| base.$key.clone()),)* }
            }
        }
    };
}

llm_keys! {
    api_type: Spanned<String>,
    base_url: Spanned<String>,
    model: Spanned<String>,
    api_key: Spanned<String>,
    api_key_env: Spanned<String>,
    api_version: Spanned<String>,
    max_tokens: Spanned<i64>,
    max_input_tokens: Spanned<i64>,
    temperature: Spanned<f64>,
    timeout_secs: Spanned<i64>,
    max_retries: Spanned<i64>,
    cassette: Spanned<String>,
    input_price_per_mtok: Spanned<f64>,
    output_price_per_mtok: Spanned<f64>,
    vision: bool,
    tool_calls: ToolCallsToml,
    stream: bool,
    total_timeout_secs: Spanned<i64>,
    cache_read_price_per_mtok: Spanned<f64>,
    cache_write_price_per_mtok: Spanned<f64>,
    prompt_cache: bool,
    thinking_tokens: Spanned<i64>,
}

/// `[llm]`: the default profile's keys, and `[llm.NAME]` tables for named profiles.
#[derive(Debug, Default)]
pub(super) struct LlmSection {
    pub(super) base: LlmToml,
    pub(super) named: BTreeMap<String, LlmToml>,
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
pub(super) struct NamedProfile<'k>(&'k str);

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
            "a known [llm] key or a [llm.{}] profile table; `{}` is neither (keys: {})",
            self.0,
            self.0,
            LlmToml::KEYS.join(", ")
        )
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LlmToml, A::Error> {
        LlmToml::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuntimeToml {
    pub(super) workspace: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ToolsToml {
    pub(super) python: Option<Spanned<String>>,
    pub(super) python_timeout_secs: Option<Spanned<i64>>,
    pub(super) python_session: Option<PythonSessionToml>,
    pub(super) bash_timeout_secs: Option<Spanned<i64>>,
    pub(super) ask_timeout_secs: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentToml {
    pub(super) profile: Option<Spanned<String>>,
    pub(super) description: Option<Spanned<String>>,
    pub(super) replicas: Option<Spanned<i64>>,
    pub(super) llm: Option<Spanned<String>>,
    pub(super) max_steps: Option<Spanned<i64>>,
    pub(super) tools: Option<Spanned<Vec<String>>>,
    pub(super) max_observe: Option<Spanned<i64>>,
    pub(super) memory_messages: Option<Spanned<i64>>,
    pub(super) memory_tokens: Option<Spanned<i64>>,
    pub(super) compact_at: Option<Spanned<f64>>,
    pub(super) compact_llm: Option<Spanned<String>>,
    pub(super) action: Option<ActionToml>,
    pub(super) system_prompt: Option<Spanned<String>>,
    pub(super) next_step_prompt: Option<Spanned<String>>,
    pub(super) mcp_servers: Option<Spanned<Vec<String>>>,
    /// This agent's approval rules, over `[approvals.tools]`.
    #[serde(default)]
    pub(super) approvals: BTreeMap<String, Spanned<toml::Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FlowToml {
    pub(super) primary_agent: Option<Spanned<String>>,
    pub(super) planner_llm: Option<Spanned<String>>,
    pub(super) step_timeout_secs: Option<Spanned<i64>>,
    pub(super) flow_timeout_secs: Option<Spanned<i64>>,
    pub(super) planner_replicas: Option<Spanned<i64>>,
    pub(super) max_step_retries: Option<Spanned<i64>>,
    pub(super) on_step_failure: Option<OnStepFailure>,
    pub(super) max_replans: Option<Spanned<i64>>,
    pub(super) max_parallel_steps: Option<Spanned<i64>>,
    pub(super) review_after_each_step: Option<bool>,
    pub(super) plan_approval: Option<bool>,
    pub(super) max_tokens: Option<Spanned<i64>>,
    pub(super) max_cost: Option<Spanned<f64>>,
}
