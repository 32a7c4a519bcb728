//! The one typeface charts use, bundled (DejaVu Sans, licence in `actors/assets`): text
//! widths for layout, and text rasterised at any angle for the PNG renderer. SVG output
//! names the same family, so both formats lay out alike.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, OutlineCurve, Point, point};
use ab_glyph_rasterizer::Rasterizer;

static FONT_BYTES: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

/// The CSS font stack SVG text is set in; DejaVu Sans first, since layout measured it.
pub const FAMILY: &str = "'DejaVu Sans', Verdana, 'Bitstream Vera Sans', sans-serif";

/// Height of capital letters as a share of the font size, for centring text on a point.
pub const CAP_HEIGHT: f64 = 0.73;

fn font() -> &'static FontRef<'static> {
    static FONT: OnceLock<FontRef<'static>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(FONT_BYTES).expect("the bundled font parses"))
}

fn units_per_em() -> f64 {
    f64::from(font().units_per_em().unwrap_or(2048.0))
}

/// Where a text's anchor point sits on it, horizontally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// Each glyph of `text` and where its pen position is, in font units, followed by the
/// total advance.
fn layout(text: &str) -> (Vec<(ab_glyph::GlyphId, f64)>, f64) {
    let f = font();
    let mut glyphs = Vec::with_capacity(text.len());
    let mut pen = 0.0;
    let mut prev = None;
    for c in text.chars() {
        let id = f.glyph_id(c);
        if let Some(p) = prev {
            pen += f64::from(f.kern_unscaled(p, id));
        }
        glyphs.push((id, pen));
        pen += f64::from(f.h_advance_unscaled(id));
        prev = Some(id);
    }
    (glyphs, pen)
}

/// The advance width of `text` set at `size` pixels.
pub fn text_width(text: &str, size: f64) -> f64 {
    layout(text).1 * size / units_per_em()
}

/// `text` cut to at most `max` pixels wide, with an ellipsis when cut.
pub fn fit(text: &str, size: f64, max: f64) -> String {
    if text_width(text, size) <= max {
        return text.to_string();
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let candidate: String = chars.iter().collect::<String>().trim_end().to_string() + "…";
        if text_width(&candidate, size) <= max {
            return candidate;
        }
    }
    "…".into()
}

/// Rasterise `text` with its baseline anchored at (`x`, `y`), turned `angle` degrees
/// counter-clockwise about that point; `plot` gets each covered pixel and its coverage.
pub fn rasterize(
    text: &str,
    size: f64,
    (x, y): (f64, f64),
    anchor: Anchor,
    angle: f64,
    mut plot: impl FnMut(i32, i32, f32),
) {
    let f = font();
    let k = size / units_per_em();
    let shift = match anchor {
        Anchor::Start => 0.0,
        Anchor::Middle => text_width(text, size) / 2.0,
        Anchor::End => text_width(text, size),
    };
    let (sin, cos) = angle.to_radians().sin_cos();
    // Text space (x right, y down from the baseline) to canvas space.
    let place = |tx: f64, ty: f64| -> (f64, f64) {
        let tx = tx - shift;
        (x + tx * cos + ty * sin, y - tx * sin + ty * cos)
    };
    let mut curves: Vec<Vec<(f64, f64)>> = vec![];
    for (id, pen) in layout(text).0 {
        let Some(outline) = f.outline(id) else {
            continue;
        };
        let to_canvas = |p: Point| place((pen + f64::from(p.x)) * k, -f64::from(p.y) * k);
        for curve in &outline.curves {
            curves.push(match curve {
                OutlineCurve::Line(a, b) => vec![to_canvas(*a), to_canvas(*b)],
                OutlineCurve::Quad(a, b, c) => vec![to_canvas(*a), to_canvas(*b), to_canvas(*c)],
                OutlineCurve::Cubic(a, b, c, d) => {
                    vec![to_canvas(*a), to_canvas(*b), to_canvas(*c), to_canvas(*d)]
                }
            });
        }
    }
    let all = curves.iter().flatten();
    let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    for &(px, py) in all {
        x0 = x0.min(px);
        y0 = y0.min(py);
        x1 = x1.max(px);
        y1 = y1.max(py);
    }
    if curves.is_empty() {
        return;
    }
    let (ox, oy) = (x0.floor(), y0.floor());
    let (w, h) = ((x1 - ox).ceil() as usize + 1, (y1 - oy).ceil() as usize + 1);
    let mut r = Rasterizer::new(w, h);
    let p = |&(px, py): &(f64, f64)| point((px - ox) as f32, (py - oy) as f32);
    for c in &curves {
        match c.as_slice() {
            [a, b] => r.draw_line(p(a), p(b)),
            [a, b, c] => r.draw_quad(p(a), p(b), p(c)),
            [a, b, c, d] => r.draw_cubic(p(a), p(b), p(c), p(d)),
            _ => {}
        }
    }
    r.for_each_pixel_2d(|px, py, coverage| {
        if coverage > 0.0 {
            plot(
                ox as i32 + px as i32,
                oy as i32 + py as i32,
                coverage.min(1.0),
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_grow_with_text_and_size() {
        let w = text_width("Revenue", 14.0);
        assert!(w > 40.0 && w < 70.0, "{w}");
        assert!((text_width("Revenue", 28.0) - 2.0 * w).abs() < 1e-6);
        assert_eq!(text_width("", 14.0), 0.0);
        let cut = fit("A rather long category name", 13.0, 80.0);
        assert!(
            cut.ends_with('…') && text_width(&cut, 13.0) <= 80.0,
            "{cut}"
        );
        assert_eq!(fit("short", 13.0, 80.0), "short");
    }

    #[test]
    fn text_is_drawn_above_the_baseline_and_turns() {
        let mut ys = vec![];
        rasterize("H", 20.0, (10.0, 30.0), Anchor::Start, 0.0, |_, y, _| {
            ys.push(y)
        });
        let (top, bottom) = (*ys.iter().min().unwrap(), *ys.iter().max().unwrap());
        // A capital H stands on the baseline and is about CAP_HEIGHT tall.
        assert!((29..=31).contains(&bottom), "{bottom}");
        assert!((30 - top - (20.0 * CAP_HEIGHT) as i32).abs() <= 2, "{top}");
        // Turned 90°, the same text runs upwards from the anchor.
        let mut xs = vec![];
        rasterize(
            "HHHH",
            20.0,
            (50.0, 50.0),
            Anchor::Start,
            90.0,
            |x, y, _| {
                assert!(y <= 51);
                xs.push(x);
            },
        );
        assert!(xs.iter().all(|&x| (34..=51).contains(&x)), "{xs:?}");
    }
}
