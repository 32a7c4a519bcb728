//! Rows gathered by key: the distinct values of a key column in their natural order
//! (`Groups`), what one cell's values come to under each aggregate (`Acc`), which aggregate
//! a request means, and which series each row's values go to (a group_by column's values,
//! or one series per y column).

use std::collections::HashMap;

use super::super::Aggregate;
use super::Ctx;
use super::columns::{Column, Keys};

/// Distinct values of a key column in their natural order (file order for text,
/// ascending otherwise), and each row's value index.
pub(super) struct Groups {
    pub(super) labels: Vec<String>,
    /// The numeric value of each group (numbers and dates).
    pub(super) values: Vec<f64>,
    pub(super) of_row: Vec<Option<usize>>,
}

pub(super) fn group(keys: &Keys) -> Groups {
    match keys {
        Keys::Text(v) => {
            let mut labels: Vec<String> = vec![];
            let mut index: HashMap<&str, usize> = HashMap::new();
            let of_row = v
                .iter()
                .map(|k| {
                    k.as_deref().map(|k| {
                        *index.entry(k).or_insert_with(|| {
                            labels.push(k.to_string());
                            labels.len() - 1
                        })
                    })
                })
                .collect();
            Groups {
                values: vec![],
                labels,
                of_row,
            }
        }
        Keys::Numbers(v, _) | Keys::Dates(v, _) => {
            let mut values: Vec<f64> = v.iter().flatten().copied().collect();
            values.sort_by(f64::total_cmp);
            values.dedup();
            let of_row = v
                .iter()
                .map(|k| k.map(|k| values.partition_point(|&u| u < k)))
                .collect();
            Groups {
                labels: values.iter().map(|&u| keys.label_of(u)).collect(),
                values,
                of_row,
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Acc {
    sum: f64,
    pub(super) n: usize,
    min: f64,
    max: f64,
}

impl Acc {
    pub(super) fn new() -> Acc {
        Acc {
            sum: 0.0,
            n: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    pub(super) fn add(&mut self, v: f64) {
        self.sum += v;
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub(super) fn value(&self, agg: Aggregate) -> f64 {
        match agg {
            Aggregate::Sum => self.sum,
            Aggregate::Mean => self.sum / self.n as f64,
            Aggregate::Count => self.n as f64,
            Aggregate::Min => self.min,
            Aggregate::Max => self.max,
        }
    }
}

/// For each row, the series its values go to (None: no series).
type SeriesOfRow<'v> = Box<dyn Fn(usize) -> Vec<Option<usize>> + 'v>;
/// For each row, its values, one per value column.
type ValuesOfRow<'v> = Box<dyn Fn(usize) -> Vec<Option<f64>> + 'v>;

impl Ctx<'_> {
    pub(super) fn aggregate(&self) -> Aggregate {
        self.req.aggregate.unwrap_or(if self.req.y.is_empty() {
            Aggregate::Count
        } else {
            Aggregate::Sum
        })
    }

    pub(super) fn check_series_args(&self) -> Result<(), String> {
        if self.req.group_by.is_some() && self.req.y.len() > 1 {
            return Err(format!(
                "give either several `y` columns or `group_by`, not both: with group_by each \
                 group is a series of the one y column (got y = {})",
                self.req.y.join(", ")
            ));
        }
        Ok(())
    }

    /// Series names, and for each row the series index and value of each of its values.
    pub(super) fn series_layout<'v>(
        &self,
        values: &'v [Column],
    ) -> Result<(Vec<String>, SeriesOfRow<'v>, ValuesOfRow<'v>), String> {
        let value_of_row = Box::new(move |row: usize| values.iter().map(|(_, v)| v[row]).collect());
        match &self.req.group_by {
            Some(g) => {
                let keys = self.keys(g)?;
                let groups = group(&keys);
                let of_row = groups.of_row;
                Ok((
                    groups.labels,
                    Box::new(move |row| vec![of_row[row]]),
                    value_of_row,
                ))
            }
            None => {
                let names = values.iter().map(|(n, _)| n.clone()).collect();
                let n = values.len();
                Ok((
                    names,
                    Box::new(move |_| (0..n).map(Some).collect()),
                    value_of_row,
                ))
            }
        }
    }
}
