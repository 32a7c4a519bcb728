//! `[approvals]` and `[agents.NAME.approvals]`: which tool calls wait for a person's
//! approval, by tool (`bash = "always"`, `{ matches = "rm -rf", argument = "command" }`,
//! `{ outside = "src" }`, `{ domains = ["docs.rs"] }`, `"never"`), and what a request left
//! unanswered past `timeout_secs` becomes. An agent's own table overrides the shared one
//! tool by tool.

use std::collections::BTreeMap;
use std::time::Duration;

use manus_actors::approvals::{Approvals, Rule};
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
        let rule = match value.get_ref() {
            toml::Value::String(s) if s == "always" => Rule::Always,
            toml::Value::String(s) if s == "never" => Rule::Never,
            toml::Value::Table(t) => table_rule(t).map_err(bad)?,
            _ => return Err(bad(SHAPES.into())),
        };
        out.rules.insert(tool.clone(), rule);
    }
    Ok(out)
}

const SHAPES: &str = "use \"always\", \"never\", { matches = \"REGEX\" } (optionally with \
argument = \"NAME\"), { outside = \"FOLDER\" } or { domains = [\"example.com\"] }";

fn table_rule(t: &toml::Table) -> Result<Rule, String> {
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
        return Rule::matching(text("argument")?, &pattern);
    }
    if t.contains_key("argument") {
        return Err("`argument` goes with `matches`".into());
    }
    if let Some(folder) = text("outside")? {
        return Ok(Rule::Outside(folder));
    }
    match t.get("domains") {
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|d| {
                d.as_str()
                    .map(|s| s.trim().trim_start_matches("*.").to_ascii_lowercase())
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| "`domains` must list domain names as strings".to_string())
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Rule::Domains),
        _ => Err("`domains` must be an array of domain names".into()),
    }
}
