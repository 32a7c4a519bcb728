//! `eval SUITE`: run a suite's cases with a progress line on stderr, then print the report
//! (a table, or JSON with `--json`); `eval --compare A.json B.json`: two reports side by side.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use manus_rt::Config;
use manus_rt::eval::{self, CaseRun, Report, Schedule, report};

use super::args::EvalArgs;
use super::exit;

pub async fn run(config: Config, args: EvalArgs) -> ExitCode {
    if let [a, b] = args.compare.as_slice() {
        return compare(a, b);
    }
    let Some(suite) = args.suite.as_deref() else {
        return exit::not_started_because("eval needs a suite (or --compare A.json B.json)");
    };
    let cases = match eval::load_suite(suite, &args.cases) {
        Ok(c) => c,
        Err(e) => return exit::not_started_because(e),
    };
    if config.sandbox.as_ref().is_some_and(|s| s.mount.is_none()) {
        return exit::not_started_because(
            "eval checks each run's workspace on this machine, and this config's sandbox keeps the files in \
             its container: set [sandbox] mount_workspace = true",
        );
    }
    if let Some(found) = &config.model_source {
        eprintln!("note: {found}");
    }
    if config.example
        && config
            .model_source
            .as_deref()
            .is_none_or(|s| s.contains("replay"))
    {
        eprintln!(
            "note: this config replays the README example's cassette, which fits no case; the shipped suite \
             replays its own with --config config/eval-replay.toml, or point [llm] at a model"
        );
    }
    let out = args.out.clone().unwrap_or_else(|| {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Path::new("eval-runs").join(secs.to_string())
    });
    let out = match std::fs::create_dir_all(&out).and_then(|_| out.canonicalize()) {
        Ok(o) => o,
        Err(e) => {
            return exit::not_started_because(format!(
                "cannot use {} for the runs: {e}",
                out.display()
            ));
        }
    };
    let schedule = Schedule {
        repeat: args.repeat,
        parallel: args.parallel as usize,
        out: out.clone(),
        record: args.record,
    };
    let total = cases.len() * args.repeat as usize;
    eprintln!(
        "eval: {} case(s) × {} run(s), {} at once; workspaces under {}",
        cases.len(),
        args.repeat,
        args.parallel,
        out.display()
    );
    let started = Instant::now();
    let live = std::io::stderr().is_terminal();
    let runs = eval::run_suite(&config, cases, &schedule, |run, done| {
        progress(run, done, total, live)
    })
    .await;
    if live {
        eprintln!();
    }
    let models = config
        .llm
        .iter()
        .map(|(name, s)| format!("{name}: {}", model_of(s)))
        .collect();
    let report = Report::new(
        suite.display().to_string(),
        config.source.clone(),
        models,
        args.repeat,
        started.elapsed().as_millis() as u64,
        runs,
    );
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", report::table(&report));
    }
    if args.record {
        eprintln!("eval: each case's model exchanges were written to its cassette.jsonl");
    }
    if report.all_passed() {
        ExitCode::SUCCESS
    } else {
        exit::failed()
    }
}

/// What a profile talks to, for the report's header.
fn model_of(s: &manus_rt::engine::llm::LlmSettings) -> String {
    if let Some(cassette) = &s.cassette {
        format!("replay of {}", cassette.name())
    } else {
        format!("{} at {}", s.model, s.base_url)
    }
}

/// One run ended: a bar that fills on a terminal, a line each otherwise.
fn progress(run: &CaseRun, done: usize, total: usize, live: bool) {
    let how = match (&run.error, run.passed) {
        (Some(e), _) => format!("could not run: {e}"),
        (None, true) => "passed".to_string(),
        (None, false) => {
            let failed: Vec<&str> = run
                .verdicts
                .iter()
                .filter(|v| !v.passed)
                .map(|v| v.check.as_str())
                .collect();
            format!("FAILED ({})", failed.join(", "))
        }
    };
    let line = format!(
        "{done}/{total} {} (run {}): {how}, {:.1} s",
        run.case,
        run.attempt,
        run.elapsed_ms as f64 / 1000.0
    );
    if live {
        const WIDTH: usize = 24;
        let filled = done * WIDTH / total.max(1);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2K[{}{}] {line}",
            "#".repeat(filled),
            "-".repeat(WIDTH - filled)
        );
        let _ = err.flush();
    } else {
        eprintln!("eval: {line}");
    }
}

fn compare(a: &Path, b: &Path) -> ExitCode {
    let read = |p: &Path| -> Result<Report, String> {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a report of `manus-rt eval --json`: {e}",
                p.display()
            )
        })
    };
    match (read(a), read(b)) {
        (Ok(ra), Ok(rb)) => {
            print!(
                "{}",
                report::compare(&ra, &rb, &a.display().to_string(), &b.display().to_string())
            );
            ExitCode::SUCCESS
        }
        (Err(e), _) | (_, Err(e)) => exit::not_started_because(e),
    }
}
