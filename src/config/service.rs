//! `[store]` and `[server]`: where runs are recorded and how long ended ones are kept, and
//! the HTTP service's tokens, hosts, connections, body limit, resumption and memory, checked. `resolve` adds the tokens of `MANUS_API_TOKENS`.

use std::path::PathBuf;

use toml::Spanned;

use crate::serve::ServerSettings;
use crate::store::{Retention, StoreUrl};

use super::error::{Lines, Problem};
use super::file::{ServerToml, StoreToml};

/// Where runs are recorded; `None` with `[store] enabled = false`.
pub(super) fn store(s: &StoreToml, lines: Lines) -> Result<Option<StoreUrl>, Problem> {
    Ok(match (&s.enabled, &s.url) {
        (Some(false), _) => None,
        (_, None) => Some(StoreUrl::Sqlite(PathBuf::from("runs.db"))),
        (_, Some(url)) => Some(StoreUrl::parse(url.get_ref()).map_err(|why| {
            Problem::at(
                lines.of(url),
                "[store] url",
                format!("[store] url = \"{}\": {why}", url.get_ref()),
            )
        })?),
    })
}

/// How long ended runs are kept: each bound in its range, or absent (kept forever).
pub(super) fn retention(s: &StoreToml, lines: Lines) -> Result<Retention, Problem> {
    let bound = |key: &str, v: &Option<Spanned<i64>>, max: i64, unit: &str| match v {
        None => Ok(None),
        Some(n) if (1..=max).contains(n.get_ref()) => Ok(Some(*n.get_ref())),
        Some(n) => Err(Problem::at(
            lines.of(n),
            format!("[store] {key}"),
            format!(
                "[store] {key} = {} is out of range: use 1 to {max} ({unit}), or leave it out \
                 to keep ended runs forever",
                n.get_ref()
            ),
        )),
    };
    Ok(Retention {
        keep_days: bound("keep_days", &s.keep_days, 36_500, "days")?.map(|d| d as u32),
        keep_runs: bound("keep_runs", &s.keep_runs, 1_000_000_000, "runs")?.map(|n| n as u64),
    })
}

/// The service's settings, with the tokens the file lists.
pub(super) fn server(s: &ServerToml, lines: Lines) -> Result<ServerSettings, Problem> {
    let api_tokens = s.api_tokens.clone().unwrap_or_default();
    if api_tokens.iter().any(|t| t.trim().is_empty()) {
        return Err(Problem::at(
            None,
            "[server] api_tokens",
            "[server] api_tokens: a token is empty".into(),
        ));
    }
    let keep_finished = match &s.keep_finished_flows {
        None => ServerSettings::default().keep_finished,
        Some(n) if *n.get_ref() == 0 => {
            return Err(Problem::at(
                lines.of(n),
                "[server] keep_finished_flows",
                "[server] keep_finished_flows = 0: keep at least one finished flow, so \
                 its result can be read once it ends"
                    .into(),
            ));
        }
        Some(n) => *n.get_ref(),
    };
    let allowed_hosts = match &s.allowed_hosts {
        None => vec![],
        Some(hosts) => {
            // A host name or address, as a `Host` header names it, without a port.
            let bad = hosts.get_ref().iter().find(|h| {
                h.parse::<axum::http::uri::Authority>()
                    .map_or(true, |a| a.port().is_some() || a.host() != h.as_str())
            });
            if let Some(h) = bad {
                return Err(Problem::at(
                    lines.of(hosts),
                    "[server] allowed_hosts",
                    format!(
                        "[server] allowed_hosts: \"{h}\" is not a host name or address without \
                         a port (e.g. \"manus.internal\", \"10.0.0.5\", \"[fd00::5]\")"
                    ),
                ));
            }
            hosts.get_ref().clone()
        }
    };
    let max_connections = match &s.max_connections {
        None => ServerSettings::default().max_connections,
        Some(n) if (1..=1_000_000).contains(n.get_ref()) => *n.get_ref() as usize,
        Some(n) => {
            return Err(Problem::at(
                lines.of(n),
                "[server] max_connections",
                format!(
                    "[server] max_connections = {} is out of range: use 1 to 1000000",
                    n.get_ref()
                ),
            ));
        }
    };
    Ok(ServerSettings {
        allowed_hosts,
        max_connections,
        api_tokens,
        max_body_bytes: s.max_body_kb.unwrap_or(64).max(1) * 1024,
        resume_on_start: s.resume_on_start.unwrap_or(true),
        keep_finished,
    })
}
