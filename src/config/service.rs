//! `[store]` and `[server]`: where runs are recorded, and the HTTP service's tokens, body
//! limit, resumption and memory, checked. `resolve` adds the tokens of `MANUS_API_TOKENS`.

use std::path::PathBuf;

use crate::serve::ServerSettings;
use crate::store::StoreUrl;

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
    Ok(ServerSettings {
        api_tokens,
        max_body_bytes: s.max_body_kb.unwrap_or(64).max(1) * 1024,
        resume_on_start: s.resume_on_start.unwrap_or(true),
        keep_finished,
    })
}
