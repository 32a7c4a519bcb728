//! The words a plot carries besides its numbers: default titles and axis labels (each
//! given one wins), and the notes on rows left out.

use super::super::Aggregate;
use super::Ctx;

/// `word` with its first letter in capitals.
pub(super) fn capitalised(word: &str) -> String {
    let mut c = word.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl Ctx<'_> {
    pub(super) fn skipped(&mut self, count: usize, what: &str) {
        if count > 0 {
            let (rows, were) = if count == 1 {
                ("row", "was")
            } else {
                ("rows", "were")
            };
            self.notes
                .push(format!("{count} {rows} with no {what} {were} left out"));
        }
    }

    pub(super) fn label_or(&self, given: &Option<String>, default: String) -> String {
        given.clone().unwrap_or(default)
    }

    /// "revenue", "revenue and cost", or "rows" for a count.
    pub(super) fn what(&self) -> String {
        match self.req.y.as_slice() {
            [] => "Rows".into(),
            [one] => one.clone(),
            [first @ .., last] if first.len() < 3 => format!("{} and {last}", first.join(", ")),
            _ => "Values".into(),
        }
    }

    pub(super) fn y_label_default(&self, combined: bool) -> String {
        let agg = self.aggregate();
        match self.req.y.as_slice() {
            [] => "Count of rows".into(),
            [one] if combined && agg != Aggregate::Sum => {
                format!("{one} ({})", agg.word().to_lowercase())
            }
            [one] => one.clone(),
            _ => String::new(),
        }
    }

    pub(super) fn default_title(&self, x_name: &str) -> String {
        let by = match &self.req.group_by {
            Some(g) => format!("{x_name} and {g}"),
            None => x_name.to_string(),
        };
        capitalised(&format!("{} by {by}", self.what()))
    }
}
