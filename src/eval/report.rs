//! What an eval found, for people and machines: per case the runs that passed, pass@1,
//! pass@k and pass^k over the repeats, each check's tally, tokens, cost, time and model
//! calls; the totals; the table a terminal shows; the JSON `--json` writes; and two reports
//! side by side (`--compare`). Knows nothing of how runs are made.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::run::CaseRun;

/// A whole eval: what ran, how each case did, the totals, and every run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub suite: String,
    pub config: String,
    /// The model of each LLM profile, `profile: model`.
    pub models: Vec<String>,
    /// Runs per case (the k of pass@k and pass^k).
    pub repeat: u32,
    /// Wall time of the whole eval.
    pub wall_ms: u64,
    pub cases: Vec<CaseSummary>,
    pub totals: Totals,
    pub runs: Vec<CaseRun>,
}

/// How one case did over its runs. Runs the harness could not make (`errors`) are left
/// out of the pass rates: they say nothing of the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseSummary {
    pub case: String,
    pub runs: u32,
    pub passed: u32,
    pub errors: u32,
    /// The share of runs that passed; `None` when no run could be made.
    pub pass_at_1: Option<f64>,
    /// The chance that at least one of k runs passes.
    pub pass_at_k: Option<f64>,
    /// The chance that all of k runs pass.
    pub pass_hat_k: Option<f64>,
    pub checks: Vec<CheckTally>,
    /// Means over the runs made.
    pub input_tokens: f64,
    pub output_tokens: f64,
    pub model_calls: f64,
    pub elapsed_ms: f64,
    /// Over all its runs.
    pub cost: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckTally {
    pub check: String,
    pub passed: u32,
    pub of: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Totals {
    pub cases: usize,
    pub runs: u32,
    pub passed: u32,
    pub errors: u32,
    /// Means over the cases with a run made.
    pub pass_at_1: Option<f64>,
    pub pass_at_k: Option<f64>,
    pub pass_hat_k: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls: u64,
    pub cost: f64,
    /// The runs' own times, added up (the eval's wall time is `Report::wall_ms`).
    pub elapsed_ms: u64,
}

impl Report {
    pub fn new(
        suite: String,
        config: String,
        models: Vec<String>,
        repeat: u32,
        wall_ms: u64,
        mut runs: Vec<CaseRun>,
    ) -> Report {
        runs.sort_by(|a, b| (&a.case, a.attempt).cmp(&(&b.case, b.attempt)));
        let mut by_case: BTreeMap<&str, Vec<&CaseRun>> = BTreeMap::new();
        for r in &runs {
            by_case.entry(&r.case).or_default().push(r);
        }
        let cases: Vec<CaseSummary> = by_case
            .into_iter()
            .map(|(case, rs)| summarise(case, &rs, repeat))
            .collect();
        let made: Vec<&CaseSummary> = cases.iter().filter(|c| c.pass_at_1.is_some()).collect();
        let mean = |f: fn(&CaseSummary) -> Option<f64>| {
            (!made.is_empty())
                .then(|| made.iter().filter_map(|c| f(c)).sum::<f64>() / made.len() as f64)
        };
        let totals = Totals {
            cases: cases.len(),
            runs: runs.len() as u32,
            passed: runs.iter().filter(|r| r.passed).count() as u32,
            errors: runs.iter().filter(|r| r.error.is_some()).count() as u32,
            pass_at_1: mean(|c| c.pass_at_1),
            pass_at_k: mean(|c| c.pass_at_k),
            pass_hat_k: mean(|c| c.pass_hat_k),
            input_tokens: runs.iter().map(|r| r.input_tokens).sum(),
            output_tokens: runs.iter().map(|r| r.output_tokens).sum(),
            model_calls: runs.iter().map(|r| r.model_calls).sum(),
            cost: runs.iter().map(|r| r.cost).sum(),
            elapsed_ms: runs.iter().map(|r| r.elapsed_ms).sum(),
        };
        Report {
            suite,
            config,
            models,
            repeat,
            wall_ms,
            cases,
            totals,
            runs,
        }
    }

    /// Every run was made and passed.
    pub fn all_passed(&self) -> bool {
        self.totals.runs > 0 && self.totals.passed == self.totals.runs
    }
}

fn summarise(case: &str, runs: &[&CaseRun], k: u32) -> CaseSummary {
    let made: Vec<&&CaseRun> = runs.iter().filter(|r| r.error.is_none()).collect();
    let (n, c) = (
        made.len() as u32,
        made.iter().filter(|r| r.passed).count() as u32,
    );
    let mut checks: Vec<CheckTally> = vec![];
    for v in made.iter().flat_map(|r| &r.verdicts) {
        match checks.iter_mut().find(|t| t.check == v.check) {
            Some(t) => {
                t.of += 1;
                t.passed += v.passed as u32;
            }
            None => checks.push(CheckTally {
                check: v.check.clone(),
                passed: v.passed as u32,
                of: 1,
            }),
        }
    }
    let mean = |f: fn(&CaseRun) -> u64| {
        if made.is_empty() {
            0.0
        } else {
            made.iter().map(|r| f(r) as f64).sum::<f64>() / made.len() as f64
        }
    };
    let k = k.min(n).max(1);
    CaseSummary {
        case: case.to_string(),
        runs: runs.len() as u32,
        passed: c,
        errors: runs.len() as u32 - n,
        pass_at_1: (n > 0).then(|| c as f64 / n as f64),
        pass_at_k: (n > 0).then(|| 1.0 - choose_ratio(n - c, n, k)),
        pass_hat_k: (n > 0).then(|| choose_ratio(c, n, k)),
        checks,
        input_tokens: mean(|r| r.input_tokens),
        output_tokens: mean(|r| r.output_tokens),
        model_calls: mean(|r| r.model_calls),
        elapsed_ms: mean(|r| r.elapsed_ms),
        cost: runs.iter().map(|r| r.cost).sum(),
    }
}

/// C(a, k) / C(n, k): the chance that k runs drawn from n all fall among a given a.
fn choose_ratio(a: u32, n: u32, k: u32) -> f64 {
    if a < k {
        return 0.0;
    }
    (0..k).map(|i| (a - i) as f64 / (n - i) as f64).product()
}

fn percent(p: Option<f64>) -> String {
    p.map_or("—".into(), |p| format!("{:.0}%", p * 100.0))
}

fn seconds(ms: f64) -> String {
    format!("{:.1} s", ms / 1000.0)
}

/// Thousands separated by commas.
fn count(n: f64) -> String {
    let digits = format!("{:.0}", n);
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The table a person reads: one row per case, the checks that failed below it, the totals.
pub fn table(report: &Report) -> String {
    let k = report.repeat;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} — {} case(s) × {k} — {}",
        report.suite,
        report.cases.len(),
        report.models.join(", ")
    );
    let width = report
        .cases
        .iter()
        .map(|c| c.case.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:width$}  {:>6}  {:>6}  {:>7}  {:>10}  {:>9}  {:>8}  {:>5}",
        "case", "passed", "pass@1", "pass^k", "tokens", "cost", "time", "calls"
    );
    for c in &report.cases {
        let passed = if c.errors > 0 {
            format!("{}/{}!", c.passed, c.runs - c.errors)
        } else {
            format!("{}/{}", c.passed, c.runs)
        };
        let _ = writeln!(
            out,
            "{:width$}  {:>6}  {:>6}  {:>7}  {:>10}  {:>9}  {:>8}  {:>5.0}",
            c.case,
            passed,
            percent(c.pass_at_1),
            percent(c.pass_hat_k),
            count(c.input_tokens + c.output_tokens),
            format!("${:.4}", c.cost),
            seconds(c.elapsed_ms),
            c.model_calls
        );
        let marks: Vec<String> = c
            .checks
            .iter()
            .map(|t| {
                let mark = if t.passed == t.of { "✓" } else { "✗" };
                if k > 1 {
                    format!("{mark} {} {}/{}", t.check, t.passed, t.of)
                } else {
                    format!("{mark} {}", t.check)
                }
            })
            .collect();
        if !marks.is_empty() {
            let _ = writeln!(out, "{:width$}  {}", "", marks.join("  "));
        }
        // Why: the first run in which each check failed, and harness errors.
        for r in report.runs.iter().filter(|r| r.case == c.case) {
            if let Some(e) = &r.error {
                let _ = writeln!(out, "{:width$}  ! run {}: {e}", "", r.attempt);
            }
        }
        for t in c.checks.iter().filter(|t| t.passed < t.of) {
            let first = report
                .runs
                .iter()
                .filter(|r| r.case == c.case)
                .find_map(|r| {
                    r.verdicts
                        .iter()
                        .find(|v| v.check == t.check && !v.passed)
                        .map(|v| (r, v))
                });
            if let Some((r, v)) = first {
                let _ = writeln!(
                    out,
                    "{:width$}  ✗ {} (run {}): {}",
                    "", v.check, r.attempt, v.detail
                );
            }
        }
    }
    let t = &report.totals;
    let _ = writeln!(
        out,
        "\n{} of {} runs passed{}; pass@1 {}{}; {} tokens ({} in, {} out), ${:.4}, {} model calls; {} of runs, {} wall",
        t.passed,
        t.runs,
        if t.errors > 0 {
            format!(" ({} could not run)", t.errors)
        } else {
            String::new()
        },
        percent(t.pass_at_1),
        if k > 1 {
            format!(
                ", pass@{k} {}, pass^{k} {}",
                percent(t.pass_at_k),
                percent(t.pass_hat_k)
            )
        } else {
            String::new()
        },
        count((t.input_tokens + t.output_tokens) as f64),
        count(t.input_tokens as f64),
        count(t.output_tokens as f64),
        t.cost,
        t.model_calls,
        seconds(t.elapsed_ms as f64),
        seconds(report.wall_ms as f64),
    );
    out
}

/// Two reports side by side: each case's pass rate, tokens and time in A and in B, and
/// what changed.
pub fn compare(a: &Report, b: &Report, a_name: &str, b_name: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {a_name} — {} — {}", a.suite, a.models.join(", "));
    let _ = writeln!(out, "B: {b_name} — {} — {}", b.suite, b.models.join(", "));
    let mut names: Vec<&str> = a
        .cases
        .iter()
        .chain(&b.cases)
        .map(|c| c.case.as_str())
        .collect();
    names.sort();
    names.dedup();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "{:width$}  {:>7} {:>7}  {:>10} {:>10}  {:>8} {:>8}  ",
        "case", "A pass", "B pass", "A tokens", "B tokens", "A time", "B time"
    );
    let find = |r: &'_ Report, n: &str| r.cases.iter().find(|c| c.case == n).cloned();
    let (mut better, mut worse) = (0, 0);
    for n in names {
        let (ca, cb) = (find(a, n), find(b, n));
        let rate = |c: &Option<CaseSummary>| c.as_ref().and_then(|c| c.pass_at_1);
        let (ra, rb) = (rate(&ca), rate(&cb));
        let change = match (ra, rb) {
            (Some(x), Some(y)) if y > x => {
                better += 1;
                "better"
            }
            (Some(x), Some(y)) if y < x => {
                worse += 1;
                "WORSE"
            }
            (Some(_), Some(_)) => "",
            (None, Some(_)) | (Some(_), None) => "only one",
            (None, None) => "",
        };
        let tokens = |c: &Option<CaseSummary>| {
            c.as_ref()
                .map_or("—".into(), |c| count(c.input_tokens + c.output_tokens))
        };
        let time =
            |c: &Option<CaseSummary>| c.as_ref().map_or("—".into(), |c| seconds(c.elapsed_ms));
        let _ = writeln!(
            out,
            "{n:width$}  {:>7} {:>7}  {:>10} {:>10}  {:>8} {:>8}  {change}",
            percent(ra),
            percent(rb),
            tokens(&ca),
            tokens(&cb),
            time(&ca),
            time(&cb)
        );
    }
    let line = |r: &Report| {
        let t = &r.totals;
        format!(
            "pass@1 {}, pass^{} {}, {} tokens, ${:.4}, {} model calls, {}",
            percent(t.pass_at_1),
            r.repeat,
            percent(t.pass_hat_k),
            count((t.input_tokens + t.output_tokens) as f64),
            t.cost,
            t.model_calls,
            seconds(t.elapsed_ms as f64)
        )
    };
    let _ = writeln!(out, "\nA: {}\nB: {}", line(a), line(b));
    let _ = writeln!(out, "B against A: {better} case(s) better, {worse} worse");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::checks::Verdict;

    fn run(case: &str, attempt: u32, passed: bool) -> CaseRun {
        CaseRun {
            case: case.into(),
            attempt,
            run_id: format!("r{attempt}"),
            passed,
            status: "completed".into(),
            verdicts: vec![Verdict {
                check: "answer".into(),
                passed,
                detail: if passed {
                    String::new()
                } else {
                    "the answer lacks \"25\"".into()
                },
            }],
            input_tokens: 100,
            output_tokens: 10,
            cost: 0.001,
            model_calls: 3,
            elapsed_ms: 2000,
            tool_calls: vec![],
            workspace: "w".into(),
            error: None,
        }
    }

    #[test]
    fn pass_rates_over_repeats() {
        let runs = vec![
            run("a", 1, true),
            run("a", 2, true),
            run("a", 3, false),
            run("b", 1, true),
            run("b", 2, true),
            run("b", 3, true),
        ];
        let r = Report::new("s".into(), "c".into(), vec![], 3, 1, runs);
        let a = &r.cases[0];
        assert_eq!((a.passed, a.runs), (2, 3));
        assert!((a.pass_at_1.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!((a.pass_at_k, a.pass_hat_k), (Some(1.0), Some(0.0)));
        assert_eq!(r.cases[1].pass_hat_k, Some(1.0));
        assert_eq!(r.totals.pass_hat_k, Some(0.5));
        assert!(!r.all_passed());
        let table = table(&r);
        assert!(
            table.contains("✗ answer (run 3): the answer lacks"),
            "{table}"
        );
        assert!(table.contains("5 of 6 runs passed"), "{table}");
    }

    #[test]
    fn harness_errors_are_not_failures() {
        let mut broken = run("a", 1, false);
        broken.error = Some("the runtime did not start".into());
        broken.verdicts.clear();
        let r = Report::new(
            "s".into(),
            "c".into(),
            vec![],
            2,
            1,
            vec![broken, run("a", 2, true)],
        );
        let a = &r.cases[0];
        assert_eq!((a.errors, a.passed, a.pass_at_1), (1, 1, Some(1.0)));
        assert!(table(&r).contains("! run 1: the runtime did not start"));
    }

    #[test]
    fn unbiased_pass_at_k() {
        // n = 5 runs, c = 2 passed, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10.
        assert!((1.0 - choose_ratio(3, 5, 2) - 0.7).abs() < 1e-9);
        assert!((choose_ratio(2, 5, 2) - 0.1).abs() < 1e-9);
        assert_eq!(choose_ratio(1, 5, 2), 0.0);
    }

    #[test]
    fn a_comparison_names_what_got_worse() {
        let a = Report::new(
            "s".into(),
            "A".into(),
            vec![],
            1,
            1,
            vec![run("x", 1, true), run("y", 1, false)],
        );
        let b = Report::new(
            "s".into(),
            "B".into(),
            vec![],
            1,
            1,
            vec![run("x", 1, false), run("y", 1, true)],
        );
        let text = compare(&a, &b, "a.json", "b.json");
        assert!(text.contains("WORSE") && text.contains("better"), "{text}");
        assert!(text.contains("1 case(s) better, 1 worse"), "{text}");
    }
}
