//! line, area, bar, stacked_bar and scatter: values along x, one series per y column or per
//! group_by value. Lines and areas over numbers or dates run in x order; the others place
//! categories as `sort` and `top_n` say; scatter draws every row.

use super::super::{ChartType, Sort};
use super::columns::Keys;
use super::groups::{Acc, group};
use super::labels::capitalised;
use super::order::{keep_top, order_categories};
use super::{Body, Ctx, Plot, Series, XKind};

/// Most points one chart draws.
const MAX_POINTS: usize = 100_000;

impl Ctx<'_> {
    /// line, area, bar and stacked_bar: aggregate y per x (and series), order and cut.
    pub(super) fn xy(&mut self) -> Result<Plot, String> {
        let chart = self.req.chart;
        let x_name = self.x_name("for the horizontal axis (categories, dates or numbers)")?;
        self.check_series_args()?;
        let keys = self.keys(x_name)?;
        let groups = group(&keys);
        let values = self.value_columns("the numeric column(s) to plot")?;
        let agg = self.aggregate();
        let (names, series_of_row, value_of_row) = self.series_layout(&values)?;
        let n_series = names.len();
        let mut cells = vec![vec![None::<Acc>; groups.labels.len()]; n_series];
        let (mut no_x, mut no_y, mut combined) = (0, 0, false);
        for row in 0..self.table.rows.len() {
            let Some(cat) = groups.of_row[row] else {
                no_x += 1;
                continue;
            };
            for (s, v) in series_of_row(row).into_iter().zip(value_of_row(row)) {
                let (Some(s), Some(v)) = (s, v) else {
                    no_y += 1;
                    continue;
                };
                let acc = cells[s][cat].get_or_insert_with(Acc::new);
                acc.add(v);
                combined |= acc.n > 1;
            }
        }
        self.skipped(no_x, &format!("`{x_name}`"));
        self.skipped(no_y, "value");
        let value = |s: usize, c: usize| -> Option<f64> { cells[s][c].map(|a| a.value(agg)) };
        let totals: Vec<f64> = (0..groups.labels.len())
            .map(|c| (0..n_series).filter_map(|s| value(s, c)).sum())
            .collect();
        let series_totals: Vec<f64> = (0..n_series)
            .map(|s| {
                (0..groups.labels.len())
                    .filter_map(|c| value(s, c))
                    .map(f64::abs)
                    .sum()
            })
            .collect();
        let kept_series = self.pick_series(&names, &series_totals)?;

        let continuous =
            matches!(chart, ChartType::Line | ChartType::Area) && !matches!(keys, Keys::Text(_));
        let mut subtitle = vec![];
        if combined {
            subtitle.push(match self.req.y.as_slice() {
                [] => format!("Rows per {x_name}"),
                [one] => format!("{} of {one} per {x_name}", agg.word()),
                _ => format!("{} per {x_name}", agg.word()),
            });
        }
        let (x, order) = if continuous {
            if let Some(sort) = self.req.sort.filter(|s| *s != Sort::None && *s != Sort::X) {
                self.notes.push(format!(
                    "sort {sort:?} was not applied: a {} chart over {} runs in x order",
                    chart.name(),
                    if matches!(keys, Keys::Dates(..)) {
                        "dates"
                    } else {
                        "numbers"
                    }
                ));
            }
            let x = match &keys {
                Keys::Dates(_, p) => XKind::Dates(*p),
                Keys::Numbers(_, plain) => XKind::Numbers { plain: *plain },
                Keys::Text(_) => unreachable!("continuous x is never text"),
            };
            (x, (0..groups.labels.len()).collect::<Vec<_>>())
        } else {
            let order =
                order_categories(&groups, &keys, &totals, self.req.sort.unwrap_or(Sort::None));
            let bars = matches!(chart, ChartType::Bar | ChartType::StackedBar);
            let order = match self.req.top_n {
                Some(n) if bars && n < order.len() => {
                    let by = match self.req.y.as_slice() {
                        [one] if n_series == 1 => one.as_str(),
                        [] if n_series == 1 => "count",
                        _ => "total",
                    };
                    subtitle.push(format!("Top {n} of {} by {by}", order.len()));
                    keep_top(order, &totals, n)
                }
                _ => order,
            };
            let labels = order.iter().map(|&c| groups.labels[c].clone()).collect();
            (XKind::Categories(labels), order)
        };
        let series: Vec<Series> = kept_series
            .iter()
            .map(|&s| Series {
                name: names[s].clone(),
                points: order
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &c)| {
                        let x = if continuous {
                            groups.values[c]
                        } else {
                            i as f64
                        };
                        value(s, c).map(|v| (x, v))
                    })
                    .collect(),
            })
            .collect();
        self.check_points(series.iter().map(|s| s.points.len()).sum())?;
        if matches!(chart, ChartType::StackedBar | ChartType::Area)
            && series.iter().flat_map(|s| &s.points).any(|p| p.1 < 0.0)
            && series.len() > 1
        {
            self.notes.push(
                "some values are negative; stacked negative parts are drawn below zero".into(),
            );
        }
        let title = self.label_or(&self.req.title, self.default_title(x_name));
        Ok(Plot {
            chart,
            title,
            subtitle: subtitle.join(" · "),
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, self.y_label_default(combined)),
            body: Body::Xy { x, series },
            notes: std::mem::take(&mut self.notes),
        })
    }

    fn check_points(&self, n: usize) -> Result<(), String> {
        if n > MAX_POINTS {
            return Err(format!(
                "that would draw {n} points, more than the {MAX_POINTS} a readable chart can \
                 hold; aggregate the data first (e.g. per day or month with pandas) and chart \
                 the result"
            ));
        }
        Ok(())
    }

    pub(super) fn scatter(&mut self) -> Result<Plot, String> {
        let x_name = self.x_name("of numbers or dates for the horizontal axis")?;
        self.check_series_args()?;
        let keys = self.keys(x_name)?;
        let x = match &keys {
            Keys::Dates(_, p) => XKind::Dates(*p),
            Keys::Numbers(_, plain) => XKind::Numbers { plain: *plain },
            Keys::Text(_) => {
                return Err(format!(
                    "a scatter chart needs numbers or dates on x, and `{x_name}` holds text \
                     (e.g. `{}`); use a bar chart for categories",
                    self.first_text(x_name)
                ));
            }
        };
        if self.req.y.is_empty() {
            return Err(
                "a scatter chart needs `y`: the numeric column(s) for the vertical axis".into(),
            );
        }
        if self.req.aggregate.is_some() {
            self.notes
                .push("aggregate was not applied: a scatter chart shows every row".into());
        }
        if self.req.sort.is_some() {
            self.notes
                .push("sort was not applied: a scatter chart places points by x".into());
        }
        let values = self.value_columns("")?;
        let (names, series_of_row, value_of_row) = self.series_layout(&values)?;
        let mut points = vec![vec![]; names.len()];
        let mut skipped = 0;
        for row in 0..self.table.rows.len() {
            let Some(xv) = keys.number(row) else {
                skipped += 1;
                continue;
            };
            for (s, v) in series_of_row(row).into_iter().zip(value_of_row(row)) {
                match (s, v) {
                    (Some(s), Some(v)) => points[s].push((xv, v)),
                    _ => skipped += 1,
                }
            }
        }
        self.skipped(skipped, "x or y value");
        let totals: Vec<f64> = points.iter().map(|p| p.len() as f64).collect();
        let kept = self.pick_series(&names, &totals)?;
        let series: Vec<Series> = kept
            .into_iter()
            .map(|s| Series {
                name: names[s].clone(),
                points: std::mem::take(&mut points[s]),
            })
            .collect();
        self.check_points(series.iter().map(|s| s.points.len()).sum())?;
        let title = self.label_or(
            &self.req.title,
            capitalised(&format!("{} against {x_name}", self.what())),
        );
        Ok(Plot {
            chart: ChartType::Scatter,
            title,
            subtitle: String::new(),
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, self.y_label_default(false)),
            body: Body::Xy { x, series },
            notes: std::mem::take(&mut self.notes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::values::{Precision, days_from_civil};
    use super::super::tests::{SALES, req, run, series};
    use super::*;

    #[test]
    fn bars_sum_per_month_in_date_order() {
        let p = run(SALES, &req(ChartType::Bar, "month", &["revenue"])).unwrap();
        let (x, s) = series(&p);
        assert_eq!(
            x,
            &XKind::Categories(vec!["2024-01".into(), "2024-02".into(), "2024-03".into()])
        );
        assert_eq!(s[0].points, [(0.0, 150.0), (1.0, 120.0), (2.0, 1090.0)]);
        assert_eq!(p.title, "Revenue by month");
        assert_eq!(p.subtitle, "Sum of revenue per month");
        assert_eq!(p.notes, ["1 row with no value was left out"]);
    }

    #[test]
    fn group_by_makes_series_and_sort_top_n_cut() {
        let mut r = req(ChartType::StackedBar, "region", &["revenue"]);
        r.group_by = Some("month".into());
        r.sort = Some(Sort::Desc);
        r.top_n = Some(2);
        let p = run(SALES, &r).unwrap();
        let (x, s) = series(&p);
        assert_eq!(x, &XKind::Categories(vec!["East".into(), "North".into()]));
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "2024-01");
        assert_eq!(s[0].points, [(1.0, 100.0)]);
        assert!(p.subtitle.contains("Top 2 of 3 by total"), "{}", p.subtitle);
    }

    #[test]
    fn lines_over_dates_are_continuous() {
        let p = run(SALES, &req(ChartType::Line, "month", &["revenue", "units"])).unwrap();
        let (x, s) = series(&p);
        assert_eq!(x, &XKind::Dates(Precision::Month));
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].points.len(), 3);
        assert_eq!(s[1].points[0].1, 3.0);
        let jan = days_from_civil(2024, 1, 1).unwrap() as f64;
        assert_eq!(s[0].points[0], (jan, 150.0));
    }
}
