//! `[memory]`: notes that outlast runs, checked: whether agents may keep them, which
//! namespace a note is saved in (`save_to`), which ones a search reads (`search`) and how
//! many notes a search returns. `resolve` checks the
//! run store they live in is on.

use crate::store::memory::{MemorySettings, Scope};

use super::error::{Lines, Problem};
use super::file::MemoryToml;
use super::values::{Bounds, Table};

/// Notes one search returns when the model does not say.
const RESULTS: Bounds<i64> = Bounds::new(1, 20, " notes");

/// The memory settings, `None` unless `[memory] enabled = true`; every key is checked either way.
pub(super) fn build(m: &MemoryToml, lines: Lines) -> Result<Option<MemorySettings>, Problem> {
    let table = Table::new("[memory]", lines);
    let defaults = MemorySettings::default();
    let scope = |v: &toml::Spanned<String>, key: &str| {
        Scope::parse(v.get_ref()).ok_or_else(|| {
            let key = table.key(key);
            Problem::at(
                lines.of(v),
                &key,
                format!(
                    "{key}: \"{}\" is no namespace; use one of {}",
                    v.get_ref(),
                    Scope::NAMES.join(", ")
                ),
            )
        })
    };
    let save_to = match &m.save_to {
        Some(v) => scope(v, "save_to")?,
        None => defaults.save_to,
    };
    let search = match &m.search {
        None => defaults.search,
        Some(list) => {
            let mut out = vec![];
            for name in list.get_ref() {
                let s = scope(&toml::Spanned::new(list.span(), name.clone()), "search")?;
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            if out.is_empty() {
                let key = table.key("search");
                return Err(Problem::at(
                    lines.of(list),
                    &key,
                    format!(
                        "{key} is empty: list the namespaces a search reads, from {}",
                        Scope::NAMES.join(", ")
                    ),
                ));
            }
            out
        }
    };
    let settings = MemorySettings {
        save_to,
        search,
        max_results: table
            .number(&m.max_results, "max_results", RESULTS)?
            .map_or(defaults.max_results, |n| n as usize),
        distill: m.distill.unwrap_or(defaults.distill),
    };
    Ok(m.enabled.unwrap_or(false).then_some(settings))
}
