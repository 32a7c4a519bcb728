//! heatmap: values aggregated per x value (its columns) and per group_by value or y column
//! (its rows), the columns ordered as `sort` says.

use super::super::{ChartType, Sort};
use super::groups::{Acc, group};
use super::labels::capitalised;
use super::order::order_categories;
use super::{Body, Ctx, Plot};

/// Most rows or columns a heatmap draws.
const MAX_HEAT: usize = 80;

impl Ctx<'_> {
    pub(super) fn heatmap(&mut self) -> Result<Plot, String> {
        let x_name = self.x_name("whose values become the heatmap's columns")?;
        self.check_series_args()?;
        if self.req.top_n.is_some() {
            return Err(
                "top_n does not apply to a heatmap; filter the rows with Python first".into(),
            );
        }
        if self.req.group_by.is_none() && self.req.y.len() < 2 {
            return Err(
                "a heatmap needs rows as well as columns: give `group_by` (the column \
                        whose values become rows) with one `y` for the cell values, or \
                        several `y` columns (one row each)"
                    .into(),
            );
        }
        let keys = self.keys(x_name)?;
        let groups = group(&keys);
        let values = self.value_columns("the numeric column that colours the cells")?;
        let agg = self.aggregate();
        let (names, series_of_row, value_of_row) = self.series_layout(&values)?;
        let mut cells = vec![vec![None::<Acc>; groups.labels.len()]; names.len()];
        let mut skipped = 0;
        let mut combined = false;
        for row in 0..self.table.rows.len() {
            let Some(c) = groups.of_row[row] else {
                skipped += 1;
                continue;
            };
            for (s, v) in series_of_row(row).into_iter().zip(value_of_row(row)) {
                match (s, v) {
                    (Some(s), Some(v)) => {
                        let acc = cells[s][c].get_or_insert_with(Acc::new);
                        acc.add(v);
                        combined |= acc.n > 1;
                    }
                    _ => skipped += 1,
                }
            }
        }
        self.skipped(skipped, "x, group or value");
        if groups.labels.len() > MAX_HEAT || names.len() > MAX_HEAT {
            return Err(format!(
                "that heatmap would be {} columns by {} rows; at most {MAX_HEAT} each stay \
                 readable, so aggregate or filter the data first",
                groups.labels.len(),
                names.len()
            ));
        }
        let values_of = |c: usize| -> f64 {
            cells
                .iter()
                .filter_map(|row| row[c].map(|a| a.value(agg)))
                .sum()
        };
        let totals: Vec<f64> = (0..groups.labels.len()).map(values_of).collect();
        let order = order_categories(&groups, &keys, &totals, self.req.sort.unwrap_or(Sort::None));
        let grid = cells
            .iter()
            .map(|row| {
                order
                    .iter()
                    .map(|&c| row[c].map(|a| a.value(agg)))
                    .collect()
            })
            .collect();
        let value_name = match self.req.y.as_slice() {
            [] => "Rows".to_string(),
            [one] => one.clone(),
            _ => "Value".into(),
        };
        let subtitle = if combined || self.req.y.is_empty() {
            format!("{} of {value_name} per cell", agg.word())
        } else {
            String::new()
        };
        // Long format names its rows after group_by; wide format's rows are the y columns.
        let (default_title, row_name) = match &self.req.group_by {
            Some(g) => (format!("{value_name} by {x_name} and {g}"), g.clone()),
            None => (format!("{} by {x_name}", self.what()), String::new()),
        };
        Ok(Plot {
            chart: ChartType::Heatmap,
            title: self.label_or(&self.req.title, capitalised(&default_title)),
            subtitle,
            x_label: self.label_or(&self.req.x_label, x_name.to_string()),
            y_label: self.label_or(&self.req.y_label, row_name),
            body: Body::Heatmap {
                columns: order.iter().map(|&c| groups.labels[c].clone()).collect(),
                rows: names,
                cells: grid,
            },
            notes: std::mem::take(&mut self.notes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SALES, req, run};
    use super::*;

    #[test]
    fn heatmap_long_format() {
        let mut r = req(ChartType::Heatmap, "month", &["revenue"]);
        r.group_by = Some("region".into());
        let p = run(SALES, &r).unwrap();
        let Body::Heatmap {
            columns,
            rows,
            cells,
        } = &p.body
        else {
            panic!()
        };
        assert_eq!(columns.len(), 3);
        assert_eq!(rows, &["North", "South", "East"]);
        assert_eq!(cells[0], [Some(100.0), Some(120.0), Some(90.0)]);
        assert_eq!(cells[1], [Some(50.0), None, None]);
        assert!(run(SALES, &req(ChartType::Heatmap, "month", &["revenue"])).is_err());
    }
}
