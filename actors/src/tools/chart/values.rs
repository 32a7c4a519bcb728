//! Reading and writing single values: numbers (with thousands separators), calendar dates,
//! the missing-value markers data tools write, and how numbers and dates are shown.

use chrono::{Datelike, NaiveDate};

/// Cell texts that mean "no value" (the markers pandas reads as missing).
const MISSING: &[&str] = &[
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
];

/// Whether a cell's text stands for a missing value.
pub fn is_missing(text: &str) -> bool {
    MISSING.contains(&text.trim())
}

/// A number as people write it in data files: `1234.5`, `-3e6`, `1,234,567.89`, `$1,200`.
/// Thousands separators must be regular (groups of three), so `1,5` is not a number.
pub fn parse_number(text: &str) -> Option<f64> {
    let t = text.trim();
    let t = t
        .strip_prefix(['$', '€', '£', '¥'])
        .map(str::trim_start)
        .unwrap_or(t);
    let plain = if t.contains(',') {
        let (sign, rest) = match t.strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", t),
        };
        let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
        let groups: Vec<&str> = int.split(',').collect();
        let regular = groups[0].len() <= 3
            && !groups[0].is_empty()
            && groups[1..].iter().all(|g| g.len() == 3)
            && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()));
        if !regular {
            return None;
        }
        let dot = if frac.is_empty() { "" } else { "." };
        format!("{sign}{}{dot}{frac}", groups.concat())
    } else {
        t.to_string()
    };
    // Rust accepts "inf" and "NaN"; data files mean something else by them.
    if !plain
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
    {
        return None;
    }
    plain.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// How finely a date column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precision {
    Month,
    Day,
    Minute,
}

/// A point in time as days since 1970-01-01 (fractional for times of day), and how it
/// was written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Date {
    pub days: f64,
    pub precision: Precision,
}

/// `YYYY-MM`, `YYYY-MM-DD`, `YYYY/MM/DD`, or a date with a time (`T` or a space, then
/// `HH:MM[:SS[.fff]]`, optionally `Z` or an offset, which is ignored: times are shown as
/// written). A bare year is a number, not a date.
pub fn parse_date(text: &str) -> Option<Date> {
    let t = text.trim();
    let (date, time) = match t.find(['T', ' ']) {
        Some(i) => (&t[..i], Some(t[i + 1..].trim())),
        None => (t, None),
    };
    let sep = if date.contains('/') { '/' } else { '-' };
    let parts: Vec<&str> = date.split(sep).collect();
    let num = |s: &str, len: std::ops::RangeInclusive<usize>| -> Option<i64> {
        (len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (y, m, d, mut precision) = match parts.as_slice() {
        [y, m] if time.is_none() && sep == '-' => {
            (num(y, 4..=4)?, num(m, 1..=2)?, 1, Precision::Month)
        }
        [y, m, d] => (
            num(y, 4..=4)?,
            num(m, 1..=2)?,
            num(d, 1..=2)?,
            Precision::Day,
        ),
        _ => return None,
    };
    let mut days = days_from_civil(y, m, d)? as f64;
    if let Some(time) = time {
        let clock = time
            .trim_end_matches('Z')
            .split(['+', '-'])
            .next()
            .unwrap_or("");
        let hms: Vec<&str> = clock.split(':').collect();
        let (h, min, s) = match hms.as_slice() {
            [h, m] => (num(h, 1..=2)?, num(m, 2..=2)?, 0.0),
            [h, m, s] => (num(h, 1..=2)?, num(m, 2..=2)?, s.parse::<f64>().ok()?),
            _ => return None,
        };
        if h > 23 || min > 59 || !(0.0..61.0).contains(&s) {
            return None;
        }
        let fraction = (h as f64 * 3600.0 + min as f64 * 60.0 + s) / 86_400.0;
        if fraction > 0.0 {
            precision = Precision::Minute;
        }
        days += fraction;
    }
    Some(Date { days, precision })
}

/// Days since 1970-01-01 of a (proleptic Gregorian) calendar date, if there is such a date.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> Option<i64> {
    let date = NaiveDate::from_ymd_opt(y.try_into().ok()?, m.try_into().ok()?, d.try_into().ok()?)?;
    Some(date.to_epoch_days().into())
}

/// The (year, month, day) of a day count since 1970-01-01; a count beyond the calendar
/// chrono knows (about 262,000 years either way) is its first or last day.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let date = i32::try_from(days)
        .ok()
        .and_then(NaiveDate::from_epoch_days)
        .unwrap_or(if days < 0 {
            NaiveDate::MIN
        } else {
            NaiveDate::MAX
        });
    (date.year().into(), date.month().into(), date.day().into())
}

/// A date written at the given precision: `2024-03`, `2024-03-15`, `2024-03-15 09:30`.
pub fn format_date(days: f64, precision: Precision) -> String {
    let whole = days.floor() as i64;
    let (y, m, d) = civil_from_days(whole);
    match precision {
        Precision::Month => format!("{y:04}-{m:02}"),
        Precision::Day => format!("{y:04}-{m:02}-{d:02}"),
        Precision::Minute => {
            let minutes = ((days - whole as f64) * 1440.0).round() as i64;
            format!(
                "{y:04}-{m:02}-{d:02} {:02}:{:02}",
                minutes / 60,
                minutes % 60
            )
        }
    }
}

/// `v` with `decimals` digits after the point and commas between thousands.
pub fn format_fixed(v: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::with_capacity(int.len() + int.len() / 3);
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let negative = v < 0.0 && text.bytes().any(|b| matches!(b, b'1'..=b'9'));
    let sign = if negative { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// A data value as a reader wants it: whole numbers whole, others to two decimals (or four
/// significant digits when small), thousands separated, trailing zeros dropped.
pub fn format_value(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 * v.abs().max(1.0) {
        return format_fixed(v.round(), 0);
    }
    let decimals = if v.abs() >= 1.0 {
        2
    } else {
        // Four significant digits: 0.01234 → 0.01234.
        (3 - v.abs().log10().floor() as i64).clamp(2, 10) as usize
    };
    let text = format_fixed(v, decimals);
    let text = text.trim_end_matches('0');
    text.trim_end_matches('.').to_string()
}

/// The decimals needed to tell apart ticks `step` apart.
pub fn decimals_for_step(step: f64) -> usize {
    let mut decimals = 0;
    while decimals < 10
        && ((step * 10f64.powi(decimals as i32)).round() - step * 10f64.powi(decimals as i32)).abs()
            > 1e-6
    {
        decimals += 1;
    }
    decimals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_people_write_them() {
        assert_eq!(parse_number("1234.5"), Some(1234.5));
        assert_eq!(parse_number(" -3e2 "), Some(-300.0));
        assert_eq!(parse_number("1,234,567.25"), Some(1_234_567.25));
        assert_eq!(parse_number("-1,000"), Some(-1000.0));
        assert_eq!(parse_number("$1,200"), Some(1200.0));
        for bad in [
            "1,5",
            "12,34,567",
            "abc",
            "inf",
            "NaN",
            "1.2.3",
            "",
            "12 kg",
            ",100",
        ] {
            assert_eq!(parse_number(bad), None, "{bad}");
        }
        assert!(is_missing(" NA ") && is_missing("") && !is_missing("0"));
    }

    #[test]
    fn dates_round_trip() {
        let d = parse_date("2024-03-15").unwrap();
        assert_eq!(d.precision, Precision::Day);
        assert_eq!(format_date(d.days, Precision::Day), "2024-03-15");
        assert_eq!(days_from_civil(1970, 1, 1), Some(0));
        assert_eq!(days_from_civil(1969, 12, 31), Some(-1));
        assert_eq!(days_from_civil(2024, 3, 15), Some(19_797));
        let leap = days_from_civil(2000, 2, 29).unwrap();
        assert_eq!(civil_from_days(leap), (2000, 2, 29));
        assert_eq!(civil_from_days(leap + 1), (2000, 3, 1));
        assert_eq!(civil_from_days(-719_162), (1, 1, 1));
        assert_eq!(civil_from_days(i64::MIN).1, 1);
        assert_eq!(civil_from_days(i64::MAX).1, 12);
        assert_eq!(parse_date("2000-02-29").map(|d| d.days), Some(leap as f64));
        assert_eq!(parse_date("2024-02").unwrap().precision, Precision::Month);
        assert_eq!(
            format_date(parse_date("2024-2").unwrap().days, Precision::Month),
            "2024-02"
        );
        assert_eq!(
            parse_date("2024/01/31").unwrap().days,
            parse_date("2024-01-31").unwrap().days
        );
        // pandas writes midnight timestamps with a time; they are still days.
        assert_eq!(
            parse_date("2024-01-05 00:00:00").unwrap().precision,
            Precision::Day
        );
        let t = parse_date("2024-01-05T09:30:00Z").unwrap();
        assert_eq!(format_date(t.days, t.precision), "2024-01-05 09:30");
        for bad in [
            "2024",
            "2024-13",
            "2023-02-29",
            "2100-02-29",
            "2024-04-31",
            "2024-00-10",
            "2024-01-00",
            "24-01-01",
            "2024-01-01x",
            "march",
        ] {
            assert!(parse_date(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn values_are_shown_with_separators() {
        assert_eq!(format_fixed(1_234_567.0, 0), "1,234,567");
        assert_eq!(format_fixed(-1234.5, 1), "-1,234.5");
        assert_eq!(format_fixed(-0.0001, 1), "0.0");
        assert_eq!(format_fixed(999.0, 0), "999");
        assert_eq!(format_value(12_345.0), "12,345");
        assert_eq!(format_value(1234.567), "1,234.57");
        assert_eq!(format_value(0.012345), "0.01235");
        assert_eq!(format_value(2.5), "2.5");
        assert_eq!(decimals_for_step(250.0), 0);
        assert_eq!(decimals_for_step(0.25), 2);
        assert_eq!(decimals_for_step(0.5), 1);
    }
}
