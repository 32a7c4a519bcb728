//! Painting a `Scene` as a PNG image. Shapes are rasterised by plotters' bitmap backend at
//! twice the size and averaged down, which smooths their edges; text is rasterised from
//! the bundled font (`font.rs`), so no system fonts are involved.

use image::ImageEncoder;
use plotters::backend::{BitMapBackend, DrawingBackend};
use plotters::style::{Color, RGBAColor, ShapeStyle};

use super::font;
use super::scene::{Item, Rgb, Scene, Shape};

/// Drawing happens at this many pixels per output pixel, in each direction.
const SUPERSAMPLE: u32 = 2;

/// Render the scene as the bytes of a PNG file.
pub fn encode(scene: &Scene) -> Result<Vec<u8>, String> {
    let pixels = paint(scene)?;
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&pixels, scene.width, scene.height, image::ColorType::Rgb8)
        .map_err(|e| format!("could not encode the PNG image: {e}"))?;
    Ok(png)
}

/// The scene as RGB pixels at its own size.
pub fn paint(scene: &Scene) -> Result<Vec<u8>, String> {
    let k = SUPERSAMPLE;
    let (w, h) = (scene.width * k, scene.height * k);
    let mut big = vec![255u8; (w * h * 3) as usize];
    {
        let mut back = BitMapBackend::with_buffer(&mut big, (w, h));
        for item in &scene.items {
            if !item.hover_only {
                draw(&mut back, item, f64::from(k))
                    .map_err(|e| format!("could not draw the chart: {e}"))?;
            }
        }
        back.present()
            .map_err(|e| format!("could not draw the chart: {e}"))?;
    }
    Ok(shrink(&big, w as usize, h as usize, k as usize))
}

/// Average each `k`×`k` block of an RGB image into one pixel.
fn shrink(big: &[u8], w: usize, h: usize, k: usize) -> Vec<u8> {
    let (sw, sh) = (w / k, h / k);
    let mut out = vec![0u8; sw * sh * 3];
    let n = (k * k) as u32;
    for y in 0..sh {
        for x in 0..sw {
            for c in 0..3 {
                let mut sum = 0u32;
                for dy in 0..k {
                    for dx in 0..k {
                        sum += u32::from(big[((y * k + dy) * w + x * k + dx) * 3 + c]);
                    }
                }
                out[(y * sw + x) * 3 + c] = ((sum + n / 2) / n) as u8;
            }
        }
    }
    out
}

fn colour(c: Rgb, alpha: f64) -> RGBAColor {
    RGBAColor(c.0, c.1, c.2, alpha)
}

fn draw(back: &mut BitMapBackend<'_>, item: &Item, k: f64) -> Result<(), String> {
    let px = |v: f64| (v * k).round() as i32;
    let pt = |(x, y): (f64, f64)| (px(x), px(y));
    let err = |e: &dyn std::fmt::Display| e.to_string();
    match &item.shape {
        Shape::Rect { x, y, w, h } => {
            if let Some((c, a)) = item.fill {
                let style = ShapeStyle::from(colour(c, a)).filled();
                // Both corners inclusive in plotters: stop one pixel short.
                let (x0, y0) = (px(*x), px(*y));
                let (x1, y1) = (px(x + w) - 1, px(y + h) - 1);
                if x1 >= x0 && y1 >= y0 {
                    back.draw_rect((x0, y0), (x1, y1), &style, true)
                        .map_err(|e| err(&e))?;
                }
            }
        }
        Shape::Path { points, closed } => {
            let pts: Vec<(i32, i32)> = points.iter().copied().map(pt).collect();
            if *closed && let Some((c, a)) = item.fill {
                back.fill_polygon(pts.clone(), &colour(c, a))
                    .map_err(|e| err(&e))?;
            }
            if let Some((c, width)) = item.stroke {
                let mut line = pts;
                if *closed && !line.is_empty() {
                    line.push(line[0]);
                }
                let style = ShapeStyle::from(colour(c, 1.0))
                    .stroke_width(((width * k).round() as u32).max(1));
                back.draw_path(line, &style).map_err(|e| err(&e))?;
            }
        }
        Shape::Circle { cx, cy, r } => {
            let centre = pt((*cx, *cy));
            if let Some((c, width)) = item.stroke {
                // An outer ring: a larger disc under the fill.
                let ring = ((r + width) * k).round() as u32;
                back.draw_circle(centre, ring, &colour(c, 1.0), true)
                    .map_err(|e| err(&e))?;
            }
            if let Some((c, a)) = item.fill {
                back.draw_circle(centre, (r * k).round() as u32, &colour(c, a), true)
                    .map_err(|e| err(&e))?;
            }
        }
        Shape::Text(l) => {
            let (c, a) = item.fill.unwrap_or((super::scene::INK, 1.0));
            let mut failed = None;
            font::rasterize(
                &l.text,
                l.size * k,
                (l.x * k, l.y * k),
                l.anchor,
                l.angle,
                |px, py, cover| {
                    let colour = colour(c, a * f64::from(cover)).to_backend_color();
                    if let Err(e) = back.draw_pixel((px, py), colour) {
                        failed = Some(e.to_string());
                    }
                },
            );
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::font::Anchor;
    use super::super::scene::{INK, PALETTE};
    use super::*;

    #[test]
    fn paints_shapes_and_text_at_the_scene_size() {
        let scene = Scene {
            width: 120,
            height: 80,
            title: "t".into(),
            items: vec![
                Item::rect(10.0, 10.0, 20.0, 30.0).fill(PALETTE[0]),
                Item::text(60.0, 60.0, "Hi", 20.0, Anchor::Start).fill(INK),
                Item::circle(100.0, 20.0, 5.0)
                    .fill(PALETTE[1])
                    .tip("x")
                    .hover_only(),
            ],
            table: vec![],
        };
        let px = paint(&scene).unwrap();
        assert_eq!(px.len(), 120 * 80 * 3);
        let at = |x: usize, y: usize| &px[(y * 120 + x) * 3..(y * 120 + x) * 3 + 3];
        assert_eq!(at(20, 20), [0x00, 0x72, 0xB2]);
        assert_eq!(at(5, 5), [255, 255, 255]);
        // The hover-only circle is not painted.
        assert_eq!(at(100, 20), [255, 255, 255]);
        // Some dark text pixels around the text's place.
        let dark = (45..75)
            .flat_map(|y| (60..90).map(move |x| (x, y)))
            .filter(|&(x, y)| at(x, y)[0] < 100)
            .count();
        assert!(dark > 20, "{dark}");
    }
    #[test]
    fn the_encoded_image_decodes_at_the_scene_size() {
        let scene = Scene {
            width: 320,
            height: 240,
            title: "t".into(),
            items: vec![Item::rect(0.0, 0.0, 160.0, 240.0).fill(PALETTE[2])],
            table: vec![],
        };
        let png = encode(&scene).unwrap();
        let img = image::load_from_memory(&png).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (320, 240));
        assert_eq!(img.get_pixel(10, 10).0, [0x00, 0x9E, 0x73]);
        assert_eq!(img.get_pixel(300, 10).0, [255, 255, 255]);
    }
}
