//! The chart engine behind `data_visualization`: what a chart request is, and the path from
//! a data file's text to a finished SVG, HTML page or PNG.
//!
//! `table` parses the file; `prepare` checks the request against the columns and computes
//! what to plot (aggregates, order, top n, bins); `axis`, `layout`, `marks`, `pie` and
//! `heatmap` lay the chart out as a `scene`; `svg` and `png` paint that one scene, so every format shows the same
//! chart. `values` reads and shows numbers and dates; `font` is the bundled typeface.

mod axis;
pub mod font;
mod heatmap;
mod layout;
mod marks;
mod pie;
mod png;
mod prepare;
pub mod scene;
pub mod svg;
pub mod table;
pub mod values;

pub use prepare::Plot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartType {
    Line,
    Bar,
    StackedBar,
    Pie,
    Scatter,
    Area,
    Histogram,
    Heatmap,
}

impl ChartType {
    pub const NAMES: [&'static str; 8] = [
        "line",
        "bar",
        "stacked_bar",
        "pie",
        "scatter",
        "area",
        "histogram",
        "heatmap",
    ];

    pub fn parse(name: &str) -> Option<ChartType> {
        Some(match name {
            "line" => ChartType::Line,
            "bar" => ChartType::Bar,
            "stacked_bar" => ChartType::StackedBar,
            "pie" => ChartType::Pie,
            "scatter" => ChartType::Scatter,
            "area" => ChartType::Area,
            "histogram" => ChartType::Histogram,
            "heatmap" => ChartType::Heatmap,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ChartType::Line => "line",
            ChartType::Bar => "bar",
            ChartType::StackedBar => "stacked_bar",
            ChartType::Pie => "pie",
            ChartType::Scatter => "scatter",
            ChartType::Area => "area",
            ChartType::Histogram => "histogram",
            ChartType::Heatmap => "heatmap",
        }
    }
}

/// The order of categories (bars, slices, heatmap columns) or, for lines, nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// As the data has them: file order for text, ascending for numbers and dates.
    None,
    /// By x, ascending.
    X,
    /// By x, descending.
    XDesc,
    /// By value (the total over all series), ascending.
    Asc,
    /// By value, descending.
    Desc,
}

impl Sort {
    pub const NAMES: [&'static str; 5] = ["none", "x", "x_desc", "asc", "desc"];

    pub fn parse(name: &str) -> Option<Sort> {
        Some(match name {
            "none" => Sort::None,
            "x" | "x_asc" => Sort::X,
            "x_desc" => Sort::XDesc,
            "asc" | "value_asc" => Sort::Asc,
            "desc" | "value_desc" => Sort::Desc,
            _ => return None,
        })
    }
}

/// How rows that share an x (and series) become one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    Sum,
    Mean,
    Count,
    Min,
    Max,
}

impl Aggregate {
    pub const NAMES: [&'static str; 5] = ["sum", "mean", "count", "min", "max"];

    pub fn parse(name: &str) -> Option<Aggregate> {
        Some(match name {
            "sum" => Aggregate::Sum,
            "mean" | "avg" | "average" => Aggregate::Mean,
            "count" => Aggregate::Count,
            "min" => Aggregate::Min,
            "max" => Aggregate::Max,
            _ => return None,
        })
    }

    /// "Sum", "Mean", … for subtitles.
    pub fn word(self) -> &'static str {
        match self {
            Aggregate::Sum => "Sum",
            Aggregate::Mean => "Mean",
            Aggregate::Count => "Count",
            Aggregate::Min => "Minimum",
            Aggregate::Max => "Maximum",
        }
    }
}

/// One chart to draw, as the tool's arguments describe it.
#[derive(Debug, Clone)]
pub struct Request {
    pub chart: ChartType,
    pub x: Option<String>,
    pub y: Vec<String>,
    pub group_by: Option<String>,
    pub title: Option<String>,
    pub x_label: Option<String>,
    pub y_label: Option<String>,
    pub sort: Option<Sort>,
    pub top_n: Option<usize>,
    pub aggregate: Option<Aggregate>,
    pub bins: Option<usize>,
    pub width: u32,
    pub height: u32,
}

impl Request {
    pub fn new(chart: ChartType) -> Request {
        Request {
            chart,
            x: None,
            y: vec![],
            group_by: None,
            title: None,
            x_label: None,
            y_label: None,
            sort: None,
            top_n: None,
            aggregate: None,
            bins: None,
            width: DEFAULT_SIZE.0,
            height: DEFAULT_SIZE.1,
        }
    }
}

pub const DEFAULT_SIZE: (u32, u32) = (1000, 600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Png,
    Svg,
    Html,
}

impl Output {
    pub fn parse(name: &str) -> Option<Output> {
        Some(match name.to_ascii_lowercase().as_str() {
            "png" => Output::Png,
            "svg" => Output::Svg,
            "html" | "htm" => Output::Html,
            _ => return None,
        })
    }

    pub fn extension(self) -> &'static str {
        match self {
            Output::Png => "png",
            Output::Svg => "svg",
            Output::Html => "html",
        }
    }
}

/// Check the request against the data and compute what to plot. `text` is the file's
/// content and `kind` its extension; errors are sentences about the file named `source`.
pub fn plan(text: &str, kind: &str, source: &str, req: &Request) -> Result<Plot, String> {
    let table = table::parse(text, kind).map_err(|e| format!("`{source}` {e}"))?;
    prepare::prepare(&table, req, source)
}

/// Lay the plot out and render it in the chosen format: the bytes of the file.
pub fn draw(plot: &Plot, req: &Request, output: Output, source: &str) -> Result<Vec<u8>, String> {
    let scene = layout::scene(plot, req.width, req.height);
    match output {
        Output::Png => png::encode(&scene),
        Output::Svg => Ok(svg::render(&scene, true).into_bytes()),
        Output::Html => Ok(svg::html_page(&scene, source).into_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Data, chart type, x, y columns and group_by of one case.
    type Case<'a> = (&'a str, ChartType, &'a str, &'a [&'a str], Option<&'a str>);

    /// Small and odd inputs still give finite, paintable charts.
    #[test]
    fn edge_cases_draw_without_nan() {
        let cases: &[Case] = &[
            ("m,v\n2024-01,5\n", ChartType::Line, "m", &["v"], None),
            ("m,v\n2024-01,5\n", ChartType::Bar, "m", &["v"], None),
            ("x,v\n1,5\n", ChartType::Scatter, "x", &["v"], None),
            ("k,v\na,-5\nb,3\nc,-1\n", ChartType::Bar, "k", &["v"], None),
            (
                "k,g,v\na,x,-5\na,y,3\nb,x,2\n",
                ChartType::StackedBar,
                "k",
                &["v"],
                Some("g"),
            ),
            ("k,v\nonly,7\n", ChartType::Pie, "k", &["v"], None),
            ("v\n3\n3\n3\n", ChartType::Histogram, "v", &[], None),
            (
                "year,a,b\n2020,1,2\n2021,3,4\n",
                ChartType::Heatmap,
                "year",
                &["a", "b"],
                None,
            ),
            (
                "year,a,b\n2020,1,2\n2021,3,4\n",
                ChartType::Area,
                "year",
                &["a", "b"],
                None,
            ),
            (
                "d,v\n2024-01-01 10:00,1\n2024-01-01 16:30,2\n",
                ChartType::Line,
                "d",
                &["v"],
                None,
            ),
            ("k,v\na,0\nb,0\n", ChartType::Bar, "k", &["v"], None),
        ];
        for (data, chart, x, y, group) in cases {
            let mut req = Request::new(*chart);
            req.x = Some(x.to_string());
            req.y = y.iter().map(|s| s.to_string()).collect();
            req.group_by = group.map(str::to_string);
            req.width = 400;
            req.height = 300;
            let plot = plan(data, "csv", "t.csv", &req).unwrap_or_else(|e| panic!("{data}: {e}"));
            let scene = layout::scene(&plot, req.width, req.height);
            let svg = svg::render(&scene, true);
            assert!(
                !svg.contains("NaN") && !svg.contains("inf"),
                "{data}\n{svg}"
            );
            assert_eq!(png::paint(&scene).unwrap().len(), 400 * 300 * 3);
        }
    }
}
