//! The `data_report` tool: one self-contained HTML report (charts embedded, findings in
//! prose rendered from markdown, nothing fetched when it opens) and the same report as
//! markdown beside it, with the charts linked by relative path.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use pulldown_cmark::{CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::chart::svg::escape;
use super::files::{Files, Kind, Target, image_type};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, args};
use crate::llm::ToolSpec;

const NAME: &str = "data_report";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(DataReport));
/// Marks the SVG charts `data_visualization` writes; those are inlined (with their hover
/// values), other SVG files are embedded as images so their ids cannot clash.
pub const CHART_MARK: &str = "class=\"manus-chart\"";

/// HTML and markdown reports.
#[derive(Default)]
pub struct DataReport;

fn fail(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(format!("{NAME}: {msg}"))
}

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The report's title.
    title: String,
    /// The report's sections, in order.
    sections: Vec<SectionArg>,
    /// Where to write the HTML report, relative to the workspace (the .md goes beside it).
    /// Default: the title as a file name, e.g. monthly-sales.html.
    output_path: Option<String>,
}

// One section, as given. (Plain comments on the types within `Args`: their doc comments
// would reach the schema the model sees.)
#[derive(Deserialize, JsonSchema)]
struct SectionArg {
    /// Section heading.
    heading: String,
    /// The section's text in markdown: findings with their numbers, in prose, lists or
    /// tables.
    #[schemars(required)]
    markdown: Option<String>,
    /// Chart files to show after the text, relative to the workspace; each a path, or {path,
    /// caption}.
    #[schemars(with = "Option<Vec<ChartArg>>")]
    charts: Option<Charts>,
}

/// A section's charts: a list, or one path on its own.
#[derive(Deserialize)]
#[serde(untagged)]
enum Charts {
    One(String),
    Many(Vec<ChartArg>),
}

// One chart of a section, as given.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum ChartArg {
    Path(String),
    Captioned {
        path: String,
        caption: Option<String>,
    },
}

/// One chart of a section.
struct ChartRef {
    path: String,
    caption: Option<String>,
}

impl From<ChartArg> for ChartRef {
    fn from(arg: ChartArg) -> Self {
        match arg {
            ChartArg::Path(path) => ChartRef {
                path,
                caption: None,
            },
            ChartArg::Captioned { path, caption } => ChartRef { path, caption },
        }
    }
}

/// One section, checked.
struct Section {
    heading: String,
    markdown: String,
    charts: Vec<ChartRef>,
}

/// A chart read from disk and ready to place.
struct Embedded {
    /// The HTML for the report (inline SVG or an `<img>` with a data URL).
    html: String,
    /// The resolved file, for the markdown's relative link.
    path: PathBuf,
    /// Shown to a reader of the markdown.
    label: String,
    /// An interactive page rather than an image (linked, not shown, in markdown).
    page: bool,
}

/// The sections as given, checked: at least one, and each with something to show.
fn sections(given: Vec<SectionArg>) -> Result<Vec<Section>, ToolError> {
    if given.is_empty() {
        return Err(fail(
            "`sections` is empty; give at least one {heading, markdown}",
        ));
    }
    given
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let heading = s.heading.trim().to_string();
            let markdown = s.markdown.unwrap_or_default();
            let charts: Vec<ChartRef> = match s.charts {
                None => vec![],
                Some(Charts::One(path)) => vec![ChartArg::Path(path).into()],
                Some(Charts::Many(list)) => list.into_iter().map(ChartRef::from).collect(),
            };
            if markdown.trim().is_empty() && charts.is_empty() {
                return Err(fail(format!(
                    "section {} (\"{heading}\") has neither markdown nor charts; write its \
                     findings in `markdown`",
                    i + 1
                )));
            }
            Ok(Section {
                heading,
                markdown,
                charts,
            })
        })
        .collect()
}

/// `bytes` as a `data:` URL of type `mime` (standard base64, padded).
fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!("data:{mime};base64,{}", STANDARD.encode(bytes))
}

/// Read a workspace file for embedding, with errors that say which file and section.
async fn read_embed(
    files: &Files<'_>,
    raw: &str,
    place: &str,
) -> Result<(Target, Vec<u8>), ToolError> {
    let target = files.resolve(raw).await?;
    match target.kind {
        Kind::Missing => {
            return Err(fail(format!(
                "{place}: `{}` does not exist; draw it first (data_visualization) or fix the \
                 path (paths are relative to the workspace)",
                target.shown
            )));
        }
        Kind::Dir => return Err(fail(format!("{place}: `{}` is not a file", target.shown))),
        Kind::File(_) => {}
    }
    let bytes = files
        .read(&target, &format!("draw it smaller ({place})"))
        .await?;
    Ok((target, bytes))
}

fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

/// A chart file as HTML: our SVG inline (from an .svg or .html chart), other images as
/// data URLs.
async fn embed(files: &Files<'_>, chart: &ChartRef, place: &str) -> Result<Embedded, ToolError> {
    let (target, bytes) = read_embed(files, &chart.path, place).await?;
    let ext = extension(&target.path);
    let text = || String::from_utf8_lossy(&bytes).into_owned();
    let ours = |t: &str| -> Option<String> {
        let start = t.find("<svg")?;
        let end = t.rfind("</svg>")? + "</svg>".len();
        let svg = &t[start..end];
        let first_tag = &svg[..svg.find('>')?];
        first_tag
            .contains(CHART_MARK)
            .then(|| svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
    };
    let alt = chart
        .caption
        .clone()
        .unwrap_or_else(|| target.shown.clone());
    let (html, page) = match ext.as_str() {
        "svg" => match ours(&text()) {
            Some(svg) => (svg, false),
            None => (image_tag(&bytes, "image/svg+xml", &alt), false),
        },
        "html" | "htm" => match ours(&text()) {
            Some(svg) => (svg, true),
            None => {
                return Err(fail(format!(
                    "{place}: `{}` is a web page, not a chart this report can embed; draw the \
                     chart with output \"svg\" or \"png\"",
                    target.shown
                )));
            }
        },
        _ => match image_type(&ext) {
            Some(mime) => (image_tag(&bytes, mime, &alt), false),
            None => {
                return Err(fail(format!(
                    "{place}: `{}` is not a chart or image; embed .png, .svg, .jpg, .gif, \
                     .webp, or an .html chart from data_visualization",
                    target.shown
                )));
            }
        },
    };
    Ok(Embedded {
        html,
        label: chart.caption.clone().unwrap_or_else(|| {
            target
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().replace(['-', '_'], " "))
                .unwrap_or_default()
        }),
        path: target.path,
        page,
    })
}

fn image_tag(bytes: &[u8], mime: &str, alt: &str) -> String {
    format!(
        "<img src=\"{}\" alt=\"{}\">",
        data_url(mime, bytes),
        escape(alt)
    )
}

/// Whether a link or image target points outside the report (a scheme or `//`).
fn is_external(url: &str) -> bool {
    url.starts_with("//")
        || url.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        })
}

/// Image targets in a markdown text that are workspace files.
fn local_images(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, options())
        .filter_map(|e| match e {
            Event::Start(Tag::Image { dest_url, .. }) if !is_external(&dest_url) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .collect()
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH
}

/// Markdown to HTML: headings moved under the section's (its top level becomes h3), raw
/// HTML shown as text, local images embedded from `images` (url → data URL), external
/// images turned into links and links to anything but web, mail or in-page targets dropped.
fn markdown_html(markdown: &str, images: &[(String, String)]) -> String {
    let top = Parser::new_ext(markdown, options())
        .filter_map(|e| match e {
            Event::Start(Tag::Heading { level, .. }) => Some(level as usize),
            _ => None,
        })
        .min()
        .unwrap_or(1);
    let shift = |level: HeadingLevel| -> HeadingLevel {
        match (level as usize + 3).saturating_sub(top).min(6) {
            0..=3 => HeadingLevel::H3,
            4 => HeadingLevel::H4,
            5 => HeadingLevel::H5,
            _ => HeadingLevel::H6,
        }
    };
    let mut external_images = 0usize;
    let events = Parser::new_ext(markdown, options()).map(|e| match e {
        Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
        Event::Start(Tag::Heading {
            level,
            id,
            classes,
            attrs,
        }) => Event::Start(Tag::Heading {
            level: shift(level),
            id,
            classes,
            attrs,
        }),
        Event::End(TagEnd::Heading(level)) => Event::End(TagEnd::Heading(shift(level))),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => match images.iter().find(|(url, _)| *url == *dest_url) {
            Some((_, data)) => Event::Start(Tag::Image {
                link_type,
                dest_url: CowStr::from(data.clone()),
                title,
                id,
            }),
            None => {
                external_images += 1;
                Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                })
            }
        },
        Event::End(TagEnd::Image) if external_images > 0 => {
            external_images -= 1;
            Event::End(TagEnd::Link)
        }
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => {
            let safe = !is_external(&dest_url)
                || ["http:", "https:", "mailto:"]
                    .iter()
                    .any(|s| dest_url.starts_with(s));
            let dest_url = if safe { dest_url } else { CowStr::from("#") };
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            })
        }
        other => other,
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

/// `to` as a path relative to the directory `from`, with `/` separators.
fn relative(from: &Path, to: &Path) -> String {
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".into(); a.len() - common];
    parts.extend(
        b[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// The report's file names: the HTML path given (or derived from the title) and the
/// markdown beside it.
fn output_names(path: Option<&str>, title: &str) -> String {
    let slug: String = {
        let mut s = String::new();
        for c in title.chars().flat_map(char::to_lowercase) {
            if c.is_ascii_alphanumeric() {
                s.push(c);
            } else if !s.is_empty() && !s.ends_with('-') {
                s.push('-');
            }
        }
        let s = s.trim_end_matches('-').chars().take(60).collect::<String>();
        if s.is_empty() { "report".into() } else { s }
    };
    match path.map(str::trim).filter(|p| !p.is_empty()) {
        None => format!("{slug}.html"),
        Some(p) => {
            let stem = Path::new(p);
            match extension(stem).as_str() {
                "html" | "htm" => p.to_string(),
                "md" | "markdown" => stem.with_extension("html").to_string_lossy().into_owned(),
                _ => format!("{p}.html"),
            }
        }
    }
}

const CSS: &str = "
:root{color-scheme:light}
body{margin:0;background:#fff;color:#222;font:16px/1.6 'DejaVu Sans','Segoe UI',Roboto,Helvetica,Arial,sans-serif}
main{max-width:1040px;margin:0 auto;padding:32px 24px 64px}
h1{font-size:30px;line-height:1.25;margin:0 0 6px}
h2{font-size:22px;margin:40px 0 8px;padding-bottom:4px;border-bottom:1px solid #e3e3e3}
h3{font-size:18px;margin:24px 0 6px}h4,h5,h6{font-size:16px;margin:20px 0 4px}
.meta{color:#595959;margin:0 0 24px;font-size:14px}
nav ol{margin:0;padding-left:22px}nav{background:#f7f7f7;padding:12px 18px;border-radius:6px}
p,ul,ol{margin:8px 0}
figure{margin:20px 0;text-align:center}
figure svg,figure img{max-width:100%;height:auto}
figcaption{color:#595959;font-size:14px;margin-top:6px}
table{border-collapse:collapse;margin:12px 0;font-size:14px}
th,td{padding:5px 12px;border-bottom:1px solid #e3e3e3;text-align:left}
th{border-bottom:2px solid #bbb}td{font-variant-numeric:tabular-nums}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;font-size:90%}
pre{background:#f3f3f3;padding:10px 14px;overflow:auto}pre code{background:none;padding:0}
blockquote{margin:12px 0;padding:4px 16px;border-left:4px solid #0072b2;color:#444}
a{color:#0072b2}
@media print{main{max-width:none}figure{break-inside:avoid}nav{display:none}}
";

impl DataReport {
    async fn run(&self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let args: Args = args::parse(NAME, &args)?;
        let title = args.title.trim().to_string();
        if title.is_empty() {
            return Err(fail("`title` is empty; give the report a title"));
        }
        let sections = sections(args.sections)?;
        let html_raw = output_names(args.output_path.as_deref(), &title);
        let files = Files::new(NAME, ctx);
        let html_target = files.resolve(&html_raw).await?;
        // The markdown twin is a path of its own, checked like any other.
        let md_target = files.beside(&html_target, "md").await?;
        let md_shown = md_target.shown.clone();
        let md_dir = md_target
            .path
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();

        // Everything is read and checked before anything is written.
        let mut body = String::new();
        let mut markdown = format!("# {title}\n");
        let mut n_charts = 0;
        for (i, section) in sections.iter().enumerate() {
            let place = format!("section {} (\"{}\")", i + 1, section.heading);
            let mut images = vec![];
            let mut md_text = section.markdown.trim().to_string();
            for url in local_images(&section.markdown) {
                let (target, bytes) = read_embed(&files, &url, &place).await?;
                let mime = image_type(&extension(&target.path)).ok_or_else(|| {
                    fail(format!(
                        "{place}: `{url}` in the markdown is not an image file"
                    ))
                })?;
                images.push((url.clone(), data_url(mime, &bytes)));
                md_text = md_text.replace(
                    &format!("]({url}"),
                    &format!("]({}", relative(&md_dir, &target.path)),
                );
            }
            let _ = write!(
                body,
                "<section id=\"s{}\">\n<h2>{}</h2>\n{}",
                i + 1,
                escape(&section.heading),
                markdown_html(&section.markdown, &images)
            );
            let _ = write!(markdown, "\n## {}\n\n", section.heading);
            if !md_text.is_empty() {
                markdown.push_str(&md_text);
                markdown.push('\n');
            }
            for chart in &section.charts {
                let e = embed(&files, chart, &place).await?;
                n_charts += 1;
                let caption = chart
                    .caption
                    .as_ref()
                    .map(|c| format!("<figcaption>{}</figcaption>\n", escape(c)))
                    .unwrap_or_default();
                let _ = write!(
                    body,
                    "<figure class=\"chart\">\n{}\n{caption}</figure>\n",
                    e.html
                );
                let link = relative(&md_dir, &e.path);
                if e.page {
                    let _ = write!(markdown, "\n[Interactive chart: {}]({link})\n", e.label);
                } else {
                    let _ = write!(markdown, "\n![{}]({link})\n", e.label);
                }
            }
            body.push_str("</section>\n");
        }
        let nav = if sections.len() >= 3 {
            let items: String = sections
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    format!(
                        "<li><a href=\"#s{}\">{}</a></li>",
                        i + 1,
                        escape(&s.heading)
                    )
                })
                .collect();
            format!("<nav><ol>{items}</ol></nav>\n")
        } else {
            String::new()
        };
        let charts_word = if n_charts == 1 { "chart" } else { "charts" };
        let html = format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{t}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n<header>\n\
             <h1>{t}</h1>\n<p class=\"meta\">{} sections · {n_charts} {charts_word} · \
             hover over a chart's bars or points to see their values</p>\n</header>\n\
             {nav}{body}</main>\n</body>\n</html>\n",
            sections.len(),
            t = escape(&title),
        );

        files.write(&html_target, html.as_bytes()).await?;
        files.write(&md_target, markdown.as_bytes()).await?;
        Ok(ToolOutput::text(format!(
            "Wrote `{}` ({} sections, {n_charts} {charts_word} embedded, {} KB; opens offline, \
             nothing is fetched) and `{md_shown}` beside it (the same text, charts linked by \
             relative path).",
            html_target.shown,
            sections.len(),
            html.len().div_ceil(1024)
        )))
    }
}

impl Tool for DataReport {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Write the analysis up as a report a person can open: one \
                self-contained HTML file (charts embedded, so it can be mailed or opened \
                offline) and the same report as markdown beside it. Each section has a \
                heading, findings in markdown (state the numbers; tables, lists and emphasis \
                work) and the chart files that support them, drawn beforehand with \
                data_visualization (svg or html charts keep their hover values; png works too)."
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
    fn data_urls_carry_standard_padded_base64() {
        assert_eq!(data_url("image/png", b""), "data:image/png;base64,");
        assert_eq!(data_url("image/png", b"f"), "data:image/png;base64,Zg==");
        assert_eq!(data_url("image/gif", b"fo"), "data:image/gif;base64,Zm8=");
        assert_eq!(
            data_url("image/png", b"foobar"),
            "data:image/png;base64,Zm9vYmFy"
        );
        assert_eq!(
            data_url("image/png", &[0xfb, 0xff]),
            "data:image/png;base64,+/8="
        );
    }

    #[test]
    fn markdown_is_tamed() {
        let html = markdown_html(
            "# Findings\n\nRevenue **rose** 12%.\n\n## Detail\n\n| a | b |\n|---|--:|\n| x | 1,200 |\n\n\
             <script>alert(1)</script>\n\n![logo](https://example.org/x.png) [bad](javascript:alert(1))",
            &[],
        );
        assert!(
            html.contains("<h3>Findings</h3>") && html.contains("<h4>Detail</h4>"),
            "{html}"
        );
        assert!(html.contains("<strong>rose</strong>"));
        assert!(html.contains("<table>") && html.contains("1,200"));
        assert!(
            !html.contains("<script") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("<img"),
            "external images become links: {html}"
        );
        assert!(html.contains("href=\"#\""), "{html}");
        let html = markdown_html(
            "![c](charts/a.png)",
            &[("charts/a.png".into(), "data:image/png;base64,AA==".into())],
        );
        assert!(
            html.contains("src=\"data:image/png;base64,AA==\""),
            "{html}"
        );
    }

    #[test]
    fn paths_between_report_and_charts() {
        assert_eq!(
            relative(Path::new("/w/reports"), Path::new("/w/charts/a.png")),
            "../charts/a.png"
        );
        assert_eq!(
            relative(Path::new("/w"), Path::new("/w/charts/a.png")),
            "charts/a.png"
        );
        assert_eq!(
            output_names(None, "Monthly sales, 2024"),
            "monthly-sales-2024.html"
        );
        assert_eq!(output_names(Some("out/r.md"), "t"), "out/r.html");
        assert_eq!(output_names(Some("out/r"), "t"), "out/r.html");
        assert!(is_external("https://x") && is_external("//x") && !is_external("charts/a.png"));
    }
}
