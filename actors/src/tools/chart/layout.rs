//! Laying a chart out: title, subtitle and legend at the top, then, for charts with axes,
//! the plot frame — margins sized to the real tick labels, value ticks with gridlines,
//! category labels turned 45° or thinned when they would overlap, date and number ticks
//! spaced so their labels never touch. Pies and heatmaps take the area below the header.

use super::axis::{self, NumStyle, Scale};
use super::font::{Anchor, CAP_HEIGHT, fit, text_width};
use super::prepare::{Body, Plot, XKind};
use super::scene::{AXIS, GRID, Item, MUTED, Rgb, Scene};
use super::{ChartType, heatmap, marks, pie};

pub const PAD: f64 = 20.0;
pub const TITLE: f64 = 20.0;
pub const SUBTITLE: f64 = 13.5;
/// Axis titles.
pub const LABEL: f64 = 14.0;
/// Tick labels.
pub const TICK: f64 = 12.5;
pub const LEGEND: f64 = 13.0;
/// The longest a category label may be before it is cut with an ellipsis.
const MAX_CATEGORY_LABEL: f64 = 150.0;

/// A rectangle of the canvas.
#[derive(Debug, Clone, Copy)]
pub struct Area {
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
}

/// How x values become pixels.
#[derive(Debug, Clone)]
pub enum XMap {
    /// `n` equal bands; x is the band index.
    Band(usize),
    Linear(Scale),
}

/// The plot rectangle of a chart with axes, and its scales.
#[derive(Debug, Clone)]
pub struct Frame {
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
    pub x: XMap,
    pub y: Scale,
}

impl Frame {
    /// Width of one category band (bars), or of the whole plot for continuous x.
    pub fn band(&self) -> f64 {
        match self.x {
            XMap::Band(n) => (self.right - self.left) / n.max(1) as f64,
            XMap::Linear(_) => self.right - self.left,
        }
    }

    pub fn px(&self, x: f64) -> f64 {
        match &self.x {
            XMap::Band(_) => self.left + (x + 0.5) * self.band(),
            XMap::Linear(s) => s.map(x, self.left, self.right),
        }
    }

    pub fn py(&self, y: f64) -> f64 {
        self.y.map(y, self.bottom, self.top)
    }
}

/// Lay out the whole chart.
pub fn scene(plot: &Plot, width: u32, height: u32) -> Scene {
    let mut sc = Scene {
        width,
        height,
        title: plot.title.clone(),
        items: vec![],
        table: plot.table(),
    };
    let w = f64::from(width);
    let mut top = PAD;
    let baseline = top + TITLE * 0.95;
    sc.push(Item::text(
        PAD,
        baseline,
        fit(&plot.title, TITLE, w - 2.0 * PAD),
        TITLE,
        Anchor::Start,
    ));
    top = baseline + 8.0;
    if !plot.subtitle.is_empty() {
        let baseline = top + SUBTITLE * 1.1;
        sc.push(
            Item::text(
                PAD,
                baseline,
                fit(&plot.subtitle, SUBTITLE, w - 2.0 * PAD),
                SUBTITLE,
                Anchor::Start,
            )
            .fill(MUTED),
        );
        top = baseline + 6.0;
    }
    if let Body::Xy { series, .. } = &plot.body
        && series.len() > 1
    {
        let entries: Vec<(String, Rgb)> = series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), super::scene::series_colour(i)))
            .collect();
        let swatch = match plot.chart {
            ChartType::Line => Swatch::Line,
            ChartType::Scatter => Swatch::Dot,
            _ => Swatch::Box,
        };
        top = legend(&mut sc, &entries, swatch, PAD, top + 6.0, w - PAD);
    }
    let area = Area {
        left: PAD,
        top: top + 14.0,
        right: w - PAD,
        bottom: f64::from(height) - PAD * 0.75,
    };
    match &plot.body {
        Body::Xy { .. } | Body::Histogram { .. } => {
            let frame = frame(&mut sc, plot, area);
            marks::draw(&mut sc, plot, &frame);
            // The zero line goes over the marks, so bars stand on it.
            let zero = if frame.y.lo < 0.0 && frame.y.hi > 0.0 {
                frame.py(0.0)
            } else {
                frame.bottom
            };
            sc.push(Item::line(vec![(frame.left, zero), (frame.right, zero)]).stroke(AXIS, 1.0));
        }
        Body::Pie { slices } => pie::draw(&mut sc, slices, area),
        Body::Heatmap {
            columns,
            rows,
            cells,
        } => heatmap::draw(&mut sc, plot, columns, rows, cells, area),
    }
    sc
}

/// How a legend entry shows its series: like the marks it stands for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Swatch {
    Box,
    Line,
    Dot,
}

/// A legend of coloured swatches in rows across the top; returns the y below it.
fn legend(
    sc: &mut Scene,
    entries: &[(String, Rgb)],
    swatch: Swatch,
    left: f64,
    top: f64,
    right: f64,
) -> f64 {
    let row_h = LEGEND + 8.0;
    let (mut x, mut y) = (left, top);
    for (name, colour) in entries {
        let name = fit(name, LEGEND, 220.0);
        let w = 16.0 + 6.0 + text_width(&name, LEGEND) + 20.0;
        if x + w > right && x > left {
            x = left;
            y += row_h;
        }
        let mid = y + row_h / 2.0;
        match swatch {
            Swatch::Line => {
                sc.push(Item::line(vec![(x, mid), (x + 16.0, mid)]).stroke(*colour, 3.0));
                sc.push(Item::circle(x + 8.0, mid, 3.5).fill(*colour));
            }
            Swatch::Dot => sc.push(Item::circle(x + 8.0, mid, 5.0).fill_alpha(*colour, 0.7)),
            Swatch::Box => sc.push(Item::rect(x + 2.0, mid - 6.0, 12.0, 12.0).fill(*colour)),
        }
        sc.push(Item::text_mid(x + 22.0, mid, name, LEGEND, Anchor::Start));
        x += w;
    }
    y + row_h
}

/// What the value axis must cover, and how its numbers look.
struct YRange {
    min: f64,
    max: f64,
    zero: bool,
    style: NumStyle,
}

fn y_range(plot: &Plot) -> YRange {
    let whole = |v: f64| v.fract() == 0.0;
    match &plot.body {
        Body::Histogram { bins, .. } => YRange {
            min: 0.0,
            max: bins.iter().map(|b| b.count).max().unwrap_or(1) as f64,
            zero: true,
            style: NumStyle {
                plain: false,
                integer: true,
            },
        },
        Body::Xy { series, .. } => {
            let all = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
            let integer = all.clone().all(whole);
            let (mut min, mut max) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            });
            let stacked =
                matches!(plot.chart, ChartType::StackedBar | ChartType::Area) && series.len() > 1;
            if stacked {
                let (lo, hi) = marks::stack_extent(series);
                min = lo;
                max = hi;
            }
            if !min.is_finite() {
                (min, max) = (0.0, 1.0);
            }
            let zero = matches!(
                plot.chart,
                ChartType::Bar | ChartType::StackedBar | ChartType::Area
            );
            if marks::bar_labels(plot) {
                // Headroom for the value printed above (or below) each bar.
                let span = (max.max(0.0) - min.min(0.0)).max(f64::MIN_POSITIVE);
                if max > 0.0 {
                    max += span * 0.05;
                }
                if min < 0.0 {
                    min -= span * 0.05;
                }
            }
            YRange {
                min,
                max,
                zero,
                style: NumStyle {
                    plain: false,
                    integer,
                },
            }
        }
        _ => YRange {
            min: 0.0,
            max: 1.0,
            zero: true,
            style: NumStyle::default(),
        },
    }
}

/// The x axis laid out within [left, right]: its mapping, its labels and the height they
/// take below the plot.
pub struct XAxis {
    pub map: XMap,
    pub labels: Vec<XLabel>,
    pub height: f64,
    /// Tick marks at the labels (continuous axes).
    pub ticks: bool,
}

pub struct XLabel {
    pub at: f64,
    /// One line, or two for a wrapped category label.
    pub lines: Vec<String>,
    pub rotated: bool,
}

fn x_axis(plot: &Plot, left: f64, right: f64) -> XAxis {
    let width = right - left;
    match &plot.body {
        Body::Xy {
            x: XKind::Categories(labels),
            ..
        } => category_axis(labels, width),
        Body::Xy {
            x: XKind::Dates(precision),
            series,
        } => {
            let (min, max) = x_extent(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
            let scale = axis::dates(min, max, *precision, |s| labels_fit(s, width));
            continuous_axis(scale)
        }
        Body::Xy {
            x: XKind::Numbers { plain },
            series,
        } => {
            let (min, max) = x_extent(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
            let style = NumStyle {
                plain: *plain,
                integer: *plain,
            };
            continuous_axis(number_scale(
                min,
                max,
                style,
                width,
                plot.chart == ChartType::Scatter,
            ))
        }
        Body::Histogram { bins, plain } => {
            let min = bins.first().map_or(0.0, |b| b.lo);
            let max = bins.last().map_or(1.0, |b| b.hi);
            let style = NumStyle {
                plain: *plain,
                integer: false,
            };
            continuous_axis(number_scale(min, max, style, width, false))
        }
        _ => category_axis(&[], width),
    }
}

fn x_extent(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
}

/// The most ticks whose labels still have room between them.
fn number_scale(min: f64, max: f64, style: NumStyle, width: f64, pad: bool) -> Scale {
    let (min, max) = if pad && max > min {
        let p = (max - min) * 0.03;
        (min - p, max + p)
    } else {
        (min, max)
    };
    let mut n = ((width / 55.0) as usize).clamp(2, 14);
    loop {
        let scale = axis::values(min, max, n, false, style);
        if n == 2 || labels_fit(&scale, width) {
            return scale;
        }
        n -= 1;
    }
}

/// Whether the tick labels of `scale`, laid along `width` pixels, keep clear of each other.
fn labels_fit(scale: &Scale, width: f64) -> bool {
    let span = scale.hi - scale.lo;
    if scale.ticks.len() < 2 || span <= 0.0 {
        return true;
    }
    let widest = scale
        .ticks
        .iter()
        .map(|t| text_width(&t.label, TICK))
        .fold(0.0, f64::max);
    scale
        .ticks
        .windows(2)
        .all(|w| (w[1].at - w[0].at) / span * width >= widest + 14.0)
}

fn continuous_axis(scale: Scale) -> XAxis {
    let labels = scale
        .ticks
        .iter()
        .map(|t| XLabel {
            at: t.at,
            lines: vec![t.label.clone()],
            rotated: false,
        })
        .collect();
    XAxis {
        map: XMap::Linear(scale),
        labels,
        height: TICK + 14.0,
        ticks: true,
    }
}

/// Category labels: level when they fit their bands (on two lines if need be), else turned
/// 45°, and thinned to every k-th when even turned ones would touch.
pub fn category_axis(labels: &[String], width: f64) -> XAxis {
    let n = labels.len().max(1);
    let band = width / n as f64;
    let line_h = TICK * 1.2;
    let wrapped: Option<Vec<Vec<String>>> =
        labels.iter().map(|l| wrap(l, TICK, band - 8.0)).collect();
    if let Some(lines) = wrapped {
        let rows = lines.iter().map(Vec::len).max().unwrap_or(1) as f64;
        return XAxis {
            map: XMap::Band(n),
            labels: lines
                .into_iter()
                .enumerate()
                .map(|(i, lines)| XLabel {
                    at: i as f64,
                    lines,
                    rotated: false,
                })
                .collect(),
            height: TICK + 14.0 + (rows - 1.0) * line_h,
            ticks: false,
        };
    }
    let texts: Vec<String> = labels
        .iter()
        .map(|l| fit(l, TICK, MAX_CATEGORY_LABEL))
        .collect();
    let widest = texts
        .iter()
        .map(|t| text_width(t, TICK))
        .fold(0.0, f64::max);
    // Turned labels need about 1.6 font sizes between their starts.
    let step = ((TICK * 1.6) / band).ceil().max(1.0) as usize;
    let turned = (widest + TICK * CAP_HEIGHT) * std::f64::consts::FRAC_1_SQRT_2;
    XAxis {
        map: XMap::Band(n),
        labels: texts
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0)
            .map(|(i, text)| XLabel {
                at: i as f64,
                lines: vec![text],
                rotated: true,
            })
            .collect(),
        height: turned + 16.0,
        ticks: false,
    }
}

/// `text` on one line, or broken at a space into two lines of about equal width, if it
/// then fits within `max`.
fn wrap(text: &str, size: f64, max: f64) -> Option<Vec<String>> {
    if text_width(text, size) <= max {
        return Some(vec![text.to_string()]);
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    (1..words.len())
        .map(|k| (words[..k].join(" "), words[k..].join(" ")))
        .map(|(a, b)| {
            let widest = text_width(&a, size).max(text_width(&b, size));
            (widest, vec![a, b])
        })
        .filter(|(widest, _)| *widest <= max)
        .min_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(_, lines)| lines)
}

/// Size the margins to the labels, draw gridlines, ticks and axis titles, and return the
/// plot frame for the marks.
fn frame(sc: &mut Scene, plot: &Plot, area: Area) -> Frame {
    let yr = y_range(plot);
    let y_title = !plot.y_label.is_empty();
    let x_title = !plot.x_label.is_empty();
    let left_base = area.left + if y_title { LABEL + 12.0 } else { 0.0 };
    let x_title_h = if x_title { LABEL + 10.0 } else { 0.0 };
    let mut x_h = TICK + 14.0;
    let mut laid = None;
    for _ in 0..3 {
        let bottom = area.bottom - x_h - x_title_h;
        let plot_h = bottom - area.top;
        let max_ticks = ((plot_h / 48.0) as usize).clamp(3, 10);
        let ys = axis::values(yr.min, yr.max, max_ticks, yr.zero, yr.style);
        let yw = ys
            .ticks
            .iter()
            .map(|t| text_width(&t.label, TICK))
            .fold(0.0, f64::max);
        let left = left_base + yw + 10.0;
        // Room on the right for half of a last, centred tick label.
        let right = area.right - 16.0;
        let xa = x_axis(plot, left, right);
        let settled = (xa.height - x_h).abs() < 0.5;
        x_h = xa.height;
        laid = Some((ys, left, right, bottom, xa));
        if settled {
            break;
        }
    }
    let (ys, left, right, _, xa) = laid.expect("the layout loop runs at least once");
    let bottom = area.bottom - xa.height - x_title_h;
    let f = Frame {
        left,
        right,
        top: area.top,
        bottom,
        x: xa.map.clone(),
        y: ys,
    };
    // Horizontal gridlines and value labels.
    for t in &f.y.ticks {
        let y = f.py(t.at);
        sc.push(Item::line(vec![(f.left, y), (f.right, y)]).stroke(GRID, 1.0));
        sc.push(Item::text_mid(f.left - 8.0, y, &t.label, TICK, Anchor::End).fill(MUTED));
    }
    // Vertical gridlines for scatter charts, where x is read as precisely as y.
    if plot.chart == ChartType::Scatter {
        for l in &xa.labels {
            let x = f.px(l.at);
            sc.push(Item::line(vec![(x, f.top), (x, f.bottom)]).stroke(GRID, 1.0));
        }
    }
    x_labels(sc, &xa, |v| f.px(v), f.bottom);
    axis_titles(sc, plot, area, (f.left, f.right), (f.top, f.bottom));
    f
}

/// The labels of an x axis (and its tick marks) under a plot whose bottom edge is `bottom`.
pub fn x_labels(sc: &mut Scene, xa: &XAxis, px: impl Fn(f64) -> f64, bottom: f64) {
    for l in &xa.labels {
        let x = px(l.at);
        if xa.ticks {
            sc.push(Item::line(vec![(x, bottom), (x, bottom + 5.0)]).stroke(AXIS, 1.0));
        }
        if l.rotated {
            // Anchored at its end, so the label hangs down to the left of its place.
            let half = TICK * CAP_HEIGHT / 2.0 * std::f64::consts::FRAC_1_SQRT_2;
            sc.push(
                Item::text(
                    x + half,
                    bottom + 10.0 + half,
                    &l.lines[0],
                    TICK,
                    Anchor::End,
                )
                .fill(MUTED)
                .rotate(45.0),
            );
            continue;
        }
        for (k, line) in l.lines.iter().enumerate() {
            let half = text_width(line, TICK) / 2.0 + 2.0;
            let x = x.clamp(half, (f64::from(sc.width) - half).max(half));
            let y = bottom + 8.0 + TICK * 0.95 + k as f64 * TICK * 1.2;
            sc.push(Item::text(x, y, line, TICK, Anchor::Middle).fill(MUTED));
        }
    }
}

/// The y title turned up the left edge of `area`, centred on the plot; the x title along
/// the bottom of `area`, centred under the plot.
pub fn axis_titles(
    sc: &mut Scene,
    plot: &Plot,
    area: Area,
    (left, right): (f64, f64),
    (top, bottom): (f64, f64),
) {
    if !plot.y_label.is_empty() {
        let text = fit(&plot.y_label, LABEL, bottom - top);
        sc.push(
            Item::text(
                area.left + LABEL * 0.9,
                (top + bottom) / 2.0,
                text,
                LABEL,
                Anchor::Middle,
            )
            .rotate(90.0),
        );
    }
    if !plot.x_label.is_empty() {
        let text = fit(&plot.x_label, LABEL, right - left);
        sc.push(Item::text(
            (left + right) / 2.0,
            area.bottom - 4.0,
            text,
            LABEL,
            Anchor::Middle,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_labels_turn_then_thin() {
        let short: Vec<String> = (1..=5).map(|i| format!("C{i}")).collect();
        let a = category_axis(&short, 800.0);
        assert!(a.labels.iter().all(|l| !l.rotated) && a.labels.len() == 5);
        // Two words that do not fit a band side by side go on two lines.
        let two = vec!["Espresso machine".to_string(), "Burr grinder".into()];
        let a = category_axis(&two, 150.0);
        assert_eq!(a.labels[0].lines, ["Espresso", "machine"]);
        assert!(!a.labels[0].rotated);
        let long: Vec<String> = (1..=30).map(|i| format!("Category number {i}")).collect();
        let a = category_axis(&long, 800.0);
        assert!(a.labels.iter().all(|l| l.rotated) && a.labels.len() == 30);
        assert!(a.height > 60.0);
        let many: Vec<String> = (1..=200).map(|i| format!("Item {i}")).collect();
        let a = category_axis(&many, 800.0);
        assert!(
            a.labels.len() < 200 && a.labels.len() >= 30,
            "{}",
            a.labels.len()
        );
    }

    #[test]
    fn number_ticks_leave_room_for_their_labels() {
        let s = number_scale(0.0, 1_000_000.0, NumStyle::default(), 300.0, false);
        assert!(labels_fit(&s, 300.0));
        assert!(s.ticks.len() >= 2);
    }
}
