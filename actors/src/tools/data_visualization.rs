//! The `data_visualization` tool: reads a CSV or JSON data file from the workspace, checks
//! the request against its columns, and writes a chart as PNG, SVG or a self-contained HTML
//! page. The drawing itself is the chart engine's (`chart/`); this file owns the arguments,
//! the paths and what the model is told.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::args::{self, Named, Names};
use super::chart::{self, Aggregate, ChartType, Output, Request, Sort};
use super::files::{Files, Kind, Target};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput};
use crate::llm::ToolSpec;

const NAME: &str = "data_visualization";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(DataVisualization));
const WIDTH_RANGE: (u64, u64) = (320, 4000);
const HEIGHT_RANGE: (u64, u64) = (240, 3000);

/// Charts from data files.
#[derive(Default)]
pub struct DataVisualization;

fn fail(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(format!("{NAME}: {msg}"))
}

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The data file, relative to the workspace: .csv (or .tsv), or .json holding an array of
    /// records ([{"month": "2024-01", "sales": 120}, ...]).
    data_path: String,
    /// line or area for a trend over time or an ordered x; bar to compare categories;
    /// stacked_bar for parts of each category; pie for shares of one whole (few slices);
    /// scatter for the relation of two numeric columns; histogram for the distribution of one
    /// numeric column; heatmap for a value across two categories.
    chart_type: Named<ChartType>,
    /// The column for the horizontal axis: categories, dates or numbers. For pie, the column
    /// naming the slices; for histogram, the numeric column to bin; for heatmap, the column
    /// whose values become the grid's columns.
    x: Option<String>,
    /// The numeric column to plot, or a list of them (one series each). May be left out when
    /// aggregate is "count".
    y: Option<Columns>,
    /// Split the one y column into a series per value of this column (a line, bar segment or
    /// colour per group). For heatmap: the column whose values become the rows.
    group_by: Option<String>,
    /// How rows sharing an x (and group) become one value. Default sum; count counts rows
    /// and needs no y.
    aggregate: Option<Named<Aggregate>>,
    /// Chart title; a plain statement of what it shows. Default: built from the columns.
    title: Option<String>,
    /// Horizontal axis title. Default: the x column's name.
    x_label: Option<String>,
    /// Vertical axis title, with the unit if there is one. Default: the y column's name.
    y_label: Option<String>,
    /// Order of bars, slices or heatmap columns: none (file order; dates and numbers
    /// ascending), x, x_desc, or asc / desc by value. Lines over dates or numbers always run
    /// in x order. Pies default to desc.
    sort: Option<Named<Sort>>,
    /// Keep the n largest: bars (by value), pie slices (the rest become one Other slice), or
    /// the series of a line, area or scatter chart.
    #[schemars(range(min = 1))]
    top_n: Option<i64>,
    /// Histogram only: the number of equal bins. Default: a round bin width chosen from the
    /// data.
    #[schemars(range(min = 1, max = 200))]
    bins: Option<i64>,
    /// File format: png (default), svg, or html (one self-contained page with hover values
    /// and the numbers as a table).
    output: Option<Named<Output>>,
    /// Where to write the chart, relative to the workspace. Default: charts/<title>.<format>.
    output_path: Option<String>,
    /// Width in pixels (default 1000).
    width: Option<i64>,
    /// Height in pixels (default 600).
    height: Option<i64>,
}

/// `y`: one column, or a list of them.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum Columns {
    One(String),
    Many(Vec<String>),
}

/// The chart engine's choices, named as it lists them.
macro_rules! named_by_the_chart_engine {
    ($($choice:ty),*) => {$(
        impl Names for $choice {
            fn names() -> Vec<&'static str> {
                <$choice>::NAMES.to_vec()
            }
            fn parse(name: &str) -> Option<Self> {
                <$choice>::parse(name)
            }
        }
    )*};
}

named_by_the_chart_engine!(ChartType, Sort, Aggregate);

impl Names for Output {
    fn names() -> Vec<&'static str> {
        vec!["png", "svg", "html"]
    }
    fn parse(name: &str) -> Option<Self> {
        Output::parse(name)
    }
}

/// An optional whole number, checked against `range`.
fn count(key: &str, value: Option<i64>, range: (u64, u64)) -> Result<Option<u64>, ToolError> {
    let Some(n) = value else {
        return Ok(None);
    };
    u64::try_from(n)
        .ok()
        .filter(|n| (range.0..=range.1).contains(n))
        .map(Some)
        .ok_or_else(|| {
            fail(format!(
                "`{key}` must be a whole number from {} to {}, got {n}",
                range.0, range.1
            ))
        })
}

/// Lower-case letters, digits and dashes, for a default file name.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out: String = out.trim_end_matches('-').chars().take(60).collect();
    if out.is_empty() { "chart".into() } else { out }
}

/// The data file's kind, from its extension (or its first character when it has none).
fn data_kind(path: &std::path::Path, text: &str) -> Result<String, String> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "csv" | "tsv" | "tab" | "json" | "jsonl" | "ndjson" => Ok(ext),
        "xlsx" | "xls" | "xlsm" | "ods" | "parquet" | "feather" => Err(format!(
            "cannot read .{ext} files; convert it to CSV with Python first, e.g. \
             pd.read_{}(path).to_csv(\"data.csv\", index=False)",
            if ext == "parquet" || ext == "feather" {
                ext.as_str()
            } else {
                "excel"
            }
        )),
        _ if text.trim_start().starts_with(['[', '{']) => Ok("json".into()),
        _ => Ok("csv".into()),
    }
}

impl DataVisualization {
    async fn run(&self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let args: Args = args::parse(NAME, &args)?;
        let data_path = args.data_path.as_str();
        if data_path.trim().is_empty() {
            return Err(fail(
                "`data_path` is empty; give the data file's path in the workspace",
            ));
        }
        let mut req = Request::new(args.chart_type.0);
        req.x = args.x;
        req.y = match args.y {
            None => vec![],
            Some(Columns::One(column)) => vec![column],
            Some(Columns::Many(columns)) => columns,
        };
        req.group_by = args.group_by;
        req.title = args.title;
        req.x_label = args.x_label;
        req.y_label = args.y_label;
        req.sort = args.sort.map(|n| n.0);
        req.aggregate = args.aggregate.map(|n| n.0);
        req.top_n = count("top_n", args.top_n, (1, 1000))?.map(|n| n as usize);
        req.bins = count("bins", args.bins, (1, 200))?.map(|n| n as usize);
        if let Some(w) = count("width", args.width, WIDTH_RANGE)? {
            req.width = w as u32;
        }
        if let Some(h) = count("height", args.height, HEIGHT_RANGE)? {
            req.height = h as u32;
        }
        let output = args.output.map(|n| n.0);
        let output_path = args.output_path.as_deref().map(str::trim);

        let files = Files::new(NAME, ctx);
        let data = files.resolve(data_path).await?;
        let text = read_data(&files, &data).await?;
        let kind =
            data_kind(&data.path, &text).map_err(|e| fail(format!("`{}`: {e}", data.shown)))?;
        let source = data.shown.clone();
        let plan_req = req.clone();
        let plot =
            tokio::task::spawn_blocking(move || chart::plan(&text, &kind, &source, &plan_req))
                .await
                .map_err(|e| fail(format!("reading the data failed: {e}")))?
                .map_err(fail)?;

        let (out_raw, output) = output_target(output_path, output, &plot.title)?;
        let out = files.resolve(&out_raw).await?;
        let (plot_for_draw, source) = (plot.clone(), data.shown.clone());
        let draw_req = req.clone();
        let bytes = tokio::task::spawn_blocking(move || {
            chart::draw(&plot_for_draw, &draw_req, output, &source)
        })
        .await
        .map_err(|e| fail(format!("drawing the chart failed: {e}")))?
        .map_err(|e| fail(format!("`{}`: {e}", out.shown)))?;
        files.write(&out, &bytes).await?;
        Ok(ToolOutput::text(report(&plot, &out.shown, output, &req)))
    }
}

async fn read_data(files: &Files<'_>, data: &Target) -> Result<String, ToolError> {
    match data.kind {
        Kind::Missing => {
            return Err(fail(format!(
                "`{}` does not exist; paths are relative to the workspace (write the data file \
                 first, e.g. with pandas' to_csv)",
                data.shown
            )));
        }
        Kind::Dir => {
            return Err(fail(format!(
                "`{}` is a directory, not a data file",
                data.shown
            )));
        }
        Kind::File(_) => {}
    }
    let bytes = files
        .read(
            data,
            "aggregate or sample it with python_execute first and chart the smaller file",
        )
        .await?;
    // Not UTF-8: read it as Latin-1 (Windows exports), where every byte is a character.
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| e.into_bytes().iter().map(|&b| char::from(b)).collect()))
}

/// Where the chart goes, and in which format: from `output_path`'s extension, `output`, or
/// the defaults (PNG, under `charts/`, named after the title).
fn output_target(
    path: Option<&str>,
    output: Option<Output>,
    title: &str,
) -> Result<(String, Output), ToolError> {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        let output = output.unwrap_or(Output::Png);
        return Ok((
            format!("charts/{}.{}", slug(title), output.extension()),
            output,
        ));
    };
    let given = PathBuf::from(path);
    let ext = given
        .extension()
        .and_then(|e| Output::parse(&e.to_string_lossy()));
    match (ext, output) {
        (Some(e), Some(o)) if e != o => Err(fail(format!(
            "`output_path` `{path}` ends in .{} but `output` is {}; make them agree (or leave \
             `output` out)",
            e.extension(),
            o.extension()
        ))),
        (Some(e), _) => Ok((path.to_string(), e)),
        (None, o) => {
            let o = o.unwrap_or(Output::Png);
            Ok((format!("{path}.{}", o.extension()), o))
        }
    }
}

fn report(plot: &chart::Plot, shown: &str, output: Output, req: &Request) -> String {
    let format = match output {
        Output::Png => format!("PNG, {}×{} px", req.width, req.height),
        Output::Svg => format!("SVG, {}×{}", req.width, req.height),
        Output::Html => "HTML page with the chart inline; hover shows values".into(),
    };
    let mut text = format!(
        "Wrote `{shown}` ({format}): {} chart \"{}\"",
        plot.chart.name().replace('_', " "),
        plot.title
    );
    if !plot.subtitle.is_empty() {
        text.push_str(&format!(" — {}", plot.subtitle));
    }
    text.push_str(".\nPlotted values:\n");
    text.push_str(&plot.summary());
    if !plot.notes.is_empty() {
        text.push_str(&format!("Notes: {}.\n", plot.notes.join("; ")));
    }
    text.push_str("Embed it in a report with data_report (charts: [\"");
    text.push_str(shown);
    text.push_str("\"]).");
    text
}

impl Tool for DataVisualization {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Draw a chart from a CSV or JSON data file in the workspace and save it \
                as PNG, SVG, or a self-contained HTML page where hovering a bar or point shows its \
                value. Chart types: line, area (stacked when there are several series), bar \
                (grouped when there are several series), stacked_bar, pie, scatter, histogram \
                (bins the numbers in `x`) and heatmap (`x` gives the columns, `group_by` the \
                rows, `y` the cell values). Rows that share an x value are combined with \
                `aggregate` (sum unless you say otherwise). Dates on x (YYYY-MM, YYYY-MM-DD) make \
                a time axis. Unknown columns and non-numeric values are reported with what the \
                file does have. The reply lists the plotted numbers, so you can quote them."
                .into(),
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(self.run(args, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_paths_and_formats() {
        assert_eq!(
            output_target(None, None, "Revenue by month").unwrap(),
            ("charts/revenue-by-month.png".to_string(), Output::Png)
        );
        assert_eq!(
            output_target(Some("out/a.svg"), None, "t").unwrap(),
            ("out/a.svg".to_string(), Output::Svg)
        );
        assert_eq!(
            output_target(Some("out/a"), Some(Output::Html), "t").unwrap(),
            ("out/a.html".to_string(), Output::Html)
        );
        let e = output_target(Some("a.png"), Some(Output::Svg), "t").unwrap_err();
        assert!(e.0.contains("make them agree"), "{e}");
        assert_eq!(slug("  Ventes 2024: € par mois!"), "ventes-2024-par-mois");
    }

    #[test]
    fn data_kinds() {
        let p = std::path::Path::new;
        assert_eq!(data_kind(p("a.CSV"), "").unwrap(), "csv");
        assert_eq!(data_kind(p("a.txt"), " [{\"a\":1}]").unwrap(), "json");
        assert!(
            data_kind(p("a.xlsx"), "")
                .unwrap_err()
                .contains("read_excel")
        );
    }
}
