//! What a config problem says and where it is: `ConfigError` (the file, the line if known,
//! the key if one is to blame, the message), the `Problem` a section's builder reports
//! before the file's name is attached, how a place in the text becomes a line, and where
//! a file that is not UTF-8 goes wrong.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;

/// A config problem, with where it is. Shown as `FILE:LINE: MESSAGE` (or `FILE: MESSAGE`
/// when the line is not known); the message names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (a path, or a name such as "embedded example config").
    pub source: String,
    /// The line the problem is on, 1-based, where it is known.
    pub line: Option<usize>,
    /// The key at fault as the message writes it (`[agents.manus] llm`, `[llm.fast] cassette`,
    /// `mcpServers.remote`), where one is.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.source, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// The file at `path` cannot be read; `what` names it in the message (`it`, `the MCP
    /// servers file`).
    pub fn unreadable(path: &Path, what: &str, e: std::io::Error) -> ConfigError {
        ConfigError {
            source: path.display().to_string(),
            line: None,
            key: None,
            message: format!("cannot read {what}: {e}"),
        }
    }
}

/// The text of the file at `path`, or where its first byte that is not UTF-8 is.
pub fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String, ConfigError> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        ConfigError {
            source: path.display().to_string(),
            line: Some(valid.iter().filter(|b| **b == b'\n').count() + 1),
            key: None,
            message: format!(
                "byte {} of this line, after \"{}\", is not UTF-8: save the file as UTF-8",
                valid.len() - line_start + 1,
                String::from_utf8_lossy(&valid[line_start..]).trim_start()
            ),
        }
    })
}

/// A problem a builder found, before the file's name is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl Problem {
    /// A problem with `key`, on `line` if known.
    pub fn at(line: Option<usize>, key: impl Into<String>, message: String) -> Problem {
        Problem {
            line,
            key: Some(key.into()),
            message,
        }
    }

    /// A problem of the file as a whole.
    pub fn whole(message: String) -> Problem {
        Problem {
            line: None,
            key: None,
            message,
        }
    }

    /// This problem in `source`.
    pub fn in_file(self, source: &str) -> ConfigError {
        ConfigError {
            source: source.to_string(),
            line: self.line,
            key: self.key,
            message: self.message,
        }
    }
}

/// The config's text, to turn places in it into line numbers.
#[derive(Clone, Copy)]
pub struct Lines<'t>(pub &'t str);

impl Lines<'_> {
    /// The line a byte range starts on, 1-based.
    pub fn of_span(&self, span: Range<usize>) -> Option<usize> {
        Some(self.0[..span.start.min(self.0.len())].matches('\n').count() + 1)
    }

    /// The line a value was written on.
    pub fn of<T>(&self, v: &Spanned<T>) -> Option<usize> {
        self.of_span(v.span())
    }

    /// The line of the table header `header` (`[llm.fast]`), written with any spacing or
    /// quoting TOML allows: where a key the table lacks is reported.
    pub fn header(&self, header: &str) -> Option<usize> {
        let bare = |l: &str| -> String {
            let l = l.split('#').next().unwrap_or("");
            l.chars()
                .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .collect()
        };
        let want = bare(header);
        self.0.lines().position(|l| bare(l) == want).map(|i| i + 1)
    }

    /// Line `n` of the file with the table it belongs to, e.g.
    /// `[agents.manus] max_steps = "ten"`.
    pub fn quote(&self, n: usize) -> String {
        let lines: Vec<&str> = self.0.lines().collect();
        let here = lines.get(n - 1).map(|l| l.trim()).unwrap_or("");
        if here.starts_with('[') {
            return here.to_string();
        }
        match table_above(&lines, n) {
            Some(t) => format!("{t} {here}"),
            None => here.to_string(),
        }
    }

    /// The key written on line `n`, with its table: `[agents.manus] max_steps`; the table
    /// alone for a table's header line.
    pub fn key_on(&self, n: usize) -> Option<String> {
        let lines: Vec<&str> = self.0.lines().collect();
        let here = lines.get(n - 1)?.trim();
        if here.starts_with('[') {
            return Some(here.to_string());
        }
        let key = here.split('=').next()?.trim();
        if key.is_empty() {
            return None;
        }
        Some(match table_above(&lines, n) {
            Some(t) => format!("{t} {key}"),
            None => key.to_string(),
        })
    }
}

/// The nearest table header above line `n`.
fn table_above<'a>(lines: &[&'a str], n: usize) -> Option<&'a str> {
    lines[..(n - 1).min(lines.len())]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
}
