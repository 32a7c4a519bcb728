//! A drawn chart as a list of simple marks (rectangles, paths, circles, text) in pixel
//! coordinates, each optionally carrying a tooltip. Layout happens once, into a `Scene`;
//! the SVG and PNG renderers only paint it, so both formats show the same chart.

use super::font::Anchor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }

    /// Relative luminance (0 black to 1 white), to pick readable text on a fill.
    pub fn luminance(self) -> f64 {
        let lin = |c: u8| {
            let c = f64::from(c) / 255.0;
            if c <= 0.039_28 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * lin(self.0) + 0.7152 * lin(self.1) + 0.0722 * lin(self.2)
    }
}

pub const WHITE: Rgb = Rgb(255, 255, 255);
pub const INK: Rgb = Rgb(0x22, 0x22, 0x22);
pub const MUTED: Rgb = Rgb(0x59, 0x59, 0x59);
pub const AXIS: Rgb = Rgb(0x80, 0x80, 0x80);
pub const GRID: Rgb = Rgb(0xe3, 0xe3, 0xe3);
pub const NO_DATA: Rgb = Rgb(0xf0, 0xf0, 0xf0);

/// The Okabe–Ito palette, readable with every common colour-vision deficiency; ordered so
/// the first colours contrast most on white (its yellow comes late).
pub const PALETTE: [Rgb; 8] = [
    Rgb(0x00, 0x72, 0xB2), // blue
    Rgb(0xE6, 0x9F, 0x00), // orange
    Rgb(0x00, 0x9E, 0x73), // bluish green
    Rgb(0xD5, 0x5E, 0x00), // vermillion
    Rgb(0xCC, 0x79, 0xA7), // reddish purple
    Rgb(0x56, 0xB4, 0xE9), // sky blue
    Rgb(0x00, 0x00, 0x00), // black
    Rgb(0xF0, 0xE4, 0x42), // yellow
];

pub fn series_colour(i: usize) -> Rgb {
    PALETTE[i % PALETTE.len()]
}

#[derive(Debug, Clone)]
pub enum Shape {
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
    },
    /// An open polyline, or a polygon when `closed`.
    Path {
        points: Vec<(f64, f64)>,
        closed: bool,
    },
    Circle {
        cx: f64,
        cy: f64,
        r: f64,
    },
    Text(Label),
}

/// Text whose baseline passes through (`x`, `y`), turned `angle` degrees counter-clockwise
/// about that point.
#[derive(Debug, Clone)]
pub struct Label {
    pub x: f64,
    pub y: f64,
    pub text: String,
    pub size: f64,
    pub anchor: Anchor,
    pub angle: f64,
}

#[derive(Debug, Clone)]
pub struct Item {
    pub shape: Shape,
    /// Fill colour and opacity.
    pub fill: Option<(Rgb, f64)>,
    /// Stroke colour and width.
    pub stroke: Option<(Rgb, f64)>,
    /// Shown on hover in SVG and HTML.
    pub tip: Option<String>,
    /// Invisible, only there to carry a tooltip (dense lines); PNG skips it.
    pub hover_only: bool,
}

impl Item {
    fn new(shape: Shape) -> Item {
        Item {
            shape,
            fill: None,
            stroke: None,
            tip: None,
            hover_only: false,
        }
    }

    pub fn rect(x: f64, y: f64, w: f64, h: f64) -> Item {
        Item::new(Shape::Rect { x, y, w, h })
    }

    pub fn line(points: Vec<(f64, f64)>) -> Item {
        Item::new(Shape::Path {
            points,
            closed: false,
        })
    }

    pub fn polygon(points: Vec<(f64, f64)>) -> Item {
        Item::new(Shape::Path {
            points,
            closed: true,
        })
    }

    pub fn circle(cx: f64, cy: f64, r: f64) -> Item {
        Item::new(Shape::Circle { cx, cy, r })
    }

    /// Text with its baseline at `y`.
    pub fn text(x: f64, y: f64, text: impl Into<String>, size: f64, anchor: Anchor) -> Item {
        Item::new(Shape::Text(Label {
            x,
            y,
            text: text.into(),
            size,
            anchor,
            angle: 0.0,
        }))
        .fill(INK)
    }

    /// Text whose capital letters are centred on `y`.
    pub fn text_mid(x: f64, y: f64, text: impl Into<String>, size: f64, anchor: Anchor) -> Item {
        Item::text(
            x,
            y + size * super::font::CAP_HEIGHT / 2.0,
            text,
            size,
            anchor,
        )
    }

    pub fn fill(mut self, c: Rgb) -> Item {
        self.fill = Some((c, 1.0));
        self
    }

    pub fn fill_alpha(mut self, c: Rgb, alpha: f64) -> Item {
        self.fill = Some((c, alpha));
        self
    }

    pub fn stroke(mut self, c: Rgb, width: f64) -> Item {
        self.stroke = Some((c, width));
        self
    }

    pub fn tip(mut self, tip: impl Into<String>) -> Item {
        self.tip = Some(tip.into());
        self
    }

    pub fn hover_only(mut self) -> Item {
        self.hover_only = true;
        self
    }

    pub fn rotate(mut self, degrees: f64) -> Item {
        if let Shape::Text(label) = &mut self.shape {
            label.angle = degrees;
        }
        self
    }
}

/// A chart ready to paint.
#[derive(Debug, Clone)]
pub struct Scene {
    pub width: u32,
    pub height: u32,
    /// The chart's title, for the SVG's accessible name.
    pub title: String,
    pub items: Vec<Item>,
    /// The plotted numbers as a table (header first), shown under the HTML chart.
    pub table: Vec<Vec<String>>,
}

impl Scene {
    pub fn push(&mut self, item: Item) {
        self.items.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palette_and_luminance() {
        assert_eq!(PALETTE[0].hex(), "#0072b2");
        assert_eq!(series_colour(9), PALETTE[1]);
        assert!(WHITE.luminance() > 0.99 && Rgb(0, 0, 0).luminance() < 0.01);
        // Every palette colour but yellow is clearly darker than white.
        assert!(PALETTE[..7].iter().all(|c| c.luminance() < 0.5));
    }
}
