//! histogram: one numeric column counted into bins of a round width.

use super::super::ChartType;
use super::super::values::format_value;
use super::{Bin, Body, Ctx, Plot};

impl Ctx<'_> {
    pub(super) fn histogram(&mut self) -> Result<Plot, String> {
        let name = match (&self.req.x, self.req.y.as_slice()) {
            (Some(x), _) => x.clone(),
            (None, [y]) => y.clone(),
            _ => {
                return Err(
                    "a histogram needs `x`: the numeric column whose values are \
                            counted into bins"
                        .into(),
                );
            }
        };
        if self.req.group_by.is_some() {
            return Err(
                "a histogram draws one column's distribution; group_by does not apply \
                        (draw one histogram per group, or compare groups with a bar chart of \
                        their means)"
                    .into(),
            );
        }
        if self.req.top_n.is_some() {
            return Err(
                "top_n does not apply to a histogram; to focus on a range, filter the \
                        data with Python first"
                    .into(),
            );
        }
        let values: Vec<f64> = self.numbers(&name, "x")?.into_iter().flatten().collect();
        let missing = self.table.rows.len() - values.len();
        self.skipped(missing, &format!("`{name}`"));
        let bins = bin(&values, self.req.bins);
        let plain = values
            .iter()
            .all(|v| v.fract() == 0.0 && (1000.0..=2999.0).contains(v));
        let width = bins.first().map_or(0.0, |b| b.hi - b.lo);
        let subtitle = format!(
            "{} values in {} bins of width {}",
            format_value(values.len() as f64),
            bins.len(),
            format_value(width)
        );
        Ok(Plot {
            chart: ChartType::Histogram,
            title: self.label_or(&self.req.title, format!("Distribution of {name}")),
            subtitle,
            x_label: self.label_or(&self.req.x_label, name.clone()),
            y_label: self.label_or(&self.req.y_label, "Count of rows".into()),
            body: Body::Histogram { bins, plain },
            notes: std::mem::take(&mut self.notes),
        })
    }
}

/// Bin values for a histogram: `asked` equal bins from min to max, or, by default, about
/// Sturges' number of bins with a round width and edges on multiples of it.
fn bin(values: &[f64], asked: Option<usize>) -> Vec<Bin> {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (start, width, n) = if hi <= lo {
        let w = if lo == 0.0 {
            1.0
        } else {
            nice_width(lo.abs() / 10.0)
        };
        (lo - w / 2.0, w, 1)
    } else if let Some(k) = asked {
        (lo, (hi - lo) / k as f64, k)
    } else {
        let target = ((values.len() as f64).log2().ceil() as usize + 1).clamp(5, 40);
        let w = nice_width((hi - lo) / target as f64);
        let start = (lo / w).floor() * w;
        let mut n = ((hi - start) / w).ceil().max(1.0) as usize;
        // A maximum exactly on an edge belongs to the last bin, not a new one.
        if start + n as f64 * w < hi {
            n += 1;
        }
        (start, w, n)
    };
    let mut bins: Vec<Bin> = (0..n)
        .map(|i| Bin {
            lo: start + i as f64 * width,
            hi: start + (i + 1) as f64 * width,
            count: 0,
        })
        .collect();
    for &v in values {
        let i = (((v - start) / width).floor().max(0.0) as usize).min(n - 1);
        bins[i].count += 1;
    }
    bins
}

/// The round number (1, 2, 2.5 or 5 times a power of ten) nearest above `raw`.
fn nice_width(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|w| *w >= raw * 0.999)
        .unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bins_are_round() {
        let vals: Vec<f64> = (0..100).map(|i| i as f64 * 1.3).collect();
        let bins = bin(&vals, None);
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>(), 100);
        let w = bins[0].hi - bins[0].lo;
        assert_eq!(w, 20.0);
        assert_eq!(bins[0].lo, 0.0);
        assert!(bins.last().unwrap().hi >= 128.7);
        let exact = bin(&[0.0, 10.0], None);
        assert_eq!(exact.iter().map(|b| b.count).sum::<usize>(), 2);
        assert_eq!(bin(&[5.0, 5.0], None).len(), 1);
        assert_eq!(bin(&vals, Some(4)).len(), 4);
    }
}
