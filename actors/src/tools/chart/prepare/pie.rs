//! pie: one y summed or counted per x value, the slices largest first, and the smallest put
//! together as "Other" when there are too many (or `top_n` says).

use super::super::values::format_value;
use super::super::{Aggregate, ChartType, Sort};
use super::groups::{Acc, group};
use super::labels::capitalised;
use super::order::{keep_top, order_categories};
use super::{Body, Ctx, Plot};

/// Most slices a pie draws before the smallest are put together as "Other".
const MAX_SLICES: usize = 8;

impl Ctx<'_> {
    pub(super) fn pie(&mut self) -> Result<Plot, String> {
        let x_name = self.x_name("that names the slices")?;
        if self.req.group_by.is_some() || self.req.y.len() > 1 {
            return Err(
                "a pie shows one set of parts of a whole: give one `y` and no \
                        group_by (use stacked_bar to compare several)"
                    .into(),
            );
        }
        let agg = self.aggregate();
        if !matches!(agg, Aggregate::Sum | Aggregate::Count) {
            return Err(format!(
                "a pie shows parts of a whole, so its slices must be sums or counts, not {}; \
                 use a bar chart for {} values",
                agg.word().to_lowercase(),
                agg.word().to_lowercase()
            ));
        }
        let keys = self.keys(x_name)?;
        let groups = group(&keys);
        let values = self.value_columns("the numeric column whose totals size the slices")?;
        let mut accs = vec![Acc::new(); groups.labels.len()];
        let (mut no_x, mut no_y) = (0, 0);
        for row in 0..self.table.rows.len() {
            match (groups.of_row[row], values[0].1[row]) {
                (None, _) => no_x += 1,
                (_, None) => no_y += 1,
                (Some(c), Some(v)) => accs[c].add(v),
            }
        }
        self.skipped(no_x, &format!("`{x_name}`"));
        self.skipped(no_y, "value");
        let totals: Vec<f64> = accs.iter().map(|a| a.value(agg)).collect();
        if let Some(c) = (0..totals.len()).find(|&c| totals[c] < 0.0) {
            return Err(format!(
                "a pie cannot show negative parts: the {} for `{}` is {}; use a bar chart",
                agg.word().to_lowercase(),
                groups.labels[c],
                format_value(totals[c])
            ));
        }
        let sum: f64 = totals.iter().sum();
        if sum <= 0.0 {
            return Err("every slice of this pie would be zero; there is nothing to show".into());
        }
        let order = order_categories(&groups, &keys, &totals, self.req.sort.unwrap_or(Sort::Desc));
        let limit = self.req.top_n.unwrap_or(MAX_SLICES - 1).max(1);
        let mut subtitle = vec![format!("Total {}", format_value(sum))];
        let kept = if order.len() > limit + 1 || (self.req.top_n.is_some() && order.len() > limit) {
            let kept = keep_top(order.clone(), &totals, limit);
            subtitle.push(format!(
                "the {} smallest of {} slices shown together as Other",
                order.len() - kept.len(),
                order.len()
            ));
            kept
        } else {
            order.clone()
        };
        let mut slices: Vec<(String, f64)> = kept
            .iter()
            .map(|&c| (groups.labels[c].clone(), totals[c]))
            .collect();
        let rest: f64 = order
            .iter()
            .filter(|c| !kept.contains(c))
            .map(|&c| totals[c])
            .sum();
        if kept.len() < order.len() {
            slices.push(("Other".into(), rest));
        }
        let what = match self.req.y.first() {
            Some(y) => y.clone(),
            None => "Rows".into(),
        };
        Ok(Plot {
            chart: ChartType::Pie,
            title: self.label_or(&self.req.title, capitalised(&format!("{what} by {x_name}"))),
            subtitle: subtitle.join(" · "),
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, what),
            body: Body::Pie { slices },
            notes: std::mem::take(&mut self.notes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SALES, req, run};
    use super::*;

    #[test]
    fn counts_pie_and_other() {
        let mut r = req(ChartType::Pie, "region", &[]);
        r.aggregate = Some(Aggregate::Count);
        let p = run(SALES, &r).unwrap();
        let Body::Pie { slices } = &p.body else {
            panic!()
        };
        assert_eq!(slices[0], ("North".to_string(), 3.0));
        assert_eq!(p.subtitle, "Total 6");
        r.top_n = Some(1);
        let p = run(SALES, &r).unwrap();
        let Body::Pie { slices } = &p.body else {
            panic!()
        };
        assert_eq!(
            slices,
            &[("North".to_string(), 3.0), ("Other".to_string(), 3.0)]
        );
        let neg = "k,v\na,5\nb,-1\n";
        assert!(
            run(neg, &req(ChartType::Pie, "k", &["v"]))
                .unwrap_err()
                .contains("negative")
        );
    }
}
