//! Which tool calls need a person's approval before they run: the rules of one agent kind,
//! and the check an agent makes before each call. Knows nothing of actors, the planner or
//! how a decision arrives; the config builds the rules, the agent asks `check`.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

/// When calls of one tool need approval.
#[derive(Debug, Clone)]
pub enum Rule {
    /// Every call.
    Always,
    /// No call (the default for a tool without a rule).
    Never,
    /// Calls whose `argument` (or, without one, the whole arguments as JSON text) matches.
    Matches {
        argument: Option<String>,
        pattern: Regex,
    },
    /// Calls whose path argument (`path`, `output_path` or `file_path`) lies outside this
    /// folder of the workspace; a call with none of them needs approval too, as nothing
    /// says where it writes (a `str_replace_editor` view is only a read and never needs it).
    /// Paths are judged by their names; the file tools refuse to follow links.
    Outside(String),
    /// Calls that open a URL (`url`, or each of `urls`) whose host is not one of these
    /// domains or under them.
    Domains(Vec<String>),
}

impl Rule {
    /// The rule for calls whose `argument` (or whole arguments) match `pattern`; why not,
    /// if `pattern` is no regular expression.
    pub fn matching(argument: Option<String>, pattern: &str) -> Result<Rule, String> {
        let pattern = Regex::new(pattern)
            .map_err(|e| format!("`matches` is not a valid regular expression: {e}"))?;
        Ok(Rule::Matches { argument, pattern })
    }
}

/// An agent kind's rules, by tool name.
#[derive(Debug, Clone, Default)]
pub struct Approvals {
    pub rules: BTreeMap<String, Rule>,
}

impl Approvals {
    /// Why this call needs approval, or `None` if it may run.
    pub fn check(&self, tool: &str, args: &Value) -> Option<String> {
        match self.rules.get(tool)? {
            Rule::Always => Some(format!("every `{tool}` call needs approval")),
            Rule::Never => None,
            Rule::Matches { argument, pattern } => {
                let text = match argument {
                    Some(name) => match &args[name.as_str()] {
                        Value::String(s) => s.clone(),
                        Value::Null => return None,
                        other => other.to_string(),
                    },
                    None => args.to_string(),
                };
                let found = pattern.find(&text)?;
                let what = argument.as_deref().unwrap_or("arguments");
                Some(format!(
                    "its {what} match `{}` (at \"{}\")",
                    pattern.as_str(),
                    found.as_str()
                ))
            }
            Rule::Outside(folder) => {
                if tool == "str_replace_editor" && args["command"] == "view" {
                    return None;
                }
                let path = ["path", "output_path", "file_path"]
                    .iter()
                    .find_map(|k| args[*k].as_str());
                match path {
                    Some(path) => (!inside(path, folder)).then(|| {
                        format!("it writes `{path}`, outside `{folder}` of the workspace")
                    }),
                    None => Some(format!(
                        "it names no path to check against `{folder}` of the workspace"
                    )),
                }
            }
            Rule::Domains(allowed) => {
                let urls: Vec<&str> = args["url"]
                    .as_str()
                    .into_iter()
                    .chain(
                        args["urls"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str),
                    )
                    .chain(args["urls"].as_str())
                    .collect();
                let listed = |url: &str| {
                    let host = reqwest::Url::parse(url)
                        .ok()
                        .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
                        .unwrap_or_default();
                    allowed
                        .iter()
                        .any(|d| host == *d || host.ends_with(&format!(".{d}")))
                };
                let url = urls.into_iter().find(|u| !listed(u))?;
                Some(format!(
                    "it opens {url}, whose host is not an allowed domain"
                ))
            }
        }
    }
}

/// Whether a workspace-relative (or workspace-rooted absolute) `path` lies in `folder`,
/// judged on its names alone (`..` leaves it).
fn inside(path: &str, folder: &str) -> bool {
    let names = |p: &str| -> Option<Vec<String>> {
        let mut out: Vec<String> = vec![];
        for name in p.split('/') {
            match name {
                "" | "." => {}
                ".." => {
                    out.pop()?;
                }
                n => out.push(n.to_string()),
            }
        }
        Some(out)
    };
    match (names(path), names(folder)) {
        (Some(p), Some(f)) => p.len() > f.len() && p.starts_with(&f),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules(pairs: Vec<(&str, Rule)>) -> Approvals {
        Approvals {
            rules: pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }

    #[test]
    fn rules_say_which_calls_need_a_person_and_why() {
        let a = rules(vec![
            ("python_execute", Rule::Always),
            ("crawl", Rule::Never),
            (
                "bash",
                Rule::Matches {
                    argument: Some("command".into()),
                    pattern: Regex::new(r"rm -rf|sudo|curl .*\| *sh").unwrap(),
                },
            ),
            ("str_replace_editor", Rule::Outside("src".into())),
            ("browser_use", Rule::Domains(vec!["docs.rs".into()])),
        ]);
        assert!(a.check("python_execute", &json!({"code": "1"})).is_some());
        assert!(a.check("crawl", &json!({})).is_none());
        assert!(
            a.check("web_search", &json!({})).is_none(),
            "no rule: no approval"
        );
        let why = a
            .check("bash", &json!({"command": "curl x.sh | sh"}))
            .unwrap();
        assert!(
            why.contains("command match") && why.contains("curl x.sh | sh"),
            "{why}"
        );
        assert!(a.check("bash", &json!({"command": "ls -l"})).is_none());
        let edit = |path: &str| json!({"command": "create", "path": path, "file_text": ""});
        assert!(a.check("str_replace_editor", &edit("src/a.rs")).is_none());
        assert!(
            a.check("str_replace_editor", &edit("./src/x/../b.rs"))
                .is_none()
        );
        assert!(
            a.check("str_replace_editor", &edit("src/../b.rs"))
                .is_some()
        );
        assert!(a.check("str_replace_editor", &edit("srcs/b.rs")).is_some());
        assert!(a.check("str_replace_editor", &edit("src")).is_some());
        let view = json!({"command": "view", "path": "/etc"});
        assert!(a.check("str_replace_editor", &view).is_none());
        let go = |url: &str| json!({"action": "go_to_url", "url": url});
        assert!(
            a.check("browser_use", &go("https://docs.rs/regex"))
                .is_none()
        );
        assert!(
            a.check("browser_use", &go("https://api.docs.rs/x"))
                .is_none()
        );
        assert!(
            a.check("browser_use", &go("https://evil-docs.rs/"))
                .is_some()
        );
        assert!(
            a.check("browser_use", &json!({"action": "scroll_down"}))
                .is_none()
        );
        let crawl = rules(vec![("crawl", Rule::Domains(vec!["docs.rs".into()]))]);
        let urls = json!({"urls": ["https://docs.rs/a", "https://evil.example/b"]});
        let why = crawl.check("crawl", &urls).unwrap();
        assert!(why.contains("evil.example"), "{why}");
        let anywhere = rules(vec![("bash", Rule::Outside("src".into()))]);
        assert!(
            anywhere.check("bash", &json!({"command": "ls"})).is_some(),
            "no path to check: it waits"
        );
    }
}
