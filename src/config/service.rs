//! `[store]` and `[server]`: where runs are recorded and how long ended ones are kept, and
//! the HTTP service's tokens, hosts, connections, body limit, resumption, memory and how
//! long a blocking A2A request waits, checked. `resolve` adds the tokens of `MANUS_API_TOKENS`.

use std::path::PathBuf;

use crate::settings::ServerSettings;
use crate::store::{Retention, StoreUrl};

use super::error::{Lines, Problem};
use super::file::{ServerToml, StoreToml};
use super::values::{Bounds, Table};

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

/// Days an ended run is kept.
const KEEP_DAYS: Bounds<i64> = Bounds::new(
    1,
    36_500,
    " (days), or leave it out to keep ended runs forever",
);
/// Ended runs kept.
const KEEP_RUNS: Bounds<i64> = Bounds::new(
    1,
    1_000_000_000,
    " (runs), or leave it out to keep ended runs forever",
);
/// The largest request body, in KiB: up to a GiB.
const BODY_KB: Bounds<i64> = Bounds::new(1, 1 << 20, " (KiB)");
/// Finished flows held in memory.
const KEEP_FINISHED: Bounds<i64> = Bounds::new(1, 10_000_000, " (finished flows)");
/// Connections open at once.
const CONNECTIONS: Bounds<i64> = Bounds::new(1, 1_000_000, "");

/// How long ended runs are kept: each bound in its range, or absent (kept forever).
pub(super) fn retention(s: &StoreToml, lines: Lines) -> Result<Retention, Problem> {
    let table = Table::new("[store]", lines);
    Ok(Retention {
        keep_days: table
            .number(&s.keep_days, "keep_days", KEEP_DAYS)?
            .map(|d| d as u32),
        keep_runs: table
            .number(&s.keep_runs, "keep_runs", KEEP_RUNS)?
            .map(|n| n as u64),
    })
}

/// The service's settings, with the tokens the file lists.
pub(super) fn server(s: &ServerToml, lines: Lines) -> Result<ServerSettings, Problem> {
    let table = Table::new("[server]", lines);
    let defaults = ServerSettings::default();
    let api_tokens = table
        .texts(&s.api_tokens, "api_tokens", "a token")?
        .unwrap_or_default();
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
    Ok(ServerSettings {
        allowed_hosts,
        max_connections: table
            .number(&s.max_connections, "max_connections", CONNECTIONS)?
            .map_or(defaults.max_connections, |n| n as usize),
        blocking_wait: table.seconds(
            &s.blocking_wait_secs,
            "blocking_wait_secs",
            defaults.blocking_wait,
        )?,
        api_tokens,
        max_body_bytes: table
            .number(&s.max_body_kb, "max_body_kb", BODY_KB)?
            .map_or(defaults.max_body_bytes, |kb| kb as usize * 1024),
        resume_on_start: s.resume_on_start.unwrap_or(true),
        keep_finished: table
            .number(&s.keep_finished_flows, "keep_finished_flows", KEEP_FINISHED)?
            .map_or(defaults.keep_finished, |n| n as usize),
    })
}
