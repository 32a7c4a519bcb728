//! Heatmaps: a grid of cells coloured on the viridis scale (perceptually even and readable
//! with colour-vision deficiencies), values printed in cells that have room, empty cells
//! in light grey, row labels on the left, column labels below, and a colour bar with ticks.

use super::axis::{self, NumStyle};
use super::font::{Anchor, fit, text_width};
use super::layout::{self, Area, LABEL, TICK};
use super::prepare::Plot;
use super::scene::{INK, Item, MUTED, NO_DATA, Rgb, Scene, WHITE};
use super::values::format_value;

/// Viridis, sampled at ten even stops from low to high.
const VIRIDIS: [Rgb; 10] = [
    Rgb(0x44, 0x01, 0x54),
    Rgb(0x48, 0x28, 0x78),
    Rgb(0x3e, 0x49, 0x89),
    Rgb(0x31, 0x68, 0x8e),
    Rgb(0x26, 0x82, 0x8e),
    Rgb(0x1f, 0x9e, 0x89),
    Rgb(0x35, 0xb7, 0x79),
    Rgb(0x6e, 0xce, 0x58),
    Rgb(0xb5, 0xde, 0x2b),
    Rgb(0xfd, 0xe7, 0x25),
];

/// The viridis colour at `t` in [0, 1].
pub fn viridis(t: f64) -> Rgb {
    let t = t.clamp(0.0, 1.0) * (VIRIDIS.len() - 1) as f64;
    let i = (t.floor() as usize).min(VIRIDIS.len() - 2);
    let f = t - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * f).round() as u8;
    Rgb(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

const CELL_TEXT: f64 = 11.5;
/// Width kept on the right for the colour bar and its labels.
const BAR_ROOM: f64 = 90.0;

pub fn draw(
    sc: &mut Scene,
    plot: &Plot,
    columns: &[String],
    rows: &[String],
    cells: &[Vec<Option<f64>>],
    area: Area,
) {
    let values = cells.iter().flatten().flatten().copied();
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let scale = axis::values(lo, hi, 6, false, NumStyle::default());
    let t_of = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };

    let row_labels: Vec<String> = rows.iter().map(|r| fit(r, TICK, 160.0)).collect();
    let row_w = row_labels
        .iter()
        .map(|r| text_width(r, TICK))
        .fold(0.0, f64::max);
    let y_title = if plot.y_label.is_empty() {
        0.0
    } else {
        LABEL + 12.0
    };
    let x_title = if plot.x_label.is_empty() {
        0.0
    } else {
        LABEL + 10.0
    };
    let left = area.left + y_title + row_w + 10.0;
    let right = area.right - BAR_ROOM;
    let xa = layout::category_axis(columns, right - left);
    let room = area.bottom - x_title - xa.height - area.top;
    let cell_w = (right - left) / columns.len().max(1) as f64;
    let cell_h = (room / rows.len().max(1) as f64).min(160.0);
    let top = area.top;
    let bottom = top + cell_h * rows.len() as f64;

    for (r, row) in cells.iter().enumerate() {
        let y = top + r as f64 * cell_h;
        sc.push(
            Item::text_mid(
                left - 8.0,
                y + cell_h / 2.0,
                row_labels[r].clone(),
                TICK,
                Anchor::End,
            )
            .fill(MUTED),
        );
        for (c, cell) in row.iter().enumerate() {
            let x = left + c as f64 * cell_w;
            let rect = Item::rect(
                x + 0.5,
                y + 0.5,
                (cell_w - 1.0).max(0.5),
                (cell_h - 1.0).max(0.5),
            );
            let Some(v) = *cell else {
                sc.push(
                    rect.fill(NO_DATA)
                        .tip(format!("{} · {}: no data", rows[r], columns[c])),
                );
                continue;
            };
            let colour = viridis(t_of(v));
            sc.push(rect.fill(colour).tip(format!(
                "{} · {}: {}",
                rows[r],
                columns[c],
                format_value(v)
            )));
            let text = format_value(v);
            if text_width(&text, CELL_TEXT) + 6.0 <= cell_w && cell_h >= CELL_TEXT + 6.0 {
                let ink = if colour.luminance() < 0.4 { WHITE } else { INK };
                sc.push(
                    Item::text_mid(
                        x + cell_w / 2.0,
                        y + cell_h / 2.0,
                        text,
                        CELL_TEXT,
                        Anchor::Middle,
                    )
                    .fill(ink),
                );
            }
        }
    }
    layout::x_labels(sc, &xa, |i| left + (i + 0.5) * cell_w, bottom);
    // The x title sits under the column labels, not at the foot of a taller area.
    let used = Area {
        bottom: (bottom + xa.height + x_title).min(area.bottom),
        ..area
    };
    layout::axis_titles(sc, plot, used, (left, right), (top, bottom));

    // The colour bar: the data's range, high at the top, with the round values inside it.
    let bar_x = right + 24.0;
    let (bar_top, bar_bottom) = (top, bottom.max(top + 80.0));
    let steps = 60;
    let span = bar_bottom - bar_top;
    for i in 0..steps {
        let y0 = bar_top + span * i as f64 / steps as f64;
        let t = 1.0 - (i as f64 + 0.5) / steps as f64;
        sc.push(Item::rect(bar_x, y0, 14.0, span / steps as f64 + 0.6).fill(viridis(t)));
    }
    let bar_y = |v: f64| bar_bottom - t_of(v) * span;
    let inside = scale
        .ticks
        .iter()
        .filter(|t| t.at >= lo - 1e-9 && t.at <= hi + 1e-9);
    for t in inside {
        let y = bar_y(t.at);
        sc.push(Item::line(vec![(bar_x + 14.0, y), (bar_x + 18.0, y)]).stroke(MUTED, 1.0));
        sc.push(
            Item::text_mid(bar_x + 21.0, y, t.label.clone(), TICK - 1.0, Anchor::Start).fill(MUTED),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viridis_runs_dark_to_light() {
        assert_eq!(viridis(0.0), VIRIDIS[0]);
        assert_eq!(viridis(1.0), VIRIDIS[9]);
        assert!(viridis(0.2).luminance() < viridis(0.8).luminance());
    }
}
