//! Axis scales: round tick steps for values (1, 2, 2.5 or 5 times a power of ten, with
//! thousands separators), calendar ticks for dates (days, weeks, months, quarters, years),
//! and the mapping from data to pixels.

use super::values::{
    Precision, civil_from_days, days_from_civil, decimals_for_step, format_date, format_fixed,
};

#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub at: f64,
    pub label: String,
}

/// A data range and its ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<Tick>,
}

impl Scale {
    /// Map `v` from [lo, hi] onto [a, b] (b may be less than a, for vertical axes).
    pub fn map(&self, v: f64, a: f64, b: f64) -> f64 {
        if self.hi == self.lo {
            return (a + b) / 2.0;
        }
        a + (v - self.lo) / (self.hi - self.lo) * (b - a)
    }
}

/// How the numbers of a value axis are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumStyle {
    /// Whole numbers without separators (years).
    pub plain: bool,
    /// Only whole-number ticks (counts).
    pub integer: bool,
}

/// Round ticks covering [min, max], at most `max_ticks` of them; the range widens to the
/// ticks. With `zero`, 0 is always inside.
pub fn values(min: f64, max: f64, max_ticks: usize, zero: bool, style: NumStyle) -> Scale {
    let (mut lo, mut hi) = (min.min(max), max.max(min));
    if zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if !(hi - lo).is_normal() || hi - lo < 1e-9 * hi.abs().max(lo.abs()) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        hi += pad;
        if !(zero && lo == 0.0) {
            lo -= pad;
        }
    }
    let max_ticks = max_ticks.max(2);
    let mut step = round_step((hi - lo) / (max_ticks - 1) as f64, style);
    loop {
        let a = (lo / step).floor() * step;
        let b = (hi / step).ceil() * step;
        let count = ((b - a) / step).round() as usize + 1;
        if count <= max_ticks + 1 {
            let decimals = if style.plain || style.integer {
                0
            } else {
                decimals_for_step(step)
            };
            let ticks = (0..count)
                .map(|i| {
                    let at = a + i as f64 * step;
                    let at = if at.abs() < step * 1e-9 { 0.0 } else { at };
                    let label = if style.plain {
                        format!("{}", at.round() as i64)
                    } else {
                        format_fixed(at, decimals)
                    };
                    Tick { at, label }
                })
                .collect();
            return Scale {
                lo: a,
                hi: b,
                ticks,
            };
        }
        step = round_step(step * 1.01, style);
    }
}

/// The smallest round step at least `raw`.
fn round_step(raw: f64, style: NumStyle) -> f64 {
    let raw = if style.plain || style.integer {
        raw.max(1.0)
    } else {
        raw
    };
    let p = 10f64.powf(raw.log10().floor());
    let multiples: &[f64] = if style.plain || style.integer {
        &[1.0, 2.0, 5.0, 10.0]
    } else {
        &[1.0, 2.0, 2.5, 5.0, 10.0]
    };
    multiples
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * 0.999_999)
        .unwrap_or(10.0 * p)
}

/// Calendar steps, finest first: minutes, days, or months (12 = a year).
#[derive(Debug, Clone, Copy)]
enum Step {
    Minutes(i64),
    Days(i64),
    Months(i64),
}

const TIME_STEPS: &[Step] = &[
    Step::Minutes(15),
    Step::Minutes(30),
    Step::Minutes(60),
    Step::Minutes(180),
    Step::Minutes(360),
    Step::Minutes(720),
    Step::Days(1),
    Step::Days(2),
    Step::Days(7),
    Step::Days(14),
    Step::Months(1),
    Step::Months(2),
    Step::Months(3),
    Step::Months(6),
    Step::Months(12),
    Step::Months(24),
    Step::Months(60),
    Step::Months(120),
    Step::Months(240),
    Step::Months(600),
    Step::Months(1200),
];

/// Calendar ticks over [min, max] days: the finest step whose ticks `fits` accepts, never
/// finer than the data (monthly data gets no day ticks). The range is padded a little so
/// points at its ends are not drawn on the frame.
pub fn dates(min: f64, max: f64, precision: Precision, fits: impl Fn(&Scale) -> bool) -> Scale {
    let (min, max) = if max - min < 1.0 {
        (min - 1.0, max + 1.0)
    } else {
        (min, max)
    };
    let pad = (max - min) * 0.03;
    let (lo, hi) = (min - pad, max + pad);
    let mut last = None;
    for &step in TIME_STEPS {
        let too_fine = match step {
            Step::Minutes(_) => precision != Precision::Minute,
            Step::Days(_) => precision == Precision::Month,
            Step::Months(_) => false,
        };
        if too_fine {
            continue;
        }
        let ticks = time_ticks(lo, hi, step);
        if ticks.len() > 200 {
            continue;
        }
        let scale = Scale { lo, hi, ticks };
        if fits(&scale) {
            return scale;
        }
        last = Some(scale);
    }
    last.unwrap_or(Scale {
        lo,
        hi,
        ticks: vec![],
    })
}

fn time_ticks(lo: f64, hi: f64, step: Step) -> Vec<Tick> {
    let mut out = vec![];
    match step {
        Step::Minutes(m) => {
            let per_day = 1440 / m;
            let mut i = (lo * per_day as f64).ceil() as i64;
            while (i as f64) / (per_day as f64) <= hi {
                let at = i as f64 / per_day as f64;
                out.push(Tick {
                    at,
                    label: format_date(at, Precision::Minute),
                });
                i += 1;
            }
        }
        Step::Days(d) => {
            // Weeks start on Mondays (1970-01-01 was a Thursday).
            let offset = if d % 7 == 0 { 4 } else { 0 };
            let mut day = ((lo.ceil() as i64 - offset).div_euclid(d)) * d + offset;
            if (day as f64) < lo {
                day += d;
            }
            while day as f64 <= hi {
                out.push(Tick {
                    at: day as f64,
                    label: format_date(day as f64, Precision::Day),
                });
                day += d;
            }
        }
        Step::Months(m) => {
            let (y, mo, _) = civil_from_days(lo.floor() as i64);
            let mut index = (y * 12 + mo - 1).div_euclid(m) * m;
            loop {
                let first = days_from_civil(index.div_euclid(12), index.rem_euclid(12) + 1, 1);
                let Some(at) = first.map(|day| day as f64).filter(|at| *at <= hi) else {
                    break;
                };
                if at >= lo {
                    let label = if m % 12 == 0 {
                        format!("{}", index.div_euclid(12))
                    } else {
                        format_date(at, Precision::Month)
                    };
                    out.push(Tick { at, label });
                }
                index += m;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &Scale) -> Vec<&str> {
        s.ticks.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn value_ticks_are_round_and_separated() {
        let s = values(0.0, 12_345.0, 6, true, NumStyle::default());
        assert_eq!(
            labels(&s),
            ["0", "2,500", "5,000", "7,500", "10,000", "12,500"]
        );
        assert_eq!((s.lo, s.hi), (0.0, 12_500.0));
        let s = values(0.12, 0.87, 5, false, NumStyle::default());
        assert_eq!(labels(&s), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let s = values(-35.0, 80.0, 6, true, NumStyle::default());
        assert!(labels(&s).contains(&"0") && s.lo <= -35.0 && s.hi >= 80.0);
        let s = values(
            2019.0,
            2024.0,
            8,
            false,
            NumStyle {
                plain: true,
                integer: true,
            },
        );
        assert_eq!(labels(&s), ["2019", "2020", "2021", "2022", "2023", "2024"]);
        let s = values(
            0.0,
            3.0,
            10,
            true,
            NumStyle {
                plain: false,
                integer: true,
            },
        );
        assert_eq!(labels(&s), ["0", "1", "2", "3"]);
        // A flat series still gets a range.
        let s = values(5.0, 5.0, 5, false, NumStyle::default());
        assert!(s.lo < 5.0 && s.hi > 5.0);
        assert_eq!(s.map(s.lo, 0.0, 100.0), 0.0);
    }

    #[test]
    fn date_ticks_follow_the_calendar() {
        let jan = days_from_civil(2024, 1, 1).unwrap() as f64;
        let dec = days_from_civil(2024, 12, 1).unwrap() as f64;
        let s = dates(jan, dec, Precision::Month, |s| s.ticks.len() <= 12);
        assert_eq!(labels(&s)[..3], ["2024-01", "2024-02", "2024-03"]);
        let s = dates(jan, dec, Precision::Month, |s| s.ticks.len() <= 5);
        assert_eq!(labels(&s), ["2024-01", "2024-04", "2024-07", "2024-10"]);
        let s = dates(
            jan,
            days_from_civil(2030, 1, 1).unwrap() as f64,
            Precision::Day,
            |s| s.ticks.len() <= 8,
        );
        assert_eq!(labels(&s)[..2], ["2024", "2025"]);
        let s = dates(jan, jan + 20.0, Precision::Day, |s| s.ticks.len() <= 4);
        // Weekly ticks on Mondays: 2024-01-01 was one.
        assert_eq!(labels(&s)[0], "2024-01-01");
        assert_eq!(labels(&s)[1], "2024-01-08");
    }
}
