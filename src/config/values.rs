//! Value checks the sections share: the range a number key accepts (`Bounds`, `SECONDS` for
//! every timeout), text that must not be blank, a web URL with a host, a list of tool names. `Table`
//! names a table's keys; every problem names the key, its line and what the key accepts.

use std::fmt::Display;
use std::time::Duration;

use manus_actors::tools::KNOWN_TOOLS;
use toml::Spanned;

use super::error::{Lines, Problem};

/// The values a number key accepts, both ends included; `unit` follows them in the message
/// (" seconds", " (CPUs)").
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds<T> {
    min: T,
    max: T,
    unit: &'static str,
}

impl<T> Bounds<T> {
    pub(super) const fn new(min: T, max: T, unit: &'static str) -> Bounds<T> {
        Bounds { min, max, unit }
    }
}

/// A week, in seconds: the longest any timeout may be. Far longer ones overflow the clock
/// when added to the present moment.
pub(super) const WEEK: i64 = 7 * 24 * 3600;

/// Every `…_timeout_secs` key: a second to a week.
const SECONDS: Bounds<i64> = Bounds::new(1, WEEK, " seconds (a week)");

/// A table of the file (`[sandbox]`, `[agents.manus]`), to check its keys and name them.
pub(super) struct Table<'t> {
    header: String,
    lines: Lines<'t>,
}

impl<'t> Table<'t> {
    /// `header` as the file writes it, brackets included.
    pub(super) fn new(header: impl Into<String>, lines: Lines<'t>) -> Table<'t> {
        Table {
            header: header.into(),
            lines,
        }
    }

    /// The key `name` of this table as messages write it: `[sandbox] cpu_limit`.
    pub(super) fn key(&self, name: &str) -> String {
        format!("{} {name}", self.header)
    }

    /// `name` is missing from this table: the problem is on the table's header line, when
    /// the file has one.
    pub(super) fn missing(&self, name: &str, message: String) -> Problem {
        Problem::at(self.lines.header(&self.header), self.key(name), message)
    }

    /// The number `v` holds if it is within `bounds` (NaN never is), `None` if the key is
    /// absent.
    pub(super) fn number<T: Copy + PartialOrd + Display>(
        &self,
        v: &Option<Spanned<T>>,
        name: &str,
        bounds: Bounds<T>,
    ) -> Result<Option<T>, Problem> {
        let Some(v) = v else { return Ok(None) };
        let n = *v.get_ref();
        if (bounds.min..=bounds.max).contains(&n) {
            return Ok(Some(n));
        }
        let key = self.key(name);
        let Bounds { min, max, unit } = bounds;
        Err(Problem::at(
            self.lines.of(v),
            &key,
            format!("{key} = {n} is out of range: use {min} to {max}{unit}"),
        ))
    }

    /// A timeout in seconds (`SECONDS`), `default` if the key is absent.
    pub(super) fn seconds(
        &self,
        v: &Option<Spanned<i64>>,
        name: &str,
        default: Duration,
    ) -> Result<Duration, Problem> {
        Ok(self
            .number(v, name, SECONDS)?
            .map_or(default, |s| Duration::from_secs(s as u64)))
    }

    /// The text `v` holds unless it is blank; `what` says what belongs there ("a path").
    pub(super) fn text(
        &self,
        v: &Option<Spanned<String>>,
        name: &str,
        what: &str,
    ) -> Result<Option<String>, Problem> {
        v.as_ref().map(|v| self.filled(v, name, what)).transpose()
    }

    /// The text of a key that must be there, unless it is blank.
    pub(super) fn filled(
        &self,
        v: &Spanned<String>,
        name: &str,
        what: &str,
    ) -> Result<String, Problem> {
        self.not_blank(v, v.get_ref(), name, what)?;
        Ok(v.get_ref().clone())
    }

    /// The list `v` holds unless an entry is blank; `what` says what belongs in one.
    pub(super) fn texts(
        &self,
        v: &Option<Spanned<Vec<String>>>,
        name: &str,
        what: &str,
    ) -> Result<Option<Vec<String>>, Problem> {
        let Some(v) = v else { return Ok(None) };
        for entry in v.get_ref() {
            self.not_blank(v, entry, name, what)?;
        }
        Ok(Some(v.get_ref().clone()))
    }

    /// `text`, written at `at`, is not blank.
    fn not_blank<T>(
        &self,
        at: &Spanned<T>,
        text: &str,
        name: &str,
        what: &str,
    ) -> Result<(), Problem> {
        if !text.trim().is_empty() {
            return Ok(());
        }
        let key = self.key(name);
        Err(Problem::at(
            self.lines.of(at),
            &key,
            format!("{key} = \"{text}\" is blank: give {what}"),
        ))
    }
}

/// An `http://` or `https://` URL with a host (without a trailing slash), or a problem
/// naming the key and its line.
pub(super) fn web_url(v: &Spanned<String>, key: &str, lines: Lines) -> Result<String, Problem> {
    let u = v.get_ref();
    match not_web_url(u) {
        None => Ok(u.trim_end_matches('/').to_string()),
        Some(why) => Err(Problem::at(
            lines.of(v),
            key,
            format!("{key} = \"{u}\" {why}"),
        )),
    }
}

/// Why `u` is not an `http(s)://` URL with a host, if it is not.
pub(super) fn not_web_url(u: &str) -> Option<&'static str> {
    if !(u.starts_with("http://") || u.starts_with("https://")) {
        return Some("must start with http:// or https://");
    }
    // WHATWG parsing reads `https:///path` as the host `path`: a host is what follows `//`.
    let after = u.split_once("://").map_or("", |(_, rest)| rest);
    match reqwest::Url::parse(u) {
        Ok(url) if !after.starts_with('/') && url.host_str().is_some_and(|h| !h.is_empty()) => None,
        _ => Some("is not a URL with a host: write http(s)://HOST[:PORT][/PATH]"),
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
