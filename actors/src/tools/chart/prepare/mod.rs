//! From a table and a request to what will be plotted: the columns are checked (unknown
//! names and non-numeric values are errors that name them), rows sharing an x are
//! aggregated, categories are ordered and cut to `top_n`, histograms are binned, and
//! everything the reader should know (rows skipped, what a value means) is noted.
//!
//! This file holds what comes out (`Plot` and its parts, and the plot as a table of text)
//! and `prepare`, which hands the request to its chart kind's file: `xy` (line, area, bar,
//! stacked_bar, scatter), `histogram`, `pie` and `heatmap`. They read the table through
//! `columns`, gather rows through `groups`, choose and order what is drawn through `order`,
//! and word titles, labels and notes through `labels`.

mod columns;
mod groups;
mod heatmap;
mod histogram;
mod labels;
mod order;
mod pie;
mod xy;

use super::table::Table;
use super::values::{Precision, format_date, format_value};
use super::{ChartType, Request};

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

    pub(super) const SALES: &str = "month,region,revenue,units\n\
        2024-01,North,100,1\n2024-01,South,50,2\n2024-02,North,120,3\n\
        2024-02,South,,4\n2024-03,North,90,5\n2024-03,East,1000,6\n";

    pub(super) fn req(chart: ChartType, x: &str, y: &[&str]) -> Request {
        let mut r = Request::new(chart);
        r.x = Some(x.into());
        r.y = y.iter().map(|s| s.to_string()).collect();
        r
    }

    pub(super) fn run(data: &str, r: &Request) -> Result<Plot, String> {
        prepare(&parse(data, "csv").unwrap(), r, "sales.csv")
    }

    pub(super) fn series(p: &Plot) -> (&XKind, &[Series]) {
        match &p.body {
            Body::Xy { x, series } => (x, series),
            other => panic!("{other:?}"),
        }
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
