//! From a table and a request to what will be plotted: the columns are checked (unknown
//! names and non-numeric values are errors that name them), rows sharing an x are
//! aggregated, categories are ordered and cut to `top_n`, histograms are binned, and
//! everything the reader should know (rows skipped, what a value means) is noted.

use std::collections::HashMap;

use super::table::{Cell, Table};
use super::values::{Precision, format_date, format_value, is_missing, parse_date, parse_number};
use super::{Aggregate, ChartType, Request, Sort};

/// Most series one chart draws; more would be a tangle of look-alike colours.
pub const MAX_SERIES: usize = 8;
/// Most slices a pie draws before the smallest are put together as "Other".
const MAX_SLICES: usize = 8;
/// Most rows or columns a heatmap draws.
const MAX_HEAT: usize = 80;
/// Most points one chart draws.
const MAX_POINTS: usize = 100_000;

/// What the x axis holds.
#[derive(Debug, Clone, PartialEq)]
pub enum XKind {
    /// One band per label; points' x is the band's index.
    Categories(Vec<String>),
    /// A number line; `plain` for years and other numbers shown without separators.
    Numbers { plain: bool },
    /// A time line in days since 1970-01-01, written at this precision.
    Dates(Precision),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// (x, y) pairs, in x order for lines.
    pub points: Vec<(f64, f64)>,
}

/// A histogram bin: [lo, hi) (the last one closed) and how many values fell in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub count: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// line, bar, stacked_bar, area, scatter.
    Xy {
        x: XKind,
        series: Vec<Series>,
    },
    Histogram {
        bins: Vec<Bin>,
        plain: bool,
    },
    Pie {
        slices: Vec<(String, f64)>,
    },
    Heatmap {
        columns: Vec<String>,
        rows: Vec<String>,
        /// `cells[row][column]`.
        cells: Vec<Vec<Option<f64>>>,
    },
}

/// Everything needed to draw a chart, already computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub chart: ChartType,
    pub title: String,
    /// What the values are, and what was cut (may be empty).
    pub subtitle: String,
    pub x_label: String,
    pub y_label: String,
    pub body: Body,
    /// Things the caller should be told: rows skipped, arguments that did not apply.
    pub notes: Vec<String>,
}

/// A key column (x or group_by), read as the kind of values it holds.
enum Keys {
    Text(Vec<Option<String>>),
    Numbers(Vec<Option<f64>>, bool),
    Dates(Vec<Option<f64>>, Precision),
}

impl Keys {
    fn number(&self, row: usize) -> Option<f64> {
        match self {
            Keys::Numbers(v, _) | Keys::Dates(v, _) => v[row],
            Keys::Text(_) => None,
        }
    }

    fn label_of(&self, v: f64) -> String {
        match self {
            Keys::Numbers(_, true) => format!("{}", v as i64),
            Keys::Numbers(_, false) => format_value(v),
            Keys::Dates(_, p) => format_date(v, *p),
            Keys::Text(_) => String::new(),
        }
    }
}

/// Distinct values of a key column in their natural order (file order for text,
/// ascending otherwise), and each row's value index.
struct Groups {
    labels: Vec<String>,
    /// The numeric value of each group (numbers and dates).
    values: Vec<f64>,
    of_row: Vec<Option<usize>>,
}

fn group(keys: &Keys) -> Groups {
    match keys {
        Keys::Text(v) => {
            let mut labels: Vec<String> = vec![];
            let mut index: HashMap<&str, usize> = HashMap::new();
            let of_row = v
                .iter()
                .map(|k| {
                    k.as_deref().map(|k| {
                        *index.entry(k).or_insert_with(|| {
                            labels.push(k.to_string());
                            labels.len() - 1
                        })
                    })
                })
                .collect();
            Groups {
                values: vec![],
                labels,
                of_row,
            }
        }
        Keys::Numbers(v, _) | Keys::Dates(v, _) => {
            let mut values: Vec<f64> = v.iter().flatten().copied().collect();
            values.sort_by(f64::total_cmp);
            values.dedup();
            let of_row = v
                .iter()
                .map(|k| k.map(|k| values.partition_point(|&u| u < k)))
                .collect();
            Groups {
                labels: values.iter().map(|&u| keys.label_of(u)).collect(),
                values,
                of_row,
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Acc {
    sum: f64,
    n: usize,
    min: f64,
    max: f64,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            sum: 0.0,
            n: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn add(&mut self, v: f64) {
        self.sum += v;
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn value(&self, agg: Aggregate) -> f64 {
        match agg {
            Aggregate::Sum => self.sum,
            Aggregate::Mean => self.sum / self.n as f64,
            Aggregate::Count => self.n as f64,
            Aggregate::Min => self.min,
            Aggregate::Max => self.max,
        }
    }
}

/// A value column: its name and each row's number.
type Column = (String, Vec<Option<f64>>);
/// For each row, the series its values go to (None: no series).
type SeriesOfRow<'v> = Box<dyn Fn(usize) -> Vec<Option<usize>> + 'v>;
/// For each row, its values, one per value column.
type ValuesOfRow<'v> = Box<dyn Fn(usize) -> Vec<Option<f64>> + 'v>;

/// The request checked against the table: column positions and what the values mean.
struct Ctx<'a> {
    table: &'a Table,
    req: &'a Request,
    source: &'a str,
    notes: Vec<String>,
}

pub fn prepare(table: &Table, req: &Request, source: &str) -> Result<Plot, String> {
    let mut ctx = Ctx {
        table,
        req,
        source,
        notes: vec![],
    };
    for name in req.x.iter().chain(&req.y).chain(&req.group_by) {
        ctx.column(name)?;
    }
    match req.chart {
        ChartType::Histogram => ctx.histogram(),
        ChartType::Pie => ctx.pie(),
        ChartType::Heatmap => ctx.heatmap(),
        ChartType::Scatter => ctx.scatter(),
        ChartType::Line | ChartType::Area | ChartType::Bar | ChartType::StackedBar => ctx.xy(),
    }
}

/// `word` with its first letter in capitals.
fn capitalised(word: &str) -> String {
    let mut c = word.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl<'a> Ctx<'a> {
    fn column(&self, name: &str) -> Result<usize, String> {
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

    fn x_name(&self, what: &str) -> Result<&'a str, String> {
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
    fn numbers(&self, name: &str, role: &str) -> Result<Vec<Option<f64>>, String> {
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
    fn keys(&self, name: &str) -> Result<Keys, String> {
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

    fn aggregate(&self) -> Aggregate {
        self.req.aggregate.unwrap_or(if self.req.y.is_empty() {
            Aggregate::Count
        } else {
            Aggregate::Sum
        })
    }

    /// The value columns: the y columns read as numbers, or, for a count without y, one
    /// column of ones.
    fn value_columns(&self, need: &str) -> Result<Vec<Column>, String> {
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

    fn skipped(&mut self, count: usize, what: &str) {
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

    fn label_or(&self, given: &Option<String>, default: String) -> String {
        given.clone().unwrap_or(default)
    }

    /// "revenue", "revenue and cost", or "rows" for a count.
    fn what(&self) -> String {
        match self.req.y.as_slice() {
            [] => "Rows".into(),
            [one] => one.clone(),
            [first @ .., last] if first.len() < 3 => format!("{} and {last}", first.join(", ")),
            _ => "Values".into(),
        }
    }

    fn y_label_default(&self, combined: bool) -> String {
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

    fn check_series_args(&self) -> Result<(), String> {
        if self.req.group_by.is_some() && self.req.y.len() > 1 {
            return Err(format!(
                "give either several `y` columns or `group_by`, not both: with group_by each \
                 group is a series of the one y column (got y = {})",
                self.req.y.join(", ")
            ));
        }
        Ok(())
    }

    /// line, area, bar and stacked_bar: aggregate y per x (and series), order and cut.
    fn xy(&mut self) -> Result<Plot, String> {
        let chart = self.req.chart;
        let x_name = self.x_name("for the horizontal axis (categories, dates or numbers)")?;
        self.check_series_args()?;
        let keys = self.keys(x_name)?;
        let groups = group(&keys);
        let values = self.value_columns("the numeric column(s) to plot")?;
        let agg = self.aggregate();
        let (names, series_of_row, value_of_row) = self.series_layout(&values)?;
        let n_series = names.len();
        let mut cells = vec![vec![None::<Acc>; groups.labels.len()]; n_series];
        let (mut no_x, mut no_y, mut combined) = (0, 0, false);
        for row in 0..self.table.rows.len() {
            let Some(cat) = groups.of_row[row] else {
                no_x += 1;
                continue;
            };
            for (s, v) in series_of_row(row).into_iter().zip(value_of_row(row)) {
                let (Some(s), Some(v)) = (s, v) else {
                    no_y += 1;
                    continue;
                };
                let acc = cells[s][cat].get_or_insert_with(Acc::new);
                acc.add(v);
                combined |= acc.n > 1;
            }
        }
        self.skipped(no_x, &format!("`{x_name}`"));
        self.skipped(no_y, "value");
        let value = |s: usize, c: usize| -> Option<f64> { cells[s][c].map(|a| a.value(agg)) };
        let totals: Vec<f64> = (0..groups.labels.len())
            .map(|c| (0..n_series).filter_map(|s| value(s, c)).sum())
            .collect();
        let series_totals: Vec<f64> = (0..n_series)
            .map(|s| {
                (0..groups.labels.len())
                    .filter_map(|c| value(s, c))
                    .map(f64::abs)
                    .sum()
            })
            .collect();
        let kept_series = self.pick_series(&names, &series_totals)?;

        let continuous =
            matches!(chart, ChartType::Line | ChartType::Area) && !matches!(keys, Keys::Text(_));
        let mut subtitle = vec![];
        if combined {
            subtitle.push(match self.req.y.as_slice() {
                [] => format!("Rows per {x_name}"),
                [one] => format!("{} of {one} per {x_name}", agg.word()),
                _ => format!("{} per {x_name}", agg.word()),
            });
        }
        let (x, order) = if continuous {
            if let Some(sort) = self.req.sort.filter(|s| *s != Sort::None && *s != Sort::X) {
                self.notes.push(format!(
                    "sort {sort:?} was not applied: a {} chart over {} runs in x order",
                    chart.name(),
                    if matches!(keys, Keys::Dates(..)) {
                        "dates"
                    } else {
                        "numbers"
                    }
                ));
            }
            let x = match &keys {
                Keys::Dates(_, p) => XKind::Dates(*p),
                Keys::Numbers(_, plain) => XKind::Numbers { plain: *plain },
                Keys::Text(_) => unreachable!("continuous x is never text"),
            };
            (x, (0..groups.labels.len()).collect::<Vec<_>>())
        } else {
            let order =
                order_categories(&groups, &keys, &totals, self.req.sort.unwrap_or(Sort::None));
            let bars = matches!(chart, ChartType::Bar | ChartType::StackedBar);
            let order = match self.req.top_n {
                Some(n) if bars && n < order.len() => {
                    let by = match self.req.y.as_slice() {
                        [one] if n_series == 1 => one.as_str(),
                        [] if n_series == 1 => "count",
                        _ => "total",
                    };
                    subtitle.push(format!("Top {n} of {} by {by}", order.len()));
                    keep_top(order, &totals, n)
                }
                _ => order,
            };
            let labels = order.iter().map(|&c| groups.labels[c].clone()).collect();
            (XKind::Categories(labels), order)
        };
        let series: Vec<Series> = kept_series
            .iter()
            .map(|&s| Series {
                name: names[s].clone(),
                points: order
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &c)| {
                        let x = if continuous {
                            groups.values[c]
                        } else {
                            i as f64
                        };
                        value(s, c).map(|v| (x, v))
                    })
                    .collect(),
            })
            .collect();
        self.check_points(series.iter().map(|s| s.points.len()).sum())?;
        if matches!(chart, ChartType::StackedBar | ChartType::Area)
            && series.iter().flat_map(|s| &s.points).any(|p| p.1 < 0.0)
            && series.len() > 1
        {
            self.notes.push(
                "some values are negative; stacked negative parts are drawn below zero".into(),
            );
        }
        let title = self.label_or(&self.req.title, self.default_title(x_name));
        Ok(Plot {
            chart,
            title,
            subtitle: subtitle.join(" · "),
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, self.y_label_default(combined)),
            body: Body::Xy { x, series },
            notes: std::mem::take(&mut self.notes),
        })
    }

    fn default_title(&self, x_name: &str) -> String {
        let by = match &self.req.group_by {
            Some(g) => format!("{x_name} and {g}"),
            None => x_name.to_string(),
        };
        capitalised(&format!("{} by {by}", self.what()))
    }

    /// Series names, and for each row the series index and value of each of its values.
    fn series_layout<'v>(
        &self,
        values: &'v [Column],
    ) -> Result<(Vec<String>, SeriesOfRow<'v>, ValuesOfRow<'v>), String> {
        let value_of_row = Box::new(move |row: usize| values.iter().map(|(_, v)| v[row]).collect());
        match &self.req.group_by {
            Some(g) => {
                let keys = self.keys(g)?;
                let groups = group(&keys);
                let of_row = groups.of_row;
                Ok((
                    groups.labels,
                    Box::new(move |row| vec![of_row[row]]),
                    value_of_row,
                ))
            }
            None => {
                let names = values.iter().map(|(n, _)| n.clone()).collect();
                let n = values.len();
                Ok((
                    names,
                    Box::new(move |_| (0..n).map(Some).collect()),
                    value_of_row,
                ))
            }
        }
    }

    /// The series to draw: all of them, or the `top_n` (lines, areas, scatter) or
    /// `MAX_SERIES` largest by total.
    fn pick_series(&mut self, names: &[String], totals: &[f64]) -> Result<Vec<usize>, String> {
        let all: Vec<usize> = (0..names.len()).collect();
        let per_series = matches!(
            self.req.chart,
            ChartType::Line | ChartType::Area | ChartType::Scatter
        );
        let limit = match self.req.top_n {
            Some(n) if per_series => {
                if names.len() < 2 {
                    self.notes.push(format!(
                        "top_n was not applied: it picks the largest series of a {} chart, and \
                         this one has a single series (use group_by or several y columns)",
                        self.req.chart.name()
                    ));
                }
                n.max(1)
            }
            _ => MAX_SERIES,
        };
        if names.len() <= limit {
            return Ok(all);
        }
        let mut kept = keep_top(all, totals, limit);
        kept.sort_unstable();
        let dropped: Vec<&str> = (0..names.len())
            .filter(|i| !kept.contains(i))
            .map(|i| names[i].as_str())
            .collect();
        let why = if limit == MAX_SERIES && self.req.top_n.is_none() {
            format!(" (at most {MAX_SERIES} series stay readable; set top_n to choose)")
        } else {
            String::new()
        };
        self.notes.push(format!(
            "drew the {limit} largest of {} series{why}; left out: {}",
            names.len(),
            clip_list(&dropped)
        ));
        Ok(kept)
    }

    fn check_points(&self, n: usize) -> Result<(), String> {
        if n > MAX_POINTS {
            return Err(format!(
                "that would draw {n} points, more than the {MAX_POINTS} a readable chart can \
                 hold; aggregate the data first (e.g. per day or month with pandas) and chart \
                 the result"
            ));
        }
        Ok(())
    }

    fn scatter(&mut self) -> Result<Plot, String> {
        let x_name = self.x_name("of numbers or dates for the horizontal axis")?;
        self.check_series_args()?;
        let keys = self.keys(x_name)?;
        let x = match &keys {
            Keys::Dates(_, p) => XKind::Dates(*p),
            Keys::Numbers(_, plain) => XKind::Numbers { plain: *plain },
            Keys::Text(_) => {
                return Err(format!(
                    "a scatter chart needs numbers or dates on x, and `{x_name}` holds text \
                     (e.g. `{}`); use a bar chart for categories",
                    self.first_text(x_name)
                ));
            }
        };
        if self.req.y.is_empty() {
            return Err(
                "a scatter chart needs `y`: the numeric column(s) for the vertical axis".into(),
            );
        }
        if self.req.aggregate.is_some() {
            self.notes
                .push("aggregate was not applied: a scatter chart shows every row".into());
        }
        if self.req.sort.is_some() {
            self.notes
                .push("sort was not applied: a scatter chart places points by x".into());
        }
        let values = self.value_columns("")?;
        let (names, series_of_row, value_of_row) = self.series_layout(&values)?;
        let mut points = vec![vec![]; names.len()];
        let mut skipped = 0;
        for row in 0..self.table.rows.len() {
            let Some(xv) = keys.number(row) else {
                skipped += 1;
                continue;
            };
            for (s, v) in series_of_row(row).into_iter().zip(value_of_row(row)) {
                match (s, v) {
                    (Some(s), Some(v)) => points[s].push((xv, v)),
                    _ => skipped += 1,
                }
            }
        }
        self.skipped(skipped, "x or y value");
        let totals: Vec<f64> = points.iter().map(|p| p.len() as f64).collect();
        let kept = self.pick_series(&names, &totals)?;
        let series: Vec<Series> = kept
            .into_iter()
            .map(|s| Series {
                name: names[s].clone(),
                points: std::mem::take(&mut points[s]),
            })
            .collect();
        self.check_points(series.iter().map(|s| s.points.len()).sum())?;
        let title = self.label_or(
            &self.req.title,
            capitalised(&format!("{} against {x_name}", self.what())),
        );
        Ok(Plot {
            chart: ChartType::Scatter,
            title,
            subtitle: String::new(),
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, self.y_label_default(false)),
            body: Body::Xy { x, series },
            notes: std::mem::take(&mut self.notes),
        })
    }

    fn first_text(&self, name: &str) -> String {
        let col = self.table.column(name).unwrap_or(0);
        self.cells(col)
            .find_map(|c| match c {
                Cell::Text(t) if parse_number(t).is_none() && !is_missing(t) => Some(t.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn histogram(&mut self) -> Result<Plot, String> {
        let name = match (&self.req.x, self.req.y.as_slice()) {
            (Some(x), _) => x.clone(),
            (None, [y]) => y.clone(),
            _ => {
                return Err(
                    "a histogram needs `x`: the numeric column whose values are \
                            counted into bins"
                        .into(),
                );
            }
        };
        if self.req.group_by.is_some() {
            return Err(
                "a histogram draws one column's distribution; group_by does not apply \
                        (draw one histogram per group, or compare groups with a bar chart of \
                        their means)"
                    .into(),
            );
        }
        if self.req.top_n.is_some() {
            return Err(
                "top_n does not apply to a histogram; to focus on a range, filter the \
                        data with Python first"
                    .into(),
            );
        }
        let values: Vec<f64> = self.numbers(&name, "x")?.into_iter().flatten().collect();
        let missing = self.table.rows.len() - values.len();
        self.skipped(missing, &format!("`{name}`"));
        let bins = bin(&values, self.req.bins);
        let plain = values
            .iter()
            .all(|v| v.fract() == 0.0 && (1000.0..=2999.0).contains(v));
        let width = bins.first().map_or(0.0, |b| b.hi - b.lo);
        let subtitle = format!(
            "{} values in {} bins of width {}",
            format_value(values.len() as f64),
            bins.len(),
            format_value(width)
        );
        Ok(Plot {
            chart: ChartType::Histogram,
            title: self.label_or(&self.req.title, format!("Distribution of {name}")),
            subtitle,
            x_label: self.label_or(&self.req.x_label, name.clone()),
            y_label: self.label_or(&self.req.y_label, "Count of rows".into()),
            body: Body::Histogram { bins, plain },
            notes: std::mem::take(&mut self.notes),
        })
    }

    fn pie(&mut self) -> Result<Plot, String> {
        let x_name = self.x_name("that names the slices")?;
        if self.req.group_by.is_some() || self.req.y.len() > 1 {
            return Err(
                "a pie shows one set of parts of a whole: give one `y` and no \
                        group_by (use stacked_bar to compare several)"
                    .into(),
            );
        }
        let agg = self.aggregate();
        if !matches!(agg, Aggregate::Sum | Aggregate::Count) {
            return Err(format!(
                "a pie shows parts of a whole, so its slices must be sums or counts, not {}; \
                 use a bar chart for {} values",
                agg.word().to_lowercase(),
                agg.word().to_lowercase()
            ));
        }
        let keys = self.keys(x_name)?;
        let groups = group(&keys);
        let values = self.value_columns("the numeric column whose totals size the slices")?;
        let mut accs = vec![Acc::new(); groups.labels.len()];
        let (mut no_x, mut no_y) = (0, 0);
        for row in 0..self.table.rows.len() {
            match (groups.of_row[row], values[0].1[row]) {
                (None, _) => no_x += 1,
                (_, None) => no_y += 1,
                (Some(c), Some(v)) => accs[c].add(v),
            }
        }
        self.skipped(no_x, &format!("`{x_name}`"));
        self.skipped(no_y, "value");
        let totals: Vec<f64> = accs.iter().map(|a| a.value(agg)).collect();
        if let Some(c) = (0..totals.len()).find(|&c| totals[c] < 0.0) {
            return Err(format!(
                "a pie cannot show negative parts: the {} for `{}` is {}; use a bar chart",
                agg.word().to_lowercase(),
                groups.labels[c],
                format_value(totals[c])
            ));
        }
        let sum: f64 = totals.iter().sum();
        if sum <= 0.0 {
            return Err("every slice of this pie would be zero; there is nothing to show".into());
        }
        let order = order_categories(&groups, &keys, &totals, self.req.sort.unwrap_or(Sort::Desc));
        let limit = self.req.top_n.unwrap_or(MAX_SLICES - 1).max(1);
        let mut subtitle = vec![format!("Total {}", format_value(sum))];
        let kept = if order.len() > limit + 1 || (self.req.top_n.is_some() && order.len() > limit) {
            let kept = keep_top(order.clone(), &totals, limit);
            subtitle.push(format!(
                "the {} smallest of {} slices shown together as Other",
                order.len() - kept.len(),
                order.len()
            ));
            kept
        } else {
            order.clone()
        };
        let mut slices: Vec<(String, f64)> = kept
            .iter()
            .map(|&c| (groups.labels[c].clone(), totals[c]))
            .collect();
        let rest: f64 = order
            .iter()
            .filter(|c| !kept.contains(c))
            .map(|&c| totals[c])
            .sum();
        if kept.len() < order.len() {
            slices.push(("Other".into(), rest));
        }
        let what = match self.req.y.first() {
            Some(y) => y.clone(),
            None => "Rows".into(),
        };
        Ok(Plot {
            chart: ChartType::Pie,
            title: self.label_or(&self.req.title, capitalised(&format!("{what} by {x_name}"))),
            subtitle: subtitle.join(" · "),
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, what),
            body: Body::Pie { slices },
            notes: std::mem::take(&mut self.notes),
        })
    }

    fn heatmap(&mut self) -> Result<Plot, String> {
        let x_name = self.x_name("whose values become the heatmap's columns")?;
        self.check_series_args()?;
        if self.req.top_n.is_some() {
            return Err(
                "top_n does not apply to a heatmap; filter the rows with Python first".into(),
            );
        }
        if self.req.group_by.is_none() && self.req.y.len() < 2 {
            return Err(
                "a heatmap needs rows as well as columns: give `group_by` (the column \
                        whose values become rows) with one `y` for the cell values, or \
                        several `y` columns (one row each)"
                    .into(),
            );
        }
        let keys = self.keys(x_name)?;
        let groups = group(&keys);
        let values = self.value_columns("the numeric column that colours the cells")?;
        let agg = self.aggregate();
        let (names, series_of_row, value_of_row) = self.series_layout(&values)?;
        let mut cells = vec![vec![None::<Acc>; groups.labels.len()]; names.len()];
        let mut skipped = 0;
        let mut combined = false;
        for row in 0..self.table.rows.len() {
            let Some(c) = groups.of_row[row] else {
                skipped += 1;
                continue;
            };
            for (s, v) in series_of_row(row).into_iter().zip(value_of_row(row)) {
                match (s, v) {
                    (Some(s), Some(v)) => {
                        let acc = cells[s][c].get_or_insert_with(Acc::new);
                        acc.add(v);
                        combined |= acc.n > 1;
                    }
                    _ => skipped += 1,
                }
            }
        }
        self.skipped(skipped, "x, group or value");
        if groups.labels.len() > MAX_HEAT || names.len() > MAX_HEAT {
            return Err(format!(
                "that heatmap would be {} columns by {} rows; at most {MAX_HEAT} each stay \
                 readable, so aggregate or filter the data first",
                groups.labels.len(),
                names.len()
            ));
        }
        let values_of = |c: usize| -> f64 {
            cells
                .iter()
                .filter_map(|row| row[c].map(|a| a.value(agg)))
                .sum()
        };
        let totals: Vec<f64> = (0..groups.labels.len()).map(values_of).collect();
        let order = order_categories(&groups, &keys, &totals, self.req.sort.unwrap_or(Sort::None));
        let grid = cells
            .iter()
            .map(|row| {
                order
                    .iter()
                    .map(|&c| row[c].map(|a| a.value(agg)))
                    .collect()
            })
            .collect();
        let value_name = match self.req.y.as_slice() {
            [] => "Rows".to_string(),
            [one] => one.clone(),
            _ => "Value".into(),
        };
        let subtitle = if combined || self.req.y.is_empty() {
            format!("{} of {value_name} per cell", agg.word())
        } else {
            String::new()
        };
        // Long format names its rows after group_by; wide format's rows are the y columns.
        let (default_title, row_name) = match &self.req.group_by {
            Some(g) => (format!("{value_name} by {x_name} and {g}"), g.clone()),
            None => (format!("{} by {x_name}", self.what()), String::new()),
        };
        Ok(Plot {
            chart: ChartType::Heatmap,
            title: self.label_or(&self.req.title, capitalised(&default_title)),
            subtitle,
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, row_name),
            body: Body::Heatmap {
                columns: order.iter().map(|&c| groups.labels[c].clone()).collect(),
                rows: names,
                cells: grid,
            },
            notes: std::mem::take(&mut self.notes),
        })
    }
}

/// Category indices in the order `sort` asks for. Numbers and dates compare by value, text
/// by its lower-case form.
fn order_categories(groups: &Groups, keys: &Keys, totals: &[f64], sort: Sort) -> Vec<usize> {
    let natural = !matches!(keys, Keys::Text(_));
    let mut order: Vec<usize> = (0..groups.labels.len()).collect();
    let by_x = |a: &usize, b: &usize| {
        if natural {
            groups.values[*a].total_cmp(&groups.values[*b])
        } else {
            groups.labels[*a]
                .to_lowercase()
                .cmp(&groups.labels[*b].to_lowercase())
        }
    };
    match sort {
        Sort::None => {}
        Sort::X => order.sort_by(by_x),
        Sort::XDesc => order.sort_by(|a, b| by_x(b, a)),
        Sort::Asc => order.sort_by(|a, b| totals[*a].total_cmp(&totals[*b])),
        Sort::Desc => order.sort_by(|a, b| totals[*b].total_cmp(&totals[*a])),
    }
    order
}

/// The `n` entries of `order` with the largest totals, in `order`'s order.
fn keep_top(order: Vec<usize>, totals: &[f64], n: usize) -> Vec<usize> {
    let mut by_size = order.clone();
    by_size.sort_by(|a, b| totals[*b].abs().total_cmp(&totals[*a].abs()));
    by_size.truncate(n);
    order.into_iter().filter(|c| by_size.contains(c)).collect()
}

fn clip_list(names: &[&str]) -> String {
    if names.len() <= 6 {
        names.join(", ")
    } else {
        format!("{}, and {} more", names[..5].join(", "), names.len() - 5)
    }
}

/// Bin values for a histogram: `asked` equal bins from min to max, or, by default, about
/// Sturges' number of bins with a round width and edges on multiples of it.
fn bin(values: &[f64], asked: Option<usize>) -> Vec<Bin> {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (start, width, n) = if hi <= lo {
        let w = if lo == 0.0 {
            1.0
        } else {
            nice_width(lo.abs() / 10.0)
        };
        (lo - w / 2.0, w, 1)
    } else if let Some(k) = asked {
        (lo, (hi - lo) / k as f64, k)
    } else {
        let target = ((values.len() as f64).log2().ceil() as usize + 1).clamp(5, 40);
        let w = nice_width((hi - lo) / target as f64);
        let start = (lo / w).floor() * w;
        let mut n = ((hi - start) / w).ceil().max(1.0) as usize;
        // A maximum exactly on an edge belongs to the last bin, not a new one.
        if start + n as f64 * w < hi {
            n += 1;
        }
        (start, w, n)
    };
    let mut bins: Vec<Bin> = (0..n)
        .map(|i| Bin {
            lo: start + i as f64 * width,
            hi: start + (i + 1) as f64 * width,
            count: 0,
        })
        .collect();
    for &v in values {
        let i = (((v - start) / width).floor().max(0.0) as usize).min(n - 1);
        bins[i].count += 1;
    }
    bins
}

/// The round number (1, 2, 2.5 or 5 times a power of ten) nearest above `raw`.
pub fn nice_width(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|w| *w >= raw * 0.999)
        .unwrap_or(10.0 * p)
}

impl Plot {
    /// The plotted numbers as rows of text, header first.
    pub fn table(&self) -> Vec<Vec<String>> {
        match &self.body {
            Body::Xy { x, series } => {
                let mut header = vec![self.x_label.clone()];
                header.extend(series.iter().map(|s| s.name.clone()));
                let xs = distinct_xs(series);
                if self.chart == ChartType::Scatter {
                    let mut rows = vec![vec![
                        self.x_label.clone(),
                        "series".into(),
                        self.y_label.clone(),
                    ]];
                    for s in series {
                        for &(px, py) in &s.points {
                            rows.push(vec![x_text(x, px), s.name.clone(), format_value(py)]);
                        }
                    }
                    return rows;
                }
                let mut rows = vec![header];
                for xv in xs {
                    let mut row = vec![x_text(x, xv)];
                    for s in series {
                        row.push(
                            s.points
                                .iter()
                                .find(|p| p.0 == xv)
                                .map_or(String::new(), |p| format_value(p.1)),
                        );
                    }
                    rows.push(row);
                }
                rows
            }
            Body::Histogram { bins, .. } => {
                let mut rows = vec![vec![format!("{} bin", self.x_label), "count".into()]];
                for b in bins {
                    rows.push(vec![
                        format!("{} to {}", format_value(b.lo), format_value(b.hi)),
                        b.count.to_string(),
                    ]);
                }
                rows
            }
            Body::Pie { slices } => {
                let total: f64 = slices.iter().map(|s| s.1).sum();
                let mut rows = vec![vec![
                    self.x_label.clone(),
                    self.y_label.clone(),
                    "share".into(),
                ]];
                for (name, v) in slices {
                    rows.push(vec![name.clone(), format_value(*v), percent(*v / total)]);
                }
                rows
            }
            Body::Heatmap {
                columns,
                rows: names,
                cells,
            } => {
                let mut rows = vec![
                    std::iter::once(self.y_label.clone())
                        .chain(columns.iter().cloned())
                        .collect::<Vec<_>>(),
                ];
                for (name, row) in names.iter().zip(cells) {
                    rows.push(
                        std::iter::once(name.clone())
                            .chain(row.iter().map(|c| c.map_or(String::new(), format_value)))
                            .collect(),
                    );
                }
                rows
            }
        }
    }

    /// A few lines for the model: what was drawn, and the numbers (cut when long).
    pub fn summary(&self) -> String {
        let table = self.table();
        let line = |row: &Vec<String>| format!("{}\n", row.join(" | "));
        if table.len() <= 31 {
            return table.iter().map(line).collect();
        }
        // The header and first rows, then the last ones.
        let mut out: String = table[..16].iter().map(line).collect();
        out.push_str(&format!("… {} rows not shown …\n", table.len() - 31));
        out.extend(table[table.len() - 15..].iter().map(line));
        out
    }
}

/// Every x value of the series, ascending, each once.
pub fn distinct_xs(series: &[Series]) -> Vec<f64> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs
}

/// An x value as text on the axis's terms.
pub fn x_text(x: &XKind, v: f64) -> String {
    match x {
        XKind::Categories(labels) => labels.get(v as usize).cloned().unwrap_or_default(),
        XKind::Numbers { plain: true } => format!("{}", v as i64),
        XKind::Numbers { plain: false } => format_value(v),
        XKind::Dates(p) => format_date(v, *p),
    }
}

/// A share as a percentage with one decimal: `23.4%`.
pub fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::super::table::parse;
    use super::*;

    const SALES: &str = "month,region,revenue,units\n\
        2024-01,North,100,1\n2024-01,South,50,2\n2024-02,North,120,3\n\
        2024-02,South,,4\n2024-03,North,90,5\n2024-03,East,1000,6\n";

    fn req(chart: ChartType, x: &str, y: &[&str]) -> Request {
        let mut r = Request::new(chart);
        r.x = Some(x.into());
        r.y = y.iter().map(|s| s.to_string()).collect();
        r
    }

    fn run(data: &str, r: &Request) -> Result<Plot, String> {
        prepare(&parse(data, "csv").unwrap(), r, "sales.csv")
    }

    fn series(p: &Plot) -> (&XKind, &[Series]) {
        match &p.body {
            Body::Xy { x, series } => (x, series),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bars_sum_per_month_in_date_order() {
        let p = run(SALES, &req(ChartType::Bar, "month", &["revenue"])).unwrap();
        let (x, s) = series(&p);
        assert_eq!(
            x,
            &XKind::Categories(vec!["2024-01".into(), "2024-02".into(), "2024-03".into()])
        );
        assert_eq!(s[0].points, [(0.0, 150.0), (1.0, 120.0), (2.0, 1090.0)]);
        assert_eq!(p.title, "Revenue by month");
        assert_eq!(p.subtitle, "Sum of revenue per month");
        assert_eq!(p.notes, ["1 row with no value was left out"]);
    }

    #[test]
    fn group_by_makes_series_and_sort_top_n_cut() {
        let mut r = req(ChartType::StackedBar, "region", &["revenue"]);
        r.group_by = Some("month".into());
        r.sort = Some(Sort::Desc);
        r.top_n = Some(2);
        let p = run(SALES, &r).unwrap();
        let (x, s) = series(&p);
        assert_eq!(x, &XKind::Categories(vec!["East".into(), "North".into()]));
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "2024-01");
        assert_eq!(s[0].points, [(1.0, 100.0)]);
        assert!(p.subtitle.contains("Top 2 of 3 by total"), "{}", p.subtitle);
    }

    #[test]
    fn lines_over_dates_are_continuous() {
        let p = run(SALES, &req(ChartType::Line, "month", &["revenue", "units"])).unwrap();
        let (x, s) = series(&p);
        assert_eq!(x, &XKind::Dates(Precision::Month));
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].points.len(), 3);
        assert_eq!(s[1].points[0].1, 3.0);
        let jan = super::super::values::days_from_civil(2024, 1, 1).unwrap() as f64;
        assert_eq!(s[0].points[0], (jan, 150.0));
    }

    #[test]
    fn errors_name_columns_and_values() {
        let e = run(SALES, &req(ChartType::Bar, "month", &["revenu"])).unwrap_err();
        assert!(
            e.contains("no column `revenu`") && e.contains("month, region, revenue, units"),
            "{e}"
        );
        let e = run(SALES, &req(ChartType::Bar, "month", &["region"])).unwrap_err();
        assert!(
            e.contains(
                "column `region` (y) must be numeric, but line 2 of `sales.csv` has `North`"
            ),
            "{e}"
        );
        assert!(e.contains("Numeric columns are: revenue, units"), "{e}");
        let e = run(SALES, &req(ChartType::Scatter, "region", &["units"])).unwrap_err();
        assert!(e.contains("holds text (e.g. `North`)"), "{e}");
        let mut r = req(ChartType::Line, "month", &["revenue", "units"]);
        r.group_by = Some("region".into());
        assert!(run(SALES, &r).unwrap_err().contains("not both"));
        let e = run(SALES, &req(ChartType::Bar, "month", &[])).unwrap_err();
        assert!(e.contains("needs `y`"), "{e}");
    }

    #[test]
    fn counts_pie_and_other() {
        let mut r = req(ChartType::Pie, "region", &[]);
        r.aggregate = Some(Aggregate::Count);
        let p = run(SALES, &r).unwrap();
        let Body::Pie { slices } = &p.body else {
            panic!()
        };
        assert_eq!(slices[0], ("North".to_string(), 3.0));
        assert_eq!(p.subtitle, "Total 6");
        r.top_n = Some(1);
        let p = run(SALES, &r).unwrap();
        let Body::Pie { slices } = &p.body else {
            panic!()
        };
        assert_eq!(
            slices,
            &[("North".to_string(), 3.0), ("Other".to_string(), 3.0)]
        );
        let neg = "k,v\na,5\nb,-1\n";
        assert!(
            run(neg, &req(ChartType::Pie, "k", &["v"]))
                .unwrap_err()
                .contains("negative")
        );
    }

    #[test]
    fn histogram_bins_are_round() {
        let vals: Vec<f64> = (0..100).map(|i| i as f64 * 1.3).collect();
        let bins = bin(&vals, None);
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>(), 100);
        let w = bins[0].hi - bins[0].lo;
        assert_eq!(w, 20.0);
        assert_eq!(bins[0].lo, 0.0);
        assert!(bins.last().unwrap().hi >= 128.7);
        let exact = bin(&[0.0, 10.0], None);
        assert_eq!(exact.iter().map(|b| b.count).sum::<usize>(), 2);
        assert_eq!(bin(&[5.0, 5.0], None).len(), 1);
        assert_eq!(bin(&vals, Some(4)).len(), 4);
    }

    #[test]
    fn heatmap_long_format() {
        let mut r = req(ChartType::Heatmap, "month", &["revenue"]);
        r.group_by = Some("region".into());
        let p = run(SALES, &r).unwrap();
        let Body::Heatmap {
            columns,
            rows,
            cells,
        } = &p.body
        else {
            panic!()
        };
        assert_eq!(columns.len(), 3);
        assert_eq!(rows, &["North", "South", "East"]);
        assert_eq!(cells[0], [Some(100.0), Some(120.0), Some(90.0)]);
        assert_eq!(cells[1], [Some(50.0), None, None]);
        assert!(run(SALES, &req(ChartType::Heatmap, "month", &["revenue"])).is_err());
    }

    #[test]
    fn years_are_plain_numbers() {
        let p = run(
            "year,v\n2020,1\n2021,2\n",
            &req(ChartType::Line, "year", &["v"]),
        )
        .unwrap();
        assert_eq!(series(&p).0, &XKind::Numbers { plain: true });
        assert!(p.table()[1][0] == "2020");
    }
}
