//! Painting a `Scene` as SVG text (each tooltip an SVG `<title>`), and the self-contained
//! HTML page around it: inline SVG, inline CSS, the plotted numbers as a table, no scripts
//! and nothing fetched.

use std::fmt::Write;

use super::font::{Anchor, FAMILY};
use super::scene::{Item, Scene, Shape};

/// Escape text for XML and HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Hover styling shared by the SVG file and the HTML page.
const HOVER_CSS: &str = ".tip:hover{opacity:.8;stroke:#222;stroke-width:1.5}\
                         .hover:hover{fill-opacity:.35}";

/// The scene as an SVG document. `standalone` adds the XML namespace a file needs; inline
/// in HTML it is implied.
pub fn render(scene: &Scene, standalone: bool) -> String {
    let mut s = String::with_capacity(16_384 + scene.items.len() * 120);
    let ns = if standalone {
        " xmlns=\"http://www.w3.org/2000/svg\""
    } else {
        ""
    };
    let _ = write!(
        s,
        "<svg{ns} class=\"manus-chart\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"{title}\" font-family=\"{family}\">\n<title>{title}</title>\n\
         <style>{HOVER_CSS}</style>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
        w = scene.width,
        h = scene.height,
        title = escape(&scene.title),
        family = escape(FAMILY),
    );
    for item in &scene.items {
        item_svg(&mut s, item);
    }
    s.push_str("</svg>\n");
    s
}

fn num(v: f64) -> String {
    let t = format!("{v:.2}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" { "0".into() } else { t.to_string() }
}

fn paint(item: &Item) -> String {
    let mut a = String::new();
    match item.fill {
        _ if item.hover_only => a.push_str(" fill=\"#000000\" fill-opacity=\"0\""),
        Some((c, alpha)) => {
            let _ = write!(a, " fill=\"{}\"", c.hex());
            if alpha < 1.0 {
                let _ = write!(a, " fill-opacity=\"{}\"", num(alpha));
            }
        }
        None => a.push_str(" fill=\"none\""),
    }
    if let Some((c, width)) = item.stroke {
        let _ = write!(
            a,
            " stroke=\"{}\" stroke-width=\"{}\" stroke-linejoin=\"round\" stroke-linecap=\"round\"",
            c.hex(),
            num(width)
        );
    }
    match (&item.tip, item.hover_only) {
        (Some(_), true) => a.push_str(" class=\"hover\""),
        (Some(_), false) => a.push_str(" class=\"tip\""),
        _ => {}
    }
    a
}

fn item_svg(s: &mut String, item: &Item) {
    let attrs = paint(item);
    let open = match &item.shape {
        Shape::Rect { x, y, w, h } => format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"{attrs}",
            num(*x),
            num(*y),
            num(*w),
            num(*h)
        ),
        Shape::Path { points, closed } => {
            let pts: Vec<String> = points
                .iter()
                .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
                .collect();
            let tag = if *closed { "polygon" } else { "polyline" };
            format!("<{tag} points=\"{}\"{attrs}", pts.join(" "))
        }
        Shape::Circle { cx, cy, r } => format!(
            "<circle cx=\"{}\" cy=\"{}\" r=\"{}\"{attrs}",
            num(*cx),
            num(*cy),
            num(*r)
        ),
        Shape::Text(l) => {
            let anchor = match l.anchor {
                Anchor::Start => "start",
                Anchor::Middle => "middle",
                Anchor::End => "end",
            };
            let turn = if l.angle != 0.0 {
                format!(
                    " transform=\"rotate({} {} {})\"",
                    num(-l.angle),
                    num(l.x),
                    num(l.y)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{anchor}\"{turn}{attrs}>{}</text>",
                num(l.x),
                num(l.y),
                num(l.size),
                escape(&l.text)
            );
            return;
        }
    };
    let tag_end = match &item.tip {
        Some(tip) => {
            let tag = match &item.shape {
                Shape::Rect { .. } => "rect",
                Shape::Circle { .. } => "circle",
                Shape::Path { closed: true, .. } => "polygon",
                _ => "polyline",
            };
            format!("><title>{}</title></{tag}>", escape(tip))
        }
        None => "/>".into(),
    };
    s.push_str(&open);
    s.push_str(&tag_end);
    s.push('\n');
}

/// One self-contained HTML page: the chart inline, its numbers in a table below.
pub fn html_page(scene: &Scene, source: &str) -> String {
    let mut table = String::new();
    if let Some((header, rows)) = scene.table.split_first() {
        table.push_str("<details>\n<summary>The plotted numbers</summary>\n<table>\n<thead><tr>");
        for h in header {
            let _ = write!(table, "<th>{}</th>", escape(h));
        }
        table.push_str("</tr></thead>\n<tbody>\n");
        for row in rows {
            table.push_str("<tr>");
            for (i, cell) in row.iter().enumerate() {
                let class = if i > 0 { " class=\"n\"" } else { "" };
                let _ = write!(table, "<td{class}>{}</td>", escape(cell));
            }
            table.push_str("</tr>\n");
        }
        table.push_str("</tbody>\n</table>\n</details>\n");
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>\n{css}\n</style>\n</head>\n<body>\n<figure>\n{svg}\
         <figcaption>Source: {source}. Hover over a mark to see its value.</figcaption>\n\
         </figure>\n{table}</body>\n</html>\n",
        title = escape(&scene.title),
        css = PAGE_CSS,
        svg = render(scene, false),
        source = escape(source),
    )
}

const PAGE_CSS: &str = "body{margin:24px;color:#222;background:#fff;\
font-family:'DejaVu Sans',Verdana,sans-serif;font-size:14px}\
figure{margin:0}svg{max-width:100%;height:auto}\
figcaption{color:#595959;margin:8px 0 16px}\
details{margin-top:8px}summary{cursor:pointer;color:#0072b2}\
table{border-collapse:collapse;margin-top:8px}\
th,td{padding:4px 10px;border-bottom:1px solid #e3e3e3;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}";

#[cfg(test)]
mod tests {
    use super::super::scene::{INK, Item};
    use super::*;

    fn scene() -> Scene {
        Scene {
            width: 200,
            height: 100,
            title: "Sales <&> \"2024\"".into(),
            items: vec![
                Item::rect(10.0, 20.0, 30.0, 40.5)
                    .fill(INK)
                    .tip("Jan: 1,200"),
                Item::text(5.0, 6.0, "a < b", 12.0, Anchor::End).rotate(45.0),
                Item::circle(1.0, 2.0, 3.0).tip("p").hover_only(),
            ],
            table: vec![
                vec!["month".into(), "sales".into()],
                vec!["Jan".into(), "1,200".into()],
            ],
        }
    }

    #[test]
    fn svg_escapes_and_carries_tooltips() {
        let svg = render(&scene(), true);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"manus-chart\""));
        assert!(svg.contains("<title>Sales &lt;&amp;&gt; &quot;2024&quot;</title>"));
        assert!(svg.contains(
            "<rect x=\"10\" y=\"20\" width=\"30\" height=\"40.5\" fill=\"#222222\" \
             class=\"tip\"><title>Jan: 1,200</title></rect>"
        ));
        assert!(svg.contains("transform=\"rotate(-45 5 6)\""));
        assert!(svg.contains(">a &lt; b</text>"));
        assert!(svg.contains("fill-opacity=\"0\" class=\"hover\"><title>p</title></circle>"));
    }

    #[test]
    fn html_is_self_contained() {
        let page = html_page(&scene(), "sales.csv");
        assert!(!page.contains("http") && !page.contains("<script"));
        assert!(page.contains("<td class=\"n\">1,200</td>"));
        assert!(page.contains("Source: sales.csv"));
    }
}
