//! `Parsed::resolve`: the step that reads what a parsed config asks of the world, and the
//! only part of the config that does. From the environment (through the lookup it is given):
//! the LLM profiles' API keys, the `OTEL_*` variables, `DOCKER_HOST`, the proxy password,
//! the Brave key, `MANUS_API_TOKENS`, `MANUS_STORE_URL` and `MANUS_NODE_ID`. From the disk: the cassettes and the MCP servers
//! file (whose ids the agents' `mcp_servers` are checked against).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use manus_actors::llm::{CASE_PLACEHOLDER, Cassette, LlmSettings};
use manus_actors::mcp::McpServerSpec;

use super::agents::{AgentDraft, Listed};
use super::error::{ConfigError, Problem};
use super::llm::LlmDraft;
use super::mcp::ServersFile;
use super::mcp_servers;
use super::parse::Parsed;
use super::{AgentTemplate, BUILTIN_CASSETTE, Config, EMBEDDED_CASSETTE, sandbox};

/// Looks an environment variable up: `None` if it is unset (or not Unicode).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Parsed {
    /// Read the environment (`env`) and the disk for what this config needs, and give the
    /// config. `dir` is the config file's directory: relative cassette paths are taken from
    /// it (else from the current directory), and the servers file is looked for in it (else
    /// in `config/`).
    pub fn resolve(self, env: Env, dir: Option<&Path>) -> Result<Config, ConfigError> {
        let source = self.source;
        let in_file = |p: Problem| p.in_file(&source);
        let mut llm = BTreeMap::new();
        for (name, draft) in self.llm {
            let mut settings = llm_settings(&name, draft, env, dir).map_err(in_file)?;
            settings.capture_content = self.telemetry.capture_content;
            llm.insert(name, Arc::new(settings));
        }
        let mcp_servers = read_servers_file(&self.mcp_servers_file, dir, &source)?;
        let agents = self
            .agents
            .into_iter()
            .map(|a| bind_servers(a, &mcp_servers))
            .collect::<Result<_, _>>()
            .map_err(in_file)?;
        let sandbox = self.sandbox.map(|(mut s, named_in_file)| {
            if !named_in_file {
                let url = env("DOCKER_HOST")
                    .filter(|h| h.starts_with("unix://"))
                    .unwrap_or_else(|| sandbox::DEFAULT_DOCKER_HOST.into());
                s.hosts = vec![manus_actors::sandbox::DockerHost { url, tls: None }];
            }
            s
        });
        let mut browser = self.browser;
        if let (Some(proxy), Some(var)) = (&mut browser.proxy, &self.proxy_password_env)
            && let Some(password) = env(var)
        {
            proxy.password = Some(password);
        }
        let mut tools = self.tools;
        // Process mode needs the kernel's Landlock and seccomp: without them, run
        // unconfined and say so, or refuse, as [sandbox] fallback says.
        let mut sandbox_mode = self.sandbox_mode;
        let mut unconfined = None;
        if tools.confine.is_some() {
            let support = manus_actors::confine::Support::here();
            if let Some(warning) = sandbox::fall_back(&support, self.sandbox_fallback_to_none)
                .map_err(|why| in_file(Problem::whole(why)))?
            {
                tools.confine = None;
                sandbox_mode = sandbox::SandboxMode::None;
                unconfined = Some(warning);
            }
        }
        Arc::make_mut(&mut tools.search).brave_api_key =
            env(&self.brave_key_env).filter(|k| !k.is_empty());
        let mut store = self.store;
        if let Some(url) = env("MANUS_STORE_URL").filter(|u| !u.is_empty()) {
            store = Some(
                crate::store::StoreUrl::parse(&url)
                    .map_err(|why| in_file(Problem::whole(format!("MANUS_STORE_URL: {why}"))))?,
            );
        }
        if let (Some((_, line)), None) = (&self.memory, &store) {
            return Err(in_file(Problem::at(
                *line,
                "[memory] enabled",
                "[memory] enabled = true keeps notes in the run store: turn it on ([store] enabled = true)"
                    .into(),
            )));
        }
        let cluster = match self.cluster {
            None => None,
            Some((mut c, line)) => {
                if !matches!(store, Some(crate::store::StoreUrl::Postgres(_))) {
                    return Err(in_file(Problem::at(
                        line,
                        "[cluster] enabled",
                        "[cluster] enabled = true needs a PostgreSQL run store, which the nodes share: \
                         [store] url = \"postgres://USER:PASSWORD@HOST:PORT/DB\" (or MANUS_STORE_URL)"
                            .into(),
                    )));
                }
                if let Some(id) = env("MANUS_NODE_ID").filter(|i| !i.is_empty()) {
                    c.node_id = Some(id);
                }
                Some(c)
            }
        };
        let mut server = self.server;
        if let Some(tokens) = env("MANUS_API_TOKENS") {
            server.api_tokens.extend(
                tokens
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(String::from),
            );
        }
        Ok(Config {
            source,
            llm,
            planner_llm: self.planner_llm,
            workspace: self.workspace,
            tools,
            agents,
            flow: self.flow,
            telemetry: self.telemetry.with_env(env),
            sandbox,
            sandbox_mode,
            sandbox_old_spelling: self.sandbox_old_spelling,
            unconfined,
            browser,
            mcp_servers,
            mcp_sampling: self.mcp_servers_file.sampling,
            mcp_serve_tools: self.mcp_serve_tools,
            mcp_http: self.mcp_http,
            mcp_oauth: self.mcp_oauth,
            store,
            cluster,
            memory: self.memory.map(|(m, _)| m),
            retention: self.retention,
            server,
            example: false,
            model_source: None,
        })
    }
}

/// A profile's settings: its key from the environment, or its cassette from the disk.
fn llm_settings(
    name: &str,
    draft: LlmDraft,
    env: Env,
    dir: Option<&Path>,
) -> Result<LlmSettings, Problem> {
    match draft {
        LlmDraft::Http {
            mut settings,
            key_env,
        } => {
            if let Some(key) = key_env.and_then(|v| env(&v)).filter(|v| !v.is_empty()) {
                settings.api_key = Some(key);
            }
            Ok(*settings)
        }
        LlmDraft::Replay {
            cassette,
            key,
            input_price_per_mtok,
            output_price_per_mtok,
            max_tokens,
        } => {
            let base = dir.unwrap_or(Path::new("."));
            let cassette = if cassette == BUILTIN_CASSETTE {
                Cassette::parse(BUILTIN_CASSETTE, EMBEDDED_CASSETTE)
            } else if cassette.contains(CASE_PLACEHOLDER) {
                Ok(Cassette::per_case(&cassette, base))
            } else {
                Cassette::load(&base.join(&cassette))
            }
            .map_err(|e| Problem::at(None, key.clone(), format!("{key}: {e}")))?;
            let replay = LlmSettings::replay(name, Arc::new(cassette));
            Ok(LlmSettings {
                input_price_per_mtok,
                output_price_per_mtok,
                max_tokens: max_tokens.unwrap_or(replay.max_tokens),
                ..replay
            })
        }
    }
}

/// The servers of the servers file: the one `[mcp] servers_file` names, else `mcp.json`
/// if there is one, else none.
fn read_servers_file(
    file: &ServersFile,
    dir: Option<&Path>,
    source: &str,
) -> Result<Vec<McpServerSpec>, ConfigError> {
    let base = dir.unwrap_or(Path::new("config"));
    let path = match &file.named {
        Some((name, line)) => {
            let path = base.join(name);
            if !path.exists() {
                return Err(Problem::at(
                    *line,
                    "[mcp] servers_file",
                    format!(
                        "[mcp] servers_file = \"{name}\": {} does not exist",
                        path.display()
                    ),
                )
                .in_file(source));
            }
            path
        }
        None if base.join("mcp.json").exists() => base.join("mcp.json"),
        None => return Ok(vec![]),
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ConfigError::unreadable(&path, "the MCP servers file", e))?;
    let mut servers = mcp_servers::parse(
        &text,
        &path.display().to_string(),
        file.call_timeout,
        file.connect_timeout,
        // OAuth tokens are kept beside the servers file that names the servers.
        &path.parent().unwrap_or(base).join("mcp-tokens"),
    )?;
    for server in &mut servers {
        server.sampling = file.sampling;
    }
    Ok(servers)
}

/// The agent with the servers it names (every server when it names none), each checked.
fn bind_servers(
    mut agent: AgentDraft,
    servers: &[McpServerSpec],
) -> Result<(AgentTemplate, String), Problem> {
    agent.template.mcp_servers = match agent.mcp_servers {
        Some(Listed { names, line, key }) => {
            if let Some(bad) = names
                .iter()
                .find(|id| !servers.iter().any(|s| &s.id == *id))
            {
                return Err(Problem::at(
                    line,
                    key.clone(),
                    format!(
                        "{key}: no MCP server `{bad}` in the servers file; servers: {}",
                        if servers.is_empty() {
                            "none (add config/mcp.json, or set [mcp] servers_file)".to_string()
                        } else {
                            servers
                                .iter()
                                .map(|s| s.id.clone())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                ));
            }
            names
        }
        None => servers.iter().map(|s| s.id.clone()).collect(),
    };
    Ok((agent.template, agent.llm))
}
