//! Reading the table's columns for a request: a name checked against the columns (an
//! unknown one is an error that lists them), a value column read as numbers (a value that
//! is not one is an error saying where it stands and which columns are numeric), and a key
//! column (x or group_by) read as dates, numbers or text, whichever all its values are.

use super::super::table::Cell;
use super::super::values::{
    Precision, format_date, format_value, is_missing, parse_date, parse_number,
};
use super::super::{Aggregate, Request};
use super::Ctx;

/// A key column (x or group_by), read as the kind of values it holds.
pub(super) enum Keys {
    Text(Vec<Option<String>>),
    Numbers(Vec<Option<f64>>, bool),
    Dates(Vec<Option<f64>>, Precision),
}

impl Keys {
    pub(super) fn number(&self, row: usize) -> Option<f64> {
        match self {
            Keys::Numbers(v, _) | Keys::Dates(v, _) => v[row],
            Keys::Text(_) => None,
        }
    }

    pub(super) fn label_of(&self, v: f64) -> String {
        match self {
            Keys::Numbers(_, true) => format!("{}", v as i64),
            Keys::Numbers(_, false) => format_value(v),
            Keys::Dates(_, p) => format_date(v, *p),
            Keys::Text(_) => String::new(),
        }
    }
}

/// A value column: its name and each row's number.
pub(super) type Column = (String, Vec<Option<f64>>);

impl<'a> Ctx<'a> {
    pub(super) fn column(&self, name: &str) -> Result<usize, String> {
        if let Some(i) = self.table.column(name) {
            return Ok(i);
        }
        let hint = self
            .table
            .columns
            .iter()
            .find(|c| c.eq_ignore_ascii_case(name) || c.trim() == name.trim())
            .map(|c| format!(" Did you mean `{c}`? Names must match exactly."))
            .unwrap_or_default();
        Err(format!(
            "there is no column `{name}` in `{}`; its columns are: {}.{hint}",
            self.source,
            self.table.columns.join(", ")
        ))
    }

    pub(super) fn x_name(&self, what: &str) -> Result<&'a str, String> {
        let req: &'a Request = self.req;
        req.x.as_deref().ok_or_else(|| {
            format!(
                "a {} chart needs `x`: the column {what}",
                self.req.chart.name()
            )
        })
    }

    fn cells(&self, col: usize) -> impl Iterator<Item = &Cell> {
        self.table.rows.iter().map(move |r| &r.cells[col])
    }

    /// A column read as numbers (missing values as None); any other value is an error that
    /// names the column, the value and its place in the file.
    pub(super) fn numbers(&self, name: &str, role: &str) -> Result<Vec<Option<f64>>, String> {
        let col = self.column(name)?;
        let mut out = Vec::with_capacity(self.table.rows.len());
        for row in &self.table.rows {
            out.push(match &row.cells[col] {
                Cell::Empty => None,
                Cell::Number(n) => Some(*n),
                Cell::Text(t) if is_missing(t) => None,
                Cell::Text(t) => match parse_number(t) {
                    Some(n) => Some(n),
                    None => {
                        return Err(format!(
                            "column `{name}` ({role}) must be numeric, but {} of `{}` has `{}` \
                             in it. {}",
                            self.table.place(row),
                            self.source,
                            t.trim(),
                            self.numeric_hint(name)
                        ));
                    }
                },
            });
        }
        if out.iter().all(Option::is_none) {
            return Err(format!(
                "column `{name}` ({role}) has no values at all in `{}`",
                self.source
            ));
        }
        Ok(out)
    }

    fn numeric_hint(&self, except: &str) -> String {
        let numeric: Vec<&str> = self
            .table
            .columns
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                *c != except
                    && self.cells(*i).any(|c| !matches!(c, Cell::Empty))
                    && self.cells(*i).all(|c| match c {
                        Cell::Empty | Cell::Number(_) => true,
                        Cell::Text(t) => is_missing(t) || parse_number(t).is_some(),
                    })
            })
            .map(|(_, c)| c.as_str())
            .collect();
        if numeric.is_empty() {
            "No other column is numeric either; clean the values with Python first (e.g. \
             pd.to_numeric(..., errors=\"coerce\")) and save the data again."
                .into()
        } else {
            format!(
                "Numeric columns are: {}. Or clean this one with Python first (e.g. \
                 pd.to_numeric(..., errors=\"coerce\")) and save the data again.",
                numeric.join(", ")
            )
        }
    }

    /// A key column read as dates, numbers or text, whichever all its values are.
    pub(super) fn keys(&self, name: &str) -> Result<Keys, String> {
        let col = self.column(name)?;
        let present: Vec<&Cell> = self
            .cells(col)
            .filter(|c| match c {
                Cell::Empty => false,
                Cell::Text(t) => !is_missing(t),
                Cell::Number(_) => true,
            })
            .collect();
        if present.is_empty() {
            return Err(format!(
                "column `{name}` has no values at all in `{}`",
                self.source
            ));
        }
        let text_of = |c: &Cell| match c {
            Cell::Text(t) if !is_missing(t) => Some(t.trim().to_string()),
            Cell::Number(_) => Some(c.text()),
            _ => None,
        };
        let all_text = present.iter().all(|c| matches!(c, Cell::Text(_)));
        if all_text && present.iter().all(|c| parse_date(&c.text()).is_some()) {
            let mut precision = Precision::Month;
            let days = self
                .cells(col)
                .map(|c| {
                    text_of(c).and_then(|t| parse_date(&t)).map(|d| {
                        precision = precision.max(d.precision);
                        d.days
                    })
                })
                .collect();
            return Ok(Keys::Dates(days, precision));
        }
        let as_number = |c: &Cell| match c {
            Cell::Number(n) => Some(*n),
            Cell::Text(t) => parse_number(t),
            Cell::Empty => None,
        };
        if present.iter().all(|c| as_number(c).is_some()) {
            let nums: Vec<Option<f64>> = self
                .cells(col)
                .map(|c| text_of(c).and(as_number(c)))
                .collect();
            let plain = nums
                .iter()
                .flatten()
                .all(|v| v.fract() == 0.0 && (1000.0..=2999.0).contains(v));
            return Ok(Keys::Numbers(nums, plain));
        }
        Ok(Keys::Text(self.cells(col).map(text_of).collect()))
    }

    /// The value columns: the y columns read as numbers, or, for a count without y, one
    /// column of ones.
    pub(super) fn value_columns(&self, need: &str) -> Result<Vec<Column>, String> {
        if self.req.y.is_empty() {
            if self.req.aggregate == Some(Aggregate::Count) {
                return Ok(vec![(
                    "Rows".into(),
                    vec![Some(1.0); self.table.rows.len()],
                )]);
            }
            return Err(format!(
                "a {} chart needs `y`: {need} (or set `aggregate` to \"count\" to count rows)",
                self.req.chart.name()
            ));
        }
        self.req
            .y
            .iter()
            .map(|y| Ok((y.clone(), self.numbers(y, "y")?)))
            .collect()
    }

    /// The first text in column `name` that is not a number, for an error to show.
    pub(super) fn first_text(&self, name: &str) -> String {
        let col = self.table.column(name).unwrap_or(0);
        self.cells(col)
            .find_map(|c| match c {
                Cell::Text(t) if parse_number(t).is_none() && !is_missing(t) => Some(t.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }
}
