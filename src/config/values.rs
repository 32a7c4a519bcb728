//! Value checks several sections share: a web URL, a list of tool names.

use manus_actors::tools::KNOWN_TOOLS;
use toml::Spanned;

use super::error::{Lines, Problem};

/// `http://` or `https://` (without a trailing slash), or a problem naming the key and its
/// line.
pub(super) fn web_url(v: &Spanned<String>, key: &str, lines: Lines) -> Result<String, Problem> {
    let u = v.get_ref();
    if u.starts_with("http://") || u.starts_with("https://") {
        Ok(u.trim_end_matches('/').to_string())
    } else {
        Err(Problem::at(
            lines.of(v),
            key,
            format!("{key} = \"{u}\" must start with http:// or https://"),
        ))
    }
}

/// The names in `list`, each a tool this build has; the problem names `key`.
pub(super) fn known_tools(
    list: &Spanned<Vec<String>>,
    key: &str,
    lines: Lines,
) -> Result<Vec<String>, Problem> {
    match list
        .get_ref()
        .iter()
        .find(|t| !KNOWN_TOOLS.contains(&t.as_str()))
    {
        Some(bad) => Err(Problem::at(
            lines.of(list),
            key,
            format!(
                "{key}: unknown tool `{bad}`; known tools: {}",
                KNOWN_TOOLS.join(", ")
            ),
        )),
        None => Ok(list.get_ref().clone()),
    }
}
