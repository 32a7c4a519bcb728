//! The data marks of charts with axes: grouped and stacked bars (with their values printed
//! when there is room), lines with point markers, stacked areas, scatter points and
//! histogram bars, each mark with a tooltip saying what it shows.

use std::collections::BTreeMap;

use super::ChartType;
use super::font::{Anchor, text_width};
use super::layout::Frame;
use super::prepare::{Bin, Body, Plot, Series, XKind, distinct_xs, x_text};
use super::scene::{INK, Item, PALETTE, Scene, WHITE, series_colour};
use super::values::format_value;

/// Most categories whose bars get their value printed on them.
const MAX_LABELLED_BARS: usize = 24;
/// Lines with at most this many points per series show a marker on each point.
const MAX_MARKED_POINTS: usize = 60;
/// Above this many points, marks carry no tooltips (the file would be huge).
const MAX_TIPPED_POINTS: usize = 20_000;
/// Size of the values printed on bars.
const VALUE_SIZE: f64 = 12.0;

pub fn draw(sc: &mut Scene, plot: &Plot, f: &Frame) {
    match &plot.body {
        Body::Histogram { bins, .. } => histogram(sc, plot, bins, f),
        Body::Xy { x, series } => match plot.chart {
            ChartType::Bar => bars(sc, plot, x, series, f),
            ChartType::StackedBar => stacked(sc, plot, x, series, f),
            ChartType::Area => areas(sc, x, series, f),
            ChartType::Scatter => scatter(sc, plot, x, series, f),
            _ => lines(sc, x, series, f),
        },
        _ => {}
    }
}

/// Whether bars get their values printed (few enough categories).
pub fn bar_labels(plot: &Plot) -> bool {
    match (&plot.body, plot.chart) {
        (
            Body::Xy {
                x: XKind::Categories(c),
                series,
            },
            ChartType::Bar,
        ) => series.len() == 1 && c.len() <= MAX_LABELLED_BARS,
        (
            Body::Xy {
                x: XKind::Categories(c),
                ..
            },
            ChartType::StackedBar,
        ) => c.len() <= MAX_LABELLED_BARS,
        _ => false,
    }
}

/// The lowest and highest stacked sums over all x.
pub fn stack_extent(series: &[Series]) -> (f64, f64) {
    let mut pos: BTreeMap<u64, f64> = BTreeMap::new();
    let mut neg: BTreeMap<u64, f64> = BTreeMap::new();
    for s in series {
        for &(x, y) in &s.points {
            let side = if y >= 0.0 { &mut pos } else { &mut neg };
            *side.entry(x.to_bits()).or_default() += y;
        }
    }
    let lo = neg.values().copied().fold(0.0, f64::min);
    let hi = pos.values().copied().fold(0.0, f64::max);
    (lo, hi)
}

fn tip(x: &XKind, xv: f64, series: &str, y: f64) -> String {
    format!("{} · {series}: {}", x_text(x, xv), format_value(y))
}

fn bars(sc: &mut Scene, plot: &Plot, x: &XKind, series: &[Series], f: &Frame) {
    let band = f.band();
    let n = series.len().max(1);
    let group = band * if n == 1 { 0.7 } else { 0.82 };
    let bar = group / n as f64;
    let gap = if n > 1 { (bar * 0.12).min(2.0) } else { 0.0 };
    let labels = bar_labels(plot);
    for (si, s) in series.iter().enumerate() {
        let colour = series_colour(si);
        for &(xv, yv) in &s.points {
            let x0 = f.px(xv) - group / 2.0 + si as f64 * bar;
            let (top, bottom) = (f.py(yv.max(0.0)), f.py(yv.min(0.0)));
            let h = (bottom - top).max(0.5);
            sc.push(
                Item::rect(x0 + gap / 2.0, top, bar - gap, h)
                    .fill(colour)
                    .tip(tip(x, xv, &s.name, yv)),
            );
            let text = format_value(yv);
            if labels && text_width(&text, VALUE_SIZE) <= band * 0.96 {
                let y = if yv >= 0.0 {
                    top - 5.0
                } else {
                    bottom + VALUE_SIZE + 3.0
                };
                sc.push(Item::text(x0 + bar / 2.0, y, text, VALUE_SIZE, Anchor::Middle).fill(INK));
            }
        }
    }
}

fn stacked(sc: &mut Scene, plot: &Plot, x: &XKind, series: &[Series], f: &Frame) {
    let band = f.band();
    let w = band * 0.7;
    let XKind::Categories(categories) = x else {
        return;
    };
    let labels = bar_labels(plot);
    for c in 0..categories.len() {
        let xv = c as f64;
        let values: Vec<Option<f64>> = series
            .iter()
            .map(|s| s.points.iter().find(|p| p.0 == xv).map(|p| p.1))
            .collect();
        let total: f64 = values.iter().flatten().sum();
        let (mut pos, mut neg) = (0.0, 0.0);
        let x0 = f.px(xv) - w / 2.0;
        for (si, v) in values.iter().enumerate() {
            let Some(v) = *v else { continue };
            let (from, to) = if v >= 0.0 {
                pos += v;
                (pos - v, pos)
            } else {
                neg += v;
                (neg - v, neg)
            };
            let (top, bottom) = (f.py(from.max(to)), f.py(from.min(to)));
            // A white hairline between segments.
            let h = if bottom - top > 3.0 {
                bottom - top - 1.0
            } else {
                (bottom - top).max(0.5)
            };
            let share = if total != 0.0 {
                format!(" ({:.1}% of {})", v / total * 100.0, format_value(total))
            } else {
                String::new()
            };
            sc.push(
                Item::rect(x0, bottom - h, w, h)
                    .fill(series_colour(si))
                    .tip(format!("{}{share}", tip(x, xv, &series[si].name, v))),
            );
        }
        let text = format_value(total);
        if labels
            && text_width(&text, VALUE_SIZE) <= band * 0.96
            && values.iter().any(Option::is_some)
        {
            let y = f.py(pos) - 5.0;
            sc.push(Item::text(x0 + w / 2.0, y, text, VALUE_SIZE, Anchor::Middle).fill(INK));
        }
    }
}

/// Runs of points to join: on a category axis a missing category breaks the line.
fn runs<'a>(x: &XKind, points: &'a [(f64, f64)]) -> Vec<&'a [(f64, f64)]> {
    if !matches!(x, XKind::Categories(_)) {
        return vec![points];
    }
    let mut out = vec![];
    let mut start = 0;
    for i in 1..=points.len() {
        if i == points.len() || points[i].0 - points[i - 1].0 > 1.0 {
            out.push(&points[start..i]);
            start = i;
        }
    }
    out
}

/// A marker (or, when the line is dense, an invisible hover target) per point.
fn point_marks(
    sc: &mut Scene,
    x: &XKind,
    s: &Series,
    colour: super::scene::Rgb,
    f: &Frame,
    total: usize,
) {
    if total > MAX_TIPPED_POINTS {
        return;
    }
    let dense = s.points.len() > MAX_MARKED_POINTS;
    for &(xv, yv) in &s.points {
        let (cx, cy) = (f.px(xv), f.py(yv));
        let t = tip(x, xv, &s.name, yv);
        sc.push(if dense {
            Item::circle(cx, cy, 5.0).tip(t).hover_only()
        } else {
            Item::circle(cx, cy, 3.5)
                .fill(colour)
                .stroke(WHITE, 1.5)
                .tip(t)
        });
    }
}

fn lines(sc: &mut Scene, x: &XKind, series: &[Series], f: &Frame) {
    let total: usize = series.iter().map(|s| s.points.len()).sum();
    for (si, s) in series.iter().enumerate() {
        let colour = series_colour(si);
        for run in runs(x, &s.points) {
            if run.len() > 1 {
                let pts = run.iter().map(|&(xv, yv)| (f.px(xv), f.py(yv))).collect();
                sc.push(Item::line(pts).stroke(colour, 2.5));
            }
        }
    }
    // Markers after every line, so no line crosses over a marker.
    for (si, s) in series.iter().enumerate() {
        point_marks(sc, x, s, series_colour(si), f, total);
    }
}

fn areas(sc: &mut Scene, x: &XKind, series: &[Series], f: &Frame) {
    let total: usize = series.iter().map(|s| s.points.len()).sum();
    let base = f.py(0.0_f64.clamp(f.y.lo, f.y.hi));
    if series.len() == 1 {
        let s = &series[0];
        let colour = PALETTE[0];
        for run in runs(x, &s.points) {
            let top: Vec<(f64, f64)> = run.iter().map(|&(xv, yv)| (f.px(xv), f.py(yv))).collect();
            let (Some(first), Some(last)) = (top.first(), top.last()) else {
                continue;
            };
            let mut poly = vec![(first.0, base)];
            poly.extend(&top);
            poly.push((last.0, base));
            sc.push(Item::polygon(poly).fill_alpha(colour, 0.25));
            sc.push(Item::line(top).stroke(colour, 2.5));
        }
        point_marks(sc, x, s, colour, f, total);
        return;
    }
    // Stacked: every series on the union of x values, a missing value counting as zero.
    let xs = distinct_xs(series);
    let mut below = vec![0.0; xs.len()];
    let mut tops = vec![];
    for (si, s) in series.iter().enumerate() {
        let values: Vec<f64> = xs
            .iter()
            .map(|xv| s.points.iter().find(|p| p.0 == *xv).map_or(0.0, |p| p.1))
            .collect();
        let above: Vec<f64> = below.iter().zip(&values).map(|(b, v)| b + v).collect();
        let upper: Vec<(f64, f64)> = xs
            .iter()
            .zip(&above)
            .map(|(xv, y)| (f.px(*xv), f.py(*y)))
            .collect();
        let mut poly = upper.clone();
        poly.extend(
            xs.iter()
                .zip(&below)
                .rev()
                .map(|(xv, y)| (f.px(*xv), f.py(*y))),
        );
        let colour = series_colour(si);
        sc.push(Item::polygon(poly).fill_alpha(colour, 0.85));
        sc.push(Item::line(upper.clone()).stroke(colour, 1.5));
        tops.push((si, values, upper));
        below = above;
    }
    if total <= MAX_TIPPED_POINTS {
        for (si, values, upper) in tops {
            for ((xv, v), (px, py)) in xs.iter().zip(values).zip(upper) {
                let t = format!("{} (stacked)", tip(x, *xv, &series[si].name, v));
                sc.push(Item::circle(px, py, 5.0).tip(t).hover_only());
            }
        }
    }
}

fn scatter(sc: &mut Scene, plot: &Plot, x: &XKind, series: &[Series], f: &Frame) {
    let total: usize = series.iter().map(|s| s.points.len()).sum();
    let r = match total {
        0..=500 => 4.0,
        501..=5000 => 3.0,
        _ => 2.0,
    };
    for (si, s) in series.iter().enumerate() {
        let colour = series_colour(si);
        for &(xv, yv) in &s.points {
            let mut item = Item::circle(f.px(xv), f.py(yv), r).fill_alpha(colour, 0.7);
            if total <= MAX_TIPPED_POINTS {
                let who = if series.len() > 1 {
                    format!("{} · ", s.name)
                } else {
                    String::new()
                };
                item = item.tip(format!(
                    "{who}{}: {} · {}: {}",
                    plot.x_label,
                    x_text(x, xv),
                    if series.len() > 1 || plot.y_label.is_empty() {
                        &s.name
                    } else {
                        &plot.y_label
                    },
                    format_value(yv)
                ));
            }
            sc.push(item);
        }
    }
}

fn histogram(sc: &mut Scene, plot: &Plot, bins: &[Bin], f: &Frame) {
    for b in bins {
        let (x0, x1) = (f.px(b.lo), f.px(b.hi));
        let top = f.py(b.count as f64);
        let w = (x1 - x0 - 1.0).max(0.5);
        let rows = if b.count == 1 { "value" } else { "values" };
        sc.push(
            Item::rect(x0 + 0.5, top, w, (f.bottom - top).max(0.0))
                .fill(PALETTE[0])
                .tip(format!(
                    "{} {} to {}: {} {rows}",
                    plot.x_label,
                    format_value(b.lo),
                    format_value(b.hi),
                    format_value(b.count as f64)
                )),
        );
    }
}
