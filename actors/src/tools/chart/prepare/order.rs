//! What is drawn, and in what order: categories ordered as `sort` asks, the largest kept
//! when `top_n` (or the most a chart holds) cuts them, and the series a chart keeps.

use super::super::{ChartType, Sort};
use super::Ctx;
use super::columns::Keys;
use super::groups::Groups;

/// Most series one chart draws; more would be a tangle of look-alike colours.
const MAX_SERIES: usize = 8;

impl Ctx<'_> {
    /// The series to draw: all of them, or the `top_n` (lines, areas, scatter) or
    /// `MAX_SERIES` largest by total.
    pub(super) fn pick_series(
        &mut self,
        names: &[String],
        totals: &[f64],
    ) -> Result<Vec<usize>, String> {
        let all: Vec<usize> = (0..names.len()).collect();
        let per_series = matches!(
            self.req.chart,
            ChartType::Line | ChartType::Area | ChartType::Scatter
        );
        let limit = match self.req.top_n {
            Some(n) if per_series => {
                if names.len() < 2 {
                    self.notes.push(format!(
                        "top_n was not applied: it picks the largest series of a {} chart, and \
                         this one has a single series (use group_by or several y columns)",
                        self.req.chart.name()
                    ));
                }
                n.max(1)
            }
            _ => MAX_SERIES,
        };
        if names.len() <= limit {
            return Ok(all);
        }
        let mut kept = keep_top(all, totals, limit);
        kept.sort_unstable();
        let dropped: Vec<&str> = (0..names.len())
            .filter(|i| !kept.contains(i))
            .map(|i| names[i].as_str())
            .collect();
        let why = if limit == MAX_SERIES && self.req.top_n.is_none() {
            format!(" (at most {MAX_SERIES} series stay readable; set top_n to choose)")
        } else {
            String::new()
        };
        self.notes.push(format!(
            "drew the {limit} largest of {} series{why}; left out: {}",
            names.len(),
            clip_list(&dropped)
        ));
        Ok(kept)
    }
}

/// Category indices in the order `sort` asks for. Numbers and dates compare by value, text
/// by its lower-case form.
pub(super) fn order_categories(
    groups: &Groups,
    keys: &Keys,
    totals: &[f64],
    sort: Sort,
) -> Vec<usize> {
    let natural = !matches!(keys, Keys::Text(_));
    let mut order: Vec<usize> = (0..groups.labels.len()).collect();
    let by_x = |a: &usize, b: &usize| {
        if natural {
            groups.values[*a].total_cmp(&groups.values[*b])
        } else {
            groups.labels[*a]
                .to_lowercase()
                .cmp(&groups.labels[*b].to_lowercase())
        }
    };
    match sort {
        Sort::None => {}
        Sort::X => order.sort_by(by_x),
        Sort::XDesc => order.sort_by(|a, b| by_x(b, a)),
        Sort::Asc => order.sort_by(|a, b| totals[*a].total_cmp(&totals[*b])),
        Sort::Desc => order.sort_by(|a, b| totals[*b].total_cmp(&totals[*a])),
    }
    order
}

/// The `n` entries of `order` with the largest totals, in `order`'s order.
pub(super) fn keep_top(order: Vec<usize>, totals: &[f64], n: usize) -> Vec<usize> {
    let mut by_size = order.clone();
    by_size.sort_by(|a, b| totals[*b].abs().total_cmp(&totals[*a].abs()));
    by_size.truncate(n);
    order.into_iter().filter(|c| by_size.contains(c)).collect()
}

fn clip_list(names: &[&str]) -> String {
    if names.len() <= 6 {
        names.join(", ")
    } else {
        format!("{}, and {} more", names[..5].join(", "), names.len() - 5)
    }
}
