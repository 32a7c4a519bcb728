//! `[approvals]` and `[agents.NAME.approvals]`: which tool calls wait for a person's
//! approval, by tool (`bash = "always"`, `{ matches = "rm -rf", argument = "command" }`,
//! `{ outside = "src" }`, `{ domains = ["docs.rs"] }`, `"never"`), and what a request left
//! unanswered past `timeout_secs` becomes. An agent's own table overrides the shared one
//! tool by tool.

use std::collections::BTreeMap;
use std::time::Duration;

use manus_actors::approvals::{Approvals, Rule};
use manus_actors::tools::{KNOWN_TOOLS, ToolSettings, make_tool};
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::ApprovalsToml;
use super::values::{Bounds, Table};

/// What the shared table says beyond the rules: how long a request waits, and whether it
/// is then approved (`on_timeout = "approve"`) or rejected (the default).
pub(super) fn timeout(
    a: &ApprovalsToml,
    lines: Lines,
) -> Result<Option<(Duration, bool)>, Problem> {
    let table = Table::new("[approvals]", lines);
    let approve = match &a.on_timeout {
        None => false,
        Some(v) => match v.get_ref().as_str() {
            "reject" => false,
            "approve" => true,
            other => {
                return Err(Problem::at(
                    lines.of(v),
                    "[approvals] on_timeout",
                    format!(
                        "[approvals] on_timeout = \"{other}\": use \"reject\" (the default) or \"approve\""
                    ),
                ));
            }
        },
    };
    let wait = table.number(&a.timeout_secs, "timeout_secs", WAIT)?;
    Ok(wait.map(|w| (Duration::from_secs(w as u64), approve)))
}

/// The longest an approval request may wait: a year.
const WAIT: Bounds<i64> = Bounds::new(1, 31_536_000, " seconds");

/// The rules of a table of them (`[approvals.tools]` or `[agents.NAME.approvals]`) laid
/// over `base`.
pub(super) fn rules(
    table: &BTreeMap<String, Spanned<toml::Value>>,
    name: &str,
    base: &Approvals,
    lines: Lines,
) -> Result<Approvals, Problem> {
    let mut out = base.clone();
    for (tool, value) in table {
        let key = format!("{name} {tool}");
        let bad = |why: String| {
            Problem::at(
                lines.of(value),
                key.clone(),
                format!("{name} {tool}: {why}"),
            )
        };
        // An MCP tool's name is known once its server is connected.
        let arguments = match arguments_of(tool) {
            Some(names) => Some(names),
            None if tool.starts_with("mcp_") => None,
            None => {
                return Err(bad(format!(
                    "no tool is called `{tool}`, so this rule would never apply; tools: {} \
                     (and an MCP server's, named mcp_SERVER_TOOL)",
                    KNOWN_TOOLS.join(", ")
                )));
            }
        };
        let rule = match value.get_ref() {
            toml::Value::String(s) if s == "always" => Rule::Always,
            toml::Value::String(s) if s == "never" => Rule::Never,
            toml::Value::Table(t) => table_rule(t, arguments.as_deref()).map_err(bad)?,
            _ => return Err(bad(SHAPES.into())),
        };
        out.rules.insert(tool.clone(), rule);
    }
    Ok(out)
}

const SHAPES: &str = "use \"always\", \"never\", { matches = \"REGEX\" } (optionally with \
argument = \"NAME\"), { outside = \"FOLDER\" } or { domains = [\"example.com\"] }";

/// The arguments of the built-in tool `tool`, as its schema (made from its typed arguments)
/// names them; `None` for a tool this build does not have.
fn arguments_of(tool: &str) -> Option<Vec<String>> {
    let spec = make_tool(tool, &ToolSettings::default())?.spec();
    let names = spec.parameters["properties"].as_object();
    Some(
        names
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default(),
    )
}

/// A rule written as a table; `arguments` are the tool's, when it is known now.
fn table_rule(t: &toml::Table, arguments: Option<&[String]>) -> Result<Rule, String> {
    let text = |k: &str| -> Result<Option<String>, String> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`{k}` must be a string")),
        }
    };
    for k in t.keys() {
        if !["matches", "argument", "outside", "domains"].contains(&k.as_str()) {
            return Err(format!("unknown key `{k}`; {SHAPES}"));
        }
    }
    let kinds = ["matches", "outside", "domains"]
        .iter()
        .filter(|k| t.contains_key(**k))
        .count();
    if kinds != 1 {
        return Err(format!(
            "give exactly one of `matches`, `outside`, `domains`; {SHAPES}"
        ));
    }
    if let Some(pattern) = text("matches")? {
        if pattern.trim().is_empty() {
            return Err(
                "`matches` is blank, which every call matches: give a pattern, or use \"always\""
                    .into(),
            );
        }
        let argument = text("argument")?;
        match (&argument, arguments) {
            (Some(a), _) if a.trim().is_empty() => {
                return Err(
                    "`argument` is blank: name one of the tool's arguments, or leave it out to \
                     match the whole arguments"
                        .into(),
                );
            }
            (Some(a), Some(names)) if !names.contains(a) => {
                return Err(format!(
                    "`argument` = \"{a}\" is not an argument of this tool, so the rule would never \
                     apply; its arguments: {}",
                    names.join(", ")
                ));
            }
            _ => {}
        }
        return Rule::matching(argument, &pattern);
    }
    if t.contains_key("argument") {
        return Err("`argument` goes with `matches`".into());
    }
    if let Some(folder) = text("outside")? {
        if folder.trim().is_empty() {
            return Err(
                "`outside` is blank: name a folder of the workspace (\".\" for the workspace itself)"
                    .into(),
            );
        }
        return Ok(Rule::Outside(folder));
    }
    let bad_domains = "`domains` must list domain names as strings (\"docs.rs\", \"*.github.com\"; \
                       no scheme, port or path)";
    match t.get("domains") {
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|d| {
                d.as_str()
                    .map(|s| s.trim().trim_start_matches("*.").to_ascii_lowercase())
                    .filter(|s| !s.is_empty() && !s.contains(['/', ':', '@', '?', '#', ' ']))
                    .ok_or_else(|| bad_domains.to_string())
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Rule::Domains),
        _ => Err(bad_domains.into()),
    }
}
