//! Generated configs: the example config with values replaced by odd ones, keys renamed,
//! lines dropped, doubled or uncommented, and bytes changed. The properties: `parse` never
//! panics, and when the text is well-formed TOML every error says on which line its
//! problem is, unless the problem is of the file as a whole or a key is missing from a table
//! the file has no header for.

use serde_json::Value;

use super::{Gen, run};
use crate::config::{Lines, parse};

const EXAMPLE: &str = include_str!("../../config/config.example.toml");

/// TOML values that sit on edges, for any key.
const ODD_VALUES: &[&str] = &[
    "0",
    "-1",
    "1",
    "-9223372036854775808",
    "9223372036854775807",
    "1e20",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "0.0",
    "99",
    "\"\"",
    "\" \"",
    "\"0\"",
    "true",
    "false",
    "[]",
    "[1, \"a\"]",
    "{}",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
    "'''\nx'''",
    "\"\\u0000\"",
];

/// One value as TOML text: an edge one, or generated text as a string.
fn value(g: &mut Gen) -> String {
    match g.below(3) {
        0 => Value::String(g.text(16)).to_string(),
        1 => g.number().to_string(),
        _ => g.pick(ODD_VALUES).to_string(),
    }
}

/// The example with one to three changes.
fn mutated(g: &mut Gen) -> String {
    let mut lines: Vec<String> = EXAMPLE.lines().map(str::to_string).collect();
    for _ in 0..1 + g.below(3) {
        let i = g.below(lines.len());
        let line = lines[i].clone();
        match g.below(7) {
            0 => {
                // Uncomment a line: the example's commented keys and tables come alive.
                lines[i] = line.trim_start_matches(['#', ' ']).to_string();
            }
            1 => {
                if let Some((key, _)) = line.split_once('=') {
                    lines[i] = format!("{key}= {}", value(g));
                }
            }
            2 => {
                if let Some((_, rest)) = line.split_once('=') {
                    let other = g.pick(&lines).split('=').next().unwrap_or("").to_string();
                    let key = if g.one_in(2) { other } else { g.text(8) };
                    lines[i] = format!("{}={rest}", key.trim());
                }
            }
            3 => {
                lines.remove(i);
            }
            4 => lines.insert(g.below(lines.len() + 1), line),
            5 => lines[i] = g.mutate_text(&line),
            _ => lines[i] = g.text(24),
        }
    }
    lines.join("\n")
}

#[test]
fn fuzz_config() {
    // The problems of the file as a whole, which no line can be blamed for.
    let whole = ["the agent pool is empty"];
    // The keys of errors that name a key but no line: only a key missing from a table the
    // file has no header for (a missing key is reported on its table's header line).
    let mut lineless = std::collections::BTreeSet::new();
    run("config", |g| {
        let text = if g.one_in(8) {
            g.mutate_text(EXAMPLE)
        } else {
            mutated(g)
        };
        let Err(e) = parse(&text, "fuzz.toml") else {
            return;
        };
        let well_formed = toml::from_str::<toml::Table>(&text).is_ok();
        if well_formed && !whole.iter().any(|w| e.message.starts_with(w)) {
            assert!(
                e.line.is_some() || e.key.is_some(),
                "an error with neither line nor key: {e}\n--- config:\n{text}"
            );
            if let (None, Some(key)) = (e.line, &e.key) {
                let table = key.split(' ').next().unwrap_or("");
                assert!(
                    Lines(&text).header(table).is_none(),
                    "{key} is reported without the line of its table's header: {e}\n--- config:\n{text}"
                );
                lineless.insert(key.clone());
            }
        }
    });
    println!("fuzz config: keys missing from a table without a header: {lineless:?}");
}
