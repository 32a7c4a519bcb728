//! The DataAnalysis agent's tools against real files: `data_visualization` draws every chart
//! type from fixture data in PNG, SVG and HTML (the files are checked byte by byte: PNG
//! chunks and size, SVG well-formedness, HTML self-containment), its errors name what is
//! wrong, `data_report` embeds charts in one HTML page and writes markdown beside it, and a
//! scripted flow goes from a CSV made by `[MANUS]` to charts and a report whose numbers
//! match the data. The ignored test regenerates the gallery in docs/charts.

use crate::support;

use std::path::{Path, PathBuf};

use manus_rt::engine::tools::{Tool, ToolCtx, ToolSettings, make_tool};
use serde_json::{Value, json};
use support::scenario::{Scratch, write_chart_fixtures};

fn ctx(workspace: &Path) -> ToolCtx {
    ToolCtx {
        flow_id: "test".into(),
        agent: "data_analysis".into(),
        workspace: workspace.to_path_buf(),
        flow: None,
        sandbox: None,
        browser: None,
        llm: None,
        memory: None,
        step: None,
    }
}

fn tool(name: &str) -> Box<dyn Tool> {
    make_tool(name, &ToolSettings::default()).unwrap_or_else(|| panic!("no tool `{name}`"))
}

async fn call(name: &str, ws: &Path, args: Value) -> Result<String, String> {
    tool(name)
        .call(args, &ctx(ws))
        .await
        .map(|o| o.text)
        .map_err(|e| e.0)
}

async fn ok(name: &str, ws: &Path, args: Value) -> String {
    call(name, ws, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{args} failed: {e}"))
}

async fn refused(name: &str, ws: &Path, args: Value) -> String {
    match call(name, ws, args.clone()).await {
        Ok(out) => panic!("{args} should fail, got: {out}"),
        Err(e) => e,
    }
}

// ─── File checks ───────────────────────────────────────────────────────────────────────

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Walk a PNG's chunks (checking each CRC) and return the IHDR width and height.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    let mut at = 8;
    let mut size = None;
    let mut saw_data = false;
    loop {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let body = &bytes[at + 8..at + 8 + len];
        let crc = u32::from_be_bytes(bytes[at + 8 + len..at + 12 + len].try_into().unwrap());
        assert_eq!(
            crc,
            crc32(&bytes[at + 4..at + 8 + len]),
            "CRC of {:?}",
            kind
        );
        match kind {
            b"IHDR" => {
                let w = u32::from_be_bytes(body[0..4].try_into().unwrap());
                let h = u32::from_be_bytes(body[4..8].try_into().unwrap());
                assert_eq!(body[8], 8, "8 bits per channel");
                size = Some((w, h));
            }
            b"IDAT" => saw_data = true,
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    assert!(saw_data, "the PNG has image data");
    assert_eq!(at + 12, bytes.len(), "nothing after IEND");
    size.expect("an IHDR chunk")
}

/// A small XML well-formedness check: every tag closes in order, attributes are quoted,
/// entities are known. Returns the names of the elements seen, in order.
fn xml_elements(text: &str) -> Vec<String> {
    let mut stack: Vec<String> = vec![];
    let mut seen = vec![];
    let mut rest = text.trim_start();
    if let Some(after) = rest.strip_prefix("<?xml") {
        rest = &after[after.find("?>").expect("the XML declaration ends") + 2..];
    }
    while let Some(open) = rest.find('<') {
        check_text(&rest[..open]);
        rest = &rest[open..];
        let close = rest.find('>').expect("a tag ends");
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack
                .pop()
                .unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(top, name.trim(), "tags close in order");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name: String = tag.chars().take_while(|c| !c.is_whitespace()).collect();
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "tag name `{name}`"
        );
        // Attributes: name="value" pairs only.
        let mut attrs = tag[name.len()..].trim();
        while !attrs.is_empty() {
            let eq = attrs
                .find("=\"")
                .unwrap_or_else(|| panic!("unquoted attribute in <{tag}>"));
            let value_end = attrs[eq + 2..].find('"').expect("attribute value closes") + eq + 2;
            check_text(&attrs[eq + 2..value_end]);
            attrs = attrs[value_end + 1..].trim_start();
        }
        seen.push(name.clone());
        if !self_closing {
            stack.push(name);
        }
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    seen
}

fn check_text(text: &str) {
    assert!(!text.contains('<'), "a stray < in {text:?}");
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        let end = rest[amp..].find(';').expect("an entity ends") + amp;
        let entity = &rest[amp + 1..end];
        assert!(
            ["amp", "lt", "gt", "quot", "#39"].contains(&entity),
            "unknown entity &{entity};"
        );
        rest = &rest[end + 1..];
    }
}

/// The part of an HTML page from its first `<svg` to the matching end.
fn inline_svg(page: &str) -> &str {
    let start = page.find("<svg").expect("an inline <svg>");
    let end = page.rfind("</svg>").expect("the svg closes") + "</svg>".len();
    &page[start..end]
}

fn assert_self_contained(page: &str) {
    let lower = page.to_lowercase();
    for banned in [
        "<script", "http:", "https:", "src=\"//", "url(", "@import", "<link",
    ] {
        assert!(!lower.contains(banned), "the page contains `{banned}`");
    }
}

// ─── Every chart type, every format ────────────────────────────────────────────────────

/// One call per chart type, over the fixture files.
fn gallery() -> Vec<(&'static str, Value)> {
    vec![
        (
            "line",
            json!({"data_path": "data/monthly.csv", "chart_type": "line", "x": "month",
                   "y": "revenue", "group_by": "region", "title": "Monthly revenue by region",
                   "y_label": "Revenue (USD)"}),
        ),
        (
            "bar",
            json!({"data_path": "data/products.csv", "chart_type": "bar", "x": "product",
                   "y": "revenue", "sort": "desc", "top_n": 8,
                   "title": "Best-selling products, 2024", "y_label": "Revenue (USD)"}),
        ),
        (
            "stacked_bar",
            json!({"data_path": "data/monthly.csv", "chart_type": "stacked_bar", "x": "quarter",
                   "y": "revenue", "group_by": "region", "title": "Quarterly revenue by region",
                   "y_label": "Revenue (USD)"}),
        ),
        (
            "pie",
            json!({"data_path": "data/products.csv", "chart_type": "pie", "x": "category",
                   "y": "revenue", "title": "Revenue share by product category"}),
        ),
        (
            "scatter",
            json!({"data_path": "data/campaigns.json", "chart_type": "scatter", "x": "ad_spend",
                   "y": "revenue", "group_by": "channel",
                   "title": "Campaign revenue against ad spend",
                   "x_label": "Ad spend (USD)", "y_label": "Revenue (USD)"}),
        ),
        (
            "area",
            json!({"data_path": "data/monthly.csv", "chart_type": "area", "x": "month",
                   "y": "units", "group_by": "region", "title": "Units sold per month, stacked by region",
                   "y_label": "Units"}),
        ),
        (
            "histogram",
            json!({"data_path": "data/orders.csv", "chart_type": "histogram", "x": "order_value",
                   "title": "Distribution of order values", "x_label": "Order value (USD)",
                   "y_label": "Orders"}),
        ),
        (
            "heatmap",
            json!({"data_path": "data/monthly.csv", "chart_type": "heatmap", "x": "month",
                   "y": "revenue", "group_by": "region", "title": "Revenue by month and region",
                   "x_label": "Month", "y_label": "Region"}),
        ),
    ]
}

#[tokio::test]
async fn every_chart_type_renders_in_every_format() {
    let dir = Scratch::new("charts-all");
    let ws = dir.workspace();
    write_chart_fixtures(&ws);
    for (name, args) in gallery() {
        for format in ["png", "svg", "html"] {
            let mut args = args.clone();
            let path = format!("out/{name}.{format}");
            args["output_path"] = json!(path);
            let text = ok("data_visualization", &ws, args).await;
            assert!(text.starts_with(&format!("Wrote `{path}`")), "{text}");
            let bytes = std::fs::read(ws.join(&path)).unwrap();
            match format {
                "png" => assert_eq!(png_size(&bytes), (1000, 600), "{path}"),
                "svg" => {
                    let svg = String::from_utf8(bytes).unwrap();
                    let elements = xml_elements(&svg);
                    assert_eq!(elements[0], "svg", "{path}");
                    assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
                    assert!(
                        elements.iter().filter(|e| *e == "title").count() > 3,
                        "{path} has tooltips"
                    );
                }
                _ => {
                    let page = String::from_utf8(bytes).unwrap();
                    assert!(page.starts_with("<!DOCTYPE html>"));
                    assert_self_contained(&page);
                    xml_elements(inline_svg(&page));
                    assert!(page.contains("<table>"), "{path} lists its numbers");
                }
            }
        }
    }
}

// ─── What the charts say ────────────────────────────────────────────────────────────────

/// The text of every `<text>` element of an SVG, in order.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()];
            body.replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
        })
        .collect()
}

/// The text of every `<title>` (tooltip) of an SVG, after the chart's own title.
fn svg_tips(svg: &str) -> Vec<String> {
    svg.split("<title>")
        .skip(2)
        .map(|t| t[..t.find("</title>").unwrap()].replace("&amp;", "&"))
        .collect()
}

#[tokio::test]
async fn bars_honour_sort_and_top_n_and_print_their_values() {
    let dir = Scratch::new("charts-bar");
    let ws = dir.workspace();
    write_chart_fixtures(&ws);
    let text = ok(
        "data_visualization",
        &ws,
        json!({"data_path": "data/products.csv", "chart_type": "bar", "x": "product",
               "y": "revenue", "sort": "desc", "top_n": 3, "output": "svg",
               "output_path": "top3.svg"}),
    )
    .await;
    assert!(text.contains("Top 3 of 12 by revenue"), "{text}");
    assert!(text.contains("House blend 1 kg | 221,900"), "{text}");
    let svg = std::fs::read_to_string(ws.join("top3.svg")).unwrap();
    let texts = svg_texts(&svg);
    // Category labels left to right, largest first; nothing past the top 3.
    let order: Vec<usize> = ["House blend 1 kg", "Espresso machine", "Burr grinder"]
        .iter()
        .map(|p| {
            texts
                .iter()
                .position(|t| t == p)
                .unwrap_or_else(|| panic!("no label `{p}` in {texts:?}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.contains("Single origin")),
        "{texts:?}"
    );
    // Values on the bars and thousands separators on the value axis.
    for v in ["221,900", "184,500", "96,200", "250,000"] {
        assert!(texts.iter().any(|t| t == v), "`{v}` in {texts:?}");
    }
    assert_eq!(
        svg_tips(&svg),
        [
            "House blend 1 kg · revenue: 221,900",
            "Espresso machine · revenue: 184,500",
            "Burr grinder · revenue: 96,200"
        ]
    );
    // Ascending by x instead.
    ok(
        "data_visualization",
        &ws,
        json!({"data_path": "data/products.csv", "chart_type": "bar", "x": "product",
               "y": "units", "sort": "x", "output_path": "by-name.svg"}),
    )
    .await;
    let tips = svg_tips(&std::fs::read_to_string(ws.join("by-name.svg")).unwrap());
    assert!(tips[0].starts_with("Burr grinder"), "{tips:?}");
    assert!(tips[11].starts_with("Travel tumbler"), "{tips:?}");
}

#[tokio::test]
async fn dates_make_a_time_axis_and_series_get_a_legend() {
    let dir = Scratch::new("charts-time");
    let ws = dir.workspace();
    write_chart_fixtures(&ws);
    ok(
        "data_visualization",
        &ws,
        json!({"data_path": "data/monthly.csv", "chart_type": "line", "x": "month",
               "y": "revenue", "group_by": "region", "output_path": "lines.svg"}),
    )
    .await;
    let svg = std::fs::read_to_string(ws.join("lines.svg")).unwrap();
    let texts = svg_texts(&svg);
    // Legend entries, one per region.
    for region in ["North", "South", "East", "West"] {
        assert!(texts.iter().any(|t| t == region), "{region} in {texts:?}");
    }
    // Month ticks, in calendar order and not crowded.
    let ticks: Vec<&String> = texts
        .iter()
        .filter(|t| t.len() == 7 && t.as_bytes()[4] == b'-')
        .collect();
    assert!(ticks.len() >= 4 && ticks.len() <= 24, "{ticks:?}");
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
    assert!(ticks[0].starts_with("2023-"), "{ticks:?}");
    // One tooltip per point: 24 months × 4 regions.
    let tips = svg_tips(&svg);
    assert_eq!(tips.len(), 96, "{tips:?}");
    assert!(
        tips.iter().any(|t| t.starts_with("2024-07 · North: ")),
        "{tips:?}"
    );

    // A custom size reaches the PNG header.
    ok(
        "data_visualization",
        &ws,
        json!({"data_path": "data/monthly.csv", "chart_type": "area", "x": "month",
               "y": ["revenue"], "output_path": "small.png", "width": 640, "height": 400}),
    )
    .await;
    assert_eq!(
        png_size(&std::fs::read(ws.join("small.png")).unwrap()),
        (640, 400)
    );
}

/// Write `content` to `name` in the workspace and return the error a bar chart of it gets.
async fn refused_data(ws: &Path, name: &str, content: &str, x: &str, y: &str) -> String {
    std::fs::write(ws.join(name), content).unwrap();
    let args = json!({"data_path": name, "chart_type": "bar", "x": x, "y": y});
    refused("data_visualization", ws, args).await
}

#[tokio::test]
async fn bad_requests_are_refused_with_what_to_do() {
    let dir = Scratch::new("charts-errors");
    let ws = dir.workspace();
    write_chart_fixtures(&ws);
    let sales = std::fs::read_to_string(ws.join("data/monthly.csv")).unwrap();
    // Unknown column: named, with the columns there are.
    let e = refused_data(&ws, "sales.csv", &sales, "month", "revenu").await;
    assert!(e.starts_with("data_visualization: "), "{e}");
    assert!(e.contains("no column `revenu`"), "{e}");
    assert!(e.contains("month, quarter, region, revenue, units"), "{e}");
    // Non-numeric y: the column, the value and where it is.
    let bad = "month,revenue\n2024-01,100\n2024-02,1.5k\n2024-03,90\n";
    let e = refused_data(&ws, "bad.csv", bad, "month", "revenue").await;
    let said = "column `revenue` (y) must be numeric, but line 3 of `bad.csv` has `1.5k`";
    assert!(e.contains(said), "{e}");
    // Empty file, and a header without rows.
    let e = refused_data(&ws, "empty.csv", "", "month", "revenue").await;
    assert!(e.contains("`empty.csv` is empty"), "{e}");
    let e = refused_data(&ws, "header.csv", "month,revenue\n", "month", "revenue").await;
    assert!(
        e.contains("`header.csv` has a header but no data rows"),
        "{e}"
    );
    // A malformed line: its number, and why.
    let ragged = "month,revenue\n2024-01,100\n2024-02,5,7\n";
    let e = refused_data(&ws, "ragged.csv", ragged, "month", "revenue").await;
    let said = "`ragged.csv` line 3 has 3 fields but the header (line 1) has 2";
    assert!(e.contains(said), "{e}");
    let open_quote = "month,note\n2024-01,\"open\n2024-02,x\n";
    let e = refused_data(&ws, "quote.csv", open_quote, "month", "note").await;
    assert!(e.contains("line 2: a quoted field opens here"), "{e}");
    // Missing file, unknown chart type, paths outside the workspace.
    let missing = json!({"data_path": "nope.csv", "chart_type": "bar", "x": "a", "y": "b"});
    let e = refused("data_visualization", &ws, missing).await;
    assert!(e.contains("`nope.csv` does not exist"), "{e}");
    let donut = json!({"data_path": "data/monthly.csv", "chart_type": "donut", "x": "month"});
    let e = refused("data_visualization", &ws, donut).await;
    assert!(
        e.contains("unknown chart_type `donut`") && e.contains("heatmap"),
        "{e}"
    );
    let outside = dir.path().join("secret.csv");
    std::fs::write(&outside, "a,b\n1,2\n").unwrap();
    let args = json!({"data_path": outside, "chart_type": "bar", "x": "a", "y": "b"});
    let e = refused("data_visualization", &ws, args).await;
    assert!(e.contains("outside the workspace"), "{e}");
    let args = json!({"data_path": "data/monthly.csv", "chart_type": "bar", "x": "month",
                      "y": "revenue", "output_path": "../escaped.png"});
    let e = refused("data_visualization", &ws, args).await;
    assert!(e.contains("outside the workspace"), "{e}");
    assert!(!dir.path().join("escaped.png").exists());
}

// ─── Reports ───────────────────────────────────────────────────────────────────────────

#[tokio::test]
async fn a_report_embeds_its_charts_and_writes_markdown_beside_it() {
    let dir = Scratch::new("report");
    let ws = dir.workspace();
    write_chart_fixtures(&ws);
    for (format, chart) in [("svg", "bar"), ("png", "line"), ("html", "pie")] {
        ok(
            "data_visualization",
            &ws,
            json!({"data_path": "data/products.csv", "chart_type": chart, "x": "category",
                   "y": "revenue", "output_path": format!("charts/by-category.{format}")}),
        )
        .await;
    }
    let text = ok(
        "data_report",
        &ws,
        json!({
            "title": "Coffee shop sales, 2024",
            "sections": [
                {"heading": "Summary", "markdown": "Revenue was **830,400 USD**. Coffee made 44.3% of it.\n\n\
                  | Category | Revenue |\n|---|--:|\n| Appliances | 380,800 |\n| Coffee | 368,000 |\n\n<script>alert(1)</script>",
                 "charts": ["charts/by-category.svg", {"path": "charts/by-category.png", "caption": "The same, as PNG"}]},
                {"heading": "Shares", "markdown": "", "charts": ["charts/by-category.html"]}
            ],
            "output_path": "reports/sales.html"
        }),
    )
    .await;
    assert!(
        text.contains("Wrote `reports/sales.html` (2 sections, 3 charts embedded"),
        "{text}"
    );
    assert!(text.contains("`reports/sales.md`"), "{text}");
    let page = std::fs::read_to_string(ws.join("reports/sales.html")).unwrap();
    assert_self_contained(&page);
    assert!(page.contains("<h1>Coffee shop sales, 2024</h1>"));
    assert!(page.contains("<strong>830,400 USD</strong>"));
    assert!(
        page.contains("<td style=\"text-align: right\">380,800</td>"),
        "{page}"
    );
    assert!(
        page.contains("&lt;script&gt;"),
        "raw HTML in markdown is shown, not run"
    );
    // The SVG and HTML charts inline (hover values kept), the PNG as a data URL.
    assert_eq!(page.matches("<svg class=\"manus-chart\"").count(), 2);
    assert!(page.contains("<title>Appliances · revenue: 380,800</title>"));
    assert!(page.contains("<img src=\"data:image/png;base64,iVBORw0KGgo"));
    assert!(page.contains("<figcaption>The same, as PNG</figcaption>"));
    let md = std::fs::read_to_string(ws.join("reports/sales.md")).unwrap();
    assert!(md.starts_with("# Coffee shop sales, 2024\n"), "{md}");
    assert!(
        md.contains("## Summary\n\nRevenue was **830,400 USD**."),
        "{md}"
    );
    assert!(md.contains("](../charts/by-category.svg)"), "{md}");
    assert!(
        md.contains("![The same, as PNG](../charts/by-category.png)"),
        "{md}"
    );
    assert!(
        md.contains("[Interactive chart: by category](../charts/by-category.html)"),
        "{md}"
    );

    // A missing chart is named, and nothing is written.
    let e = refused(
        "data_report",
        &ws,
        json!({"title": "T", "output_path": "r2.html",
               "sections": [{"heading": "A", "markdown": "x", "charts": ["charts/none.png"]}]}),
    )
    .await;
    assert!(
        e.contains("section 1 (\"A\"): `charts/none.png` does not exist"),
        "{e}"
    );
    assert!(!ws.join("r2.html").exists() && !ws.join("r2.md").exists());
    let e = refused("data_report", &ws, json!({"title": "T", "sections": []})).await;
    assert!(e.contains("`sections` is empty"), "{e}");
}

// ─── A flow: data from [MANUS], analysis, charts and report from [DATA_ANALYSIS] ────────

const FLOW_TASK: &str = "Put our first-half 2024 sales in sales.csv, then compute the monthly revenue totals, chart them as a bar and a line chart, and write a short report.";

/// The sales records `[MANUS]` writes: (date, region, product, revenue in cents).
fn sales_rows() -> Vec<(String, &'static str, &'static str, i64)> {
    let products = [
        ("Beans 1 kg", 1850),
        ("Burr grinder", 12_900),
        ("Mugs, set of 4", 2_400),
    ];
    let mut rows = vec![];
    for month in 1..=6usize {
        for (i, day) in [4, 12, 20, 27].into_iter().enumerate() {
            let (product, price) = products[(month + i) % 3];
            let quantity = 3 + (month * 7 + i * 5) % 11;
            rows.push((
                format!("2024-{month:02}-{day:02}"),
                ["North", "South"][i % 2],
                product,
                price * quantity as i64,
            ));
        }
    }
    rows
}

/// Monthly totals in cents, in month order.
fn monthly_totals() -> Vec<(String, i64)> {
    let mut totals: Vec<(String, i64)> = vec![];
    for (date, _, _, cents) in sales_rows() {
        let month = date[..7].to_string();
        match totals.last_mut() {
            Some((m, t)) if *m == month => *t += cents,
            _ => totals.push((month, cents)),
        }
    }
    totals
}

/// A whole number with commas between groups of three digits (n ≥ 0).
fn thousands(n: i64) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).unwrap())
        .collect();
    groups.join(",")
}

/// Cents as the report writes money: `12,345.60`.
fn money(cents: i64) -> String {
    format!("{}.{:02}", thousands(cents / 100), cents % 100)
}

/// Cents as the charts show values: `12,345.6` (trailing zeros dropped).
fn shown(cents: i64) -> String {
    if cents % 100 == 0 {
        thousands(cents / 100)
    } else {
        money(cents).trim_end_matches('0').to_string()
    }
}

fn flow_script() -> Vec<support::llm_server::Reply> {
    use support::llm_server::Reply;
    use support::scenario::{done, plan_reply};
    let rows: Vec<String> = sales_rows()
        .iter()
        .map(|(d, r, p, c)| {
            format!(
                "    (\"{d}\", \"{r}\", \"{p}\", {}.{:02}),",
                c / 100,
                c % 100
            )
        })
        .collect();
    let write_csv = format!(
        "import csv\nrows = [\n{}\n]\nwith open(\"sales.csv\", \"w\", newline=\"\") as f:\n    \
         w = csv.writer(f)\n    w.writerow([\"date\", \"region\", \"product\", \"revenue\"])\n    \
         w.writerows(rows)\nprint(f\"wrote {{len(rows)}} rows\")\n",
        rows.join("\n")
    );
    let analyse = "import pandas as pd\n\
        df = pd.read_csv(\"sales.csv\", parse_dates=[\"date\"])\n\
        print(df.shape)\n\
        monthly = (df.groupby(df[\"date\"].dt.strftime(\"%Y-%m\"))[\"revenue\"].sum().round(2)\n\
                   .rename_axis(\"month\").reset_index())\n\
        monthly.to_csv(\"monthly.csv\", index=False)\n\
        print(monthly.to_string(index=False))\n\
        print(\"total\", round(df[\"revenue\"].sum(), 2))\n";
    let totals = monthly_totals();
    let total: i64 = totals.iter().map(|t| t.1).sum();
    let best = totals.iter().max_by_key(|t| t.1).unwrap();
    let worst = totals.iter().min_by_key(|t| t.1).unwrap();
    let table: String = totals
        .iter()
        .map(|(m, c)| format!("| {m} | {} |\n", money(*c)))
        .collect();
    let findings = format!(
        "Revenue over January to June 2024 was **{} USD**. The strongest month was {} ({} USD), \
         the weakest {} ({} USD).\n\n| Month | Revenue (USD) |\n|---|--:|\n{table}",
        money(total),
        best.0,
        money(best.1),
        worst.0,
        money(worst.1)
    );
    let chart = |kind: &str, path: &str| {
        json!({"data_path": "monthly.csv", "chart_type": kind, "x": "month", "y": "revenue",
               "title": "Monthly revenue, January to June 2024", "y_label": "Revenue (USD)",
               "output_path": path})
    };
    vec![
        plan_reply(&[
            "[MANUS] Write the first-half 2024 sales records to sales.csv",
            "[DATA_ANALYSIS] Compute monthly revenue totals from sales.csv, chart them as a bar and a line chart, and write a report",
        ]),
        Reply::tool("python_execute", json!({"code": write_csv})),
        done("sales.csv holds 24 sales records from January to June 2024."),
        Reply::tool("python_execute", json!({"code": analyse}))
            .with_text("I will load the data with pandas and total it per month."),
        Reply::tool("data_visualization", chart("bar", "charts/monthly-bar.svg")),
        Reply::tool(
            "data_visualization",
            chart("line", "charts/monthly-line.html"),
        ),
        Reply::tool(
            "data_report",
            json!({"title": "Sales, January to June 2024",
                   "sections": [
                       {"heading": "Monthly revenue", "markdown": findings,
                        "charts": ["charts/monthly-bar.svg", "charts/monthly-line.html"]},
                       {"heading": "Method", "markdown": "Totals are the sums of `revenue` per calendar month of `date`, computed with pandas from `sales.csv` (24 rows)."}
                   ],
                   "output_path": "report/sales-report.html"}),
        ),
        done(&format!(
            "Monthly totals are in monthly.csv; revenue was {} USD in all, best in {}. Wrote \
             charts/monthly-bar.svg, charts/monthly-line.html and report/sales-report.html (with \
             report/sales-report.md).",
            money(total),
            best.0
        )),
        Reply::text("The sales data is charted and written up in report/sales-report.html."),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_goes_from_raw_sales_to_charts_and_a_report() {
    use manus_rt::{Config, FlowStatus, Runtime, SubmitOptions};
    use support::llm_server::ScriptedLlm;
    use support::scenario::{config_with, last_tool_text};
    let python = ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .args(["-c", "import pandas"])
                .status()
                .is_ok_and(|s| s.success())
        })
        .expect("this test needs a python3 with pandas: scripts/test.sh installs python3-pandas");

    let server = ScriptedLlm::start().await;
    server.push_all(flow_script());
    let dir = Scratch::new("data-flow");
    let ws = dir.workspace();
    let python = format!("\"{python}\"");
    let overrides = [
        ("agents.data_analysis.max_steps", "8"),
        ("tools.python", python.as_str()),
    ];
    let text = config_with(&server, &ws, &overrides);
    let config = Config::from_text(&text, "test", None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let mut flow = rt
        .submit(FLOW_TASK, SubmitOptions::default())
        .await
        .unwrap();
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(90), async move {
        while flow.next_event().await.is_some() {}
        flow.outcome().await
    })
    .await
    .expect("the flow ends");
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    let steps = &outcome.plan.steps;
    assert_eq!(steps[0].agent.as_deref(), Some("manus"));
    assert_eq!(steps[1].agent.as_deref(), Some("data_analysis"));

    // The analyst holds the chart and report tools and is told about them.
    let reqs = server.requests();
    assert_eq!(
        reqs.len(),
        9,
        "plan, 2 manus calls, 5 analyst calls, summary"
    );
    assert_eq!(
        reqs[3].tool_names(),
        [
            "python_execute",
            "str_replace_editor",
            "data_visualization",
            "data_report",
            "terminate"
        ]
    );
    let system = reqs[3].system_text().unwrap();
    assert!(
        system.contains("data_visualization") && system.contains("data_report"),
        "{system}"
    );

    // pandas' monthly totals match the data [MANUS] wrote, to the cent.
    let totals = monthly_totals();
    let monthly = std::fs::read_to_string(ws.join("monthly.csv")).unwrap();
    let written: Vec<(String, i64)> = monthly
        .lines()
        .skip(1)
        .map(|l| {
            let (m, v) = l.split_once(',').unwrap();
            (
                m.to_string(),
                (v.parse::<f64>().unwrap() * 100.0).round() as i64,
            )
        })
        .collect();
    assert_eq!(written, totals, "{monthly}");
    let printed = last_tool_text(&reqs[4]);
    assert!(
        printed.contains("(24, 4)") && printed.contains("2024-06"),
        "{printed}"
    );

    // The bar chart shows each month with its total, on the bar and in its tooltip.
    let svg = std::fs::read_to_string(ws.join("charts/monthly-bar.svg")).unwrap();
    xml_elements(&svg);
    let texts = svg_texts(&svg);
    let tips = svg_tips(&svg);
    for (month, cents) in &totals {
        assert!(texts.contains(month), "{month} label in {texts:?}");
        assert!(
            texts.contains(&shown(*cents)),
            "{} on a bar in {texts:?}",
            shown(*cents)
        );
        assert!(
            tips.contains(&format!("{month} · revenue: {}", shown(*cents))),
            "{tips:?}"
        );
    }
    // What the tool told the model carries the same numbers.
    let seen = last_tool_text(&reqs[5]);
    assert!(seen.starts_with("Wrote `charts/monthly-bar.svg`"), "{seen}");
    for (month, cents) in &totals {
        assert!(
            seen.contains(&format!("{month} | {}", shown(*cents))),
            "{seen}"
        );
    }

    // The line chart page: self-contained, one tooltip per month, the numbers in its table.
    let page = std::fs::read_to_string(ws.join("charts/monthly-line.html")).unwrap();
    assert_self_contained(&page);
    let tips = svg_tips(inline_svg(&page));
    assert_eq!(tips.len(), totals.len(), "{tips:?}");
    for (month, cents) in &totals {
        assert!(
            tips.contains(&format!("{month} · revenue: {}", shown(*cents))),
            "{tips:?}"
        );
        assert!(
            page.contains(&format!("<td class=\"n\">{}</td>", shown(*cents))),
            "{month}"
        );
    }

    // The report: both charts inline, the findings with the real totals, markdown beside it.
    let report = std::fs::read_to_string(ws.join("report/sales-report.html")).unwrap();
    assert_self_contained(&report);
    assert_eq!(report.matches("<svg class=\"manus-chart\"").count(), 2);
    let total: i64 = totals.iter().map(|t| t.1).sum();
    assert!(
        report.contains(&format!("<strong>{} USD</strong>", money(total))),
        "{report}"
    );
    for (month, cents) in &totals {
        assert!(report.contains(&format!(
            "<td>{month}</td><td style=\"text-align: right\">{}</td>",
            money(*cents)
        )));
    }
    let md = std::fs::read_to_string(ws.join("report/sales-report.md")).unwrap();
    assert!(md.contains(&format!("**{} USD**", money(total))), "{md}");
    assert!(
        md.contains("![monthly bar](../charts/monthly-bar.svg)"),
        "{md}"
    );
    assert!(md.contains("](../charts/monthly-line.html)"), "{md}");
    let told = last_tool_text(&reqs[7]);
    assert!(
        told.contains("Wrote `report/sales-report.html` (2 sections, 2 charts embedded"),
        "{told}"
    );
}

// ─── Regenerating the gallery ──────────────────────────────────────────────────────────

/// Regenerate docs/charts (the README links it):
/// `cargo test --test data_analysis -- --ignored render_docs_gallery`
#[tokio::test]
#[ignore]
async fn render_docs_gallery() {
    let dir = Scratch::new("charts-gallery");
    let ws = dir.workspace();
    write_chart_fixtures(&ws);
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/charts");
    std::fs::create_dir_all(&docs).unwrap();
    let mut index = String::from(
        "# Chart gallery\n\n\
         What `data_visualization` draws, at its default size (1000×600). Each chart comes with \
         the call that drew it, from the fixture data of `tests/support/scenario.rs`. The PNG \
         files are shown; the HTML files are the same charts as self-contained pages with a \
         tooltip on every bar and point (download and open them in a browser).\n\n\
         Regenerate with `cargo test --test data_analysis -- --ignored render_docs_gallery`.\n",
    );
    for (name, args) in gallery() {
        for format in ["png", "html"] {
            let mut args = args.clone();
            args["output_path"] = json!(format!("out/{name}.{format}"));
            ok("data_visualization", &ws, args).await;
            std::fs::copy(
                ws.join(format!("out/{name}.{format}")),
                docs.join(format!("{name}.{format}")),
            )
            .unwrap();
        }
        let mut call = args.clone();
        call["output_path"] = json!(format!("{name}.png"));
        index.push_str(&format!(
            "\n## {name}\n\n![{name} chart]({name}.png)\n\n[As a page with tooltips]({name}.html)\n\n\
             ```json\n{}\n```\n",
            serde_json::to_string_pretty(&call).unwrap()
        ));
    }
    std::fs::write(docs.join("README.md"), index).unwrap();
}
