//! Pie charts: slices clockwise from twelve o'clock in the order given, white edges between
//! them, the share printed on slices big enough to hold it, and a legend beside the pie
//! with each slice's value and share. An "Other" slice is grey.

use std::f64::consts::{FRAC_PI_2, TAU};

use super::font::{Anchor, fit, text_width};
use super::layout::{Area, LEGEND};
use super::prepare::percent;
use super::scene::{INK, Item, MUTED, Rgb, Scene, WHITE, series_colour};
use super::values::format_value;

const OTHER: Rgb = Rgb(0x99, 0x99, 0x99);
/// Slices smaller than this share carry no printed percentage.
const MIN_LABELLED_SHARE: f64 = 0.04;

pub fn draw(sc: &mut Scene, slices: &[(String, f64)], area: Area) {
    let total: f64 = slices.iter().map(|s| s.1).sum();
    if total <= 0.0 {
        return;
    }
    let colour = |i: usize| {
        if i + 1 == slices.len() && slices[i].0 == "Other" {
            OTHER
        } else {
            series_colour(i)
        }
    };
    // The legend: swatch, name, then value and share in grey.
    let entries: Vec<(String, String)> = slices
        .iter()
        .map(|(name, v)| {
            (
                fit(name, LEGEND, 200.0),
                format!("{} ({})", format_value(*v), percent(v / total)),
            )
        })
        .collect();
    let width =
        |(n, d): &(String, String)| 22.0 + text_width(n, LEGEND) + 10.0 + text_width(d, LEGEND);
    let legend_w = entries
        .iter()
        .map(width)
        .fold(0.0, f64::max)
        .min((area.right - area.left) * 0.5);
    let row_h = LEGEND + 10.0;
    let legend_left = area.right - legend_w;
    let legend_top = (area.top + area.bottom) / 2.0 - row_h * entries.len() as f64 / 2.0;
    for (i, (name, detail)) in entries.iter().enumerate() {
        let mid = legend_top.max(area.top) + row_h * (i as f64 + 0.5);
        sc.push(Item::rect(legend_left, mid - 6.0, 12.0, 12.0).fill(colour(i)));
        sc.push(Item::text_mid(
            legend_left + 20.0,
            mid,
            name.clone(),
            LEGEND,
            Anchor::Start,
        ));
        let x = legend_left + 20.0 + text_width(name, LEGEND) + 10.0;
        sc.push(Item::text_mid(x, mid, detail.clone(), LEGEND, Anchor::Start).fill(MUTED));
    }
    // The pie, centred in the space left of the legend.
    let pie_right = legend_left - 30.0;
    let r = ((pie_right - area.left).min(area.bottom - area.top) / 2.0 - 6.0).max(10.0);
    let (cx, cy) = (
        (area.left + pie_right) / 2.0,
        (area.top + area.bottom) / 2.0,
    );
    let at = |angle: f64, radius: f64| (cx + radius * angle.cos(), cy + radius * angle.sin());
    let mut start = -FRAC_PI_2;
    let mut edges = vec![];
    let mut labels = vec![];
    for (i, (name, v)) in slices.iter().enumerate() {
        let share = v / total;
        let sweep = share * TAU;
        if sweep <= 0.0 {
            continue;
        }
        let steps = (sweep.to_degrees().ceil() as usize).max(2);
        let mut poly = vec![(cx, cy)];
        poly.extend((0..=steps).map(|k| at(start + sweep * k as f64 / steps as f64, r)));
        if share >= 0.999_999 {
            poly.remove(0);
        }
        sc.push(Item::polygon(poly).fill(colour(i)).tip(format!(
            "{name}: {} ({})",
            format_value(*v),
            percent(share)
        )));
        edges.push(start);
        if share >= MIN_LABELLED_SHARE {
            let (lx, ly) = at(start + sweep / 2.0, r * 0.68);
            let ink = if colour(i).luminance() < 0.35 {
                WHITE
            } else {
                INK
            };
            labels.push(Item::text_mid(lx, ly, percent(share), 12.5, Anchor::Middle).fill(ink));
        }
        start += sweep;
    }
    if edges.len() > 1 {
        for angle in edges {
            sc.push(Item::line(vec![(cx, cy), at(angle, r + 0.5)]).stroke(WHITE, 2.0));
        }
    }
    sc.items.extend(labels);
}
