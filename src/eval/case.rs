//! A suite's cases: each directory's `case.toml` read into a `Case` (the task, how a person
//! answers, the limits and the checks), with errors that name the file, the line and the
//! key. Owns the case file's format (`evals/README.md`); knows nothing of running a flow.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::{FlowMode, FlowStatus};
use regex::Regex;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::checks::{Check, Expected, FileRule, MatchMode, TextRule, read_beneath};

/// One case of a suite.
#[derive(Debug)]
pub struct Case {
    /// The directory's name.
    pub name: String,
    /// The case's directory (absolute).
    pub dir: PathBuf,
    pub task: String,
    pub mode: FlowMode,
    /// What a person answers to `ask_human`, in order.
    pub answers: Vec<String>,
    /// Whether tool calls held for approval are approved (else rejected).
    pub approve: bool,
    /// How every agent of the case acts, when the case says (`action`); else as configured.
    pub action: Option<manus_actors::agent::Action>,
    /// The case's runs keep notes across runs (`memory = true`): `[memory]` on, with its
    /// defaults unless the config sets it, in the case run's own store.
    pub memory: bool,
    /// Wall time after which the flow is cancelled (the `seconds` limit).
    pub deadline: Option<Duration>,
    /// The checks, the flow's status first.
    pub checks: Vec<Check>,
    /// The turns after the first (`[[turns]]`), in order, each run once the one before
    /// has ended and been checked.
    pub turns: Vec<Turn>,
}

/// A later turn of a case: a follow-up in the same conversation, or a new run beside it
/// (same workspace, run store and memory), with what a person answers and its own checks.
#[derive(Debug)]
pub struct Turn {
    pub task: String,
    /// A new conversation instead of the previous turn's next turn (`new_thread = true`).
    pub new_thread: bool,
    pub answers: Vec<String>,
    /// The turn's checks, its flow's status first.
    pub checks: Vec<Check>,
}

impl Case {
    /// The case's `files/` directory, copied into each run's workspace.
    pub fn files(&self) -> PathBuf {
        self.dir.join("files")
    }

    /// The case's `site/` directory, served to its browser as `http://site.test/`.
    pub fn site(&self) -> PathBuf {
        self.dir.join("site")
    }
}

/// The cases of the suite at `dir`, by name: each subdirectory holding a `case.toml`, or
/// `dir` itself when it holds one. `only` keeps the cases named by one of its words (the
/// whole name, else a part of it).
pub fn load_suite(dir: &Path, only: &[String]) -> Result<Vec<Case>, String> {
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("cannot open the suite {}: {e}", dir.display()))?;
    let mut dirs = vec![];
    if dir.join("case.toml").is_file() {
        dirs.push(dir.clone());
    } else {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| format!("cannot read the suite {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.join("case.toml").is_file() {
                dirs.push(path);
            }
        }
    }
    dirs.sort();
    let name_of = |d: &Path| {
        d.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // A word that is a case's whole name picks that case alone; another, every case whose
    // name holds it.
    let names: Vec<String> = dirs.iter().map(|d| name_of(d)).collect();
    let picks = |name: &str, word: &str| {
        name == word || (!names.iter().any(|n| n == word) && name.contains(word))
    };
    if let Some(unknown) = only.iter().find(|w| !names.iter().any(|n| picks(n, w))) {
        return Err(format!(
            "no case of {} is named like {unknown:?}; its cases: {}",
            dir.display(),
            names.join(", ")
        ));
    }
    dirs.retain(|d| only.is_empty() || only.iter().any(|w| picks(&name_of(d), w)));
    if dirs.is_empty() {
        return Err(format!(
            "{} holds no case: a case is a directory with a case.toml (evals/README.md)",
            dir.display()
        ));
    }
    dirs.iter().map(|d| load_case(d, name_of(d))).collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseToml {
    task: String,
    #[serde(default)]
    mode: ModeToml,
    expect: Option<FlowStatus>,
    #[serde(default)]
    answers: Vec<String>,
    #[serde(default)]
    approvals: ApprovalsToml,
    action: Option<manus_actors::agent::Action>,
    #[serde(default)]
    memory: bool,
    #[serde(default)]
    limits: LimitsToml,
    #[serde(default)]
    checks: Vec<toml::Spanned<CheckToml>>,
    #[serde(default)]
    turns: Vec<toml::Spanned<TurnToml>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnToml {
    task: String,
    #[serde(default)]
    new_thread: bool,
    expect: Option<FlowStatus>,
    #[serde(default)]
    answers: Vec<String>,
    #[serde(default)]
    checks: Vec<toml::Spanned<CheckToml>>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum ModeToml {
    #[default]
    Flow,
    Single,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum ApprovalsToml {
    Approve,
    #[default]
    Reject,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsToml {
    tokens: Option<toml::Spanned<u64>>,
    seconds: Option<toml::Spanned<u64>>,
    model_calls: Option<toml::Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum CheckToml {
    File {
        path: String,
        #[serde(default)]
        contains: Vec<String>,
        matches: Option<String>,
        equals: Option<String>,
        same_as: Option<String>,
        #[serde(default)]
        absent: bool,
    },
    Command {
        run: String,
        timeout_secs: Option<u64>,
    },
    Answer {
        #[serde(default)]
        contains: Vec<String>,
        matches: Option<String>,
        equals: Option<String>,
    },
    Trajectory {
        #[serde(rename = "match")]
        mode: MatchMode,
        #[serde(default)]
        tools: Vec<String>,
        #[serde(default)]
        calls: Vec<CallToml>,
        step: Option<usize>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallToml {
    tool: String,
    #[serde(default)]
    arguments: Map<String, Value>,
}

/// The longest a command check may be given.
const MAX_COMMAND_SECS: u64 = 3600;

/// The longest a case may run (`limits.seconds`): a week. Far longer overflows the clock
/// when added to the present moment.
const MAX_SECS: u64 = 7 * 24 * 3600;

fn load_case(dir: &Path, name: String) -> Result<Case, String> {
    let file = dir.join("case.toml");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let t: CaseToml = toml::from_str(&text)
        .map_err(|e| format!("{}: {}", file.display(), e.to_string().trim_end()))?;
    let at = |span: std::ops::Range<usize>, key: &str, why: String| {
        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
        format!("{}, line {line}: {key}: {why}", file.display())
    };
    if t.task.trim().is_empty() {
        return Err(format!(
            "{}: task: is empty; say what the case asks",
            file.display()
        ));
    }
    let mut checks = checks_of(t.checks, t.expect, "", dir, &at)?;
    let mut turns = vec![];
    for (n, spanned) in t.turns.into_iter().enumerate() {
        let span = spanned.span();
        let turn = spanned.into_inner();
        if turn.task.trim().is_empty() {
            return Err(at(
                span,
                &format!("turns[{n}].task"),
                "is empty; say what the turn asks".into(),
            ));
        }
        let prefix = format!("turns[{n}].");
        turns.push(Turn {
            checks: checks_of(turn.checks, turn.expect, &prefix, dir, &at)?,
            task: turn.task,
            new_thread: turn.new_thread,
            answers: turn.answers,
        });
    }
    // `allowed` says what `1..=most` is in words.
    let limit = |v: Option<toml::Spanned<u64>>, key: &str, most: u64, allowed: &str| {
        let Some(v) = v else { return Ok(None) };
        let n = *v.get_ref();
        if (1..=most).contains(&n) {
            return Ok(Some(n));
        }
        Err(at(
            v.span(),
            &format!("limits.{key}"),
            format!("{n} is out of range: use {allowed}"),
        ))
    };
    let tokens = limit(t.limits.tokens, "tokens", u64::MAX, "at least 1")?;
    let model_calls = limit(t.limits.model_calls, "model_calls", u64::MAX, "at least 1")?;
    let seconds = limit(
        t.limits.seconds,
        "seconds",
        MAX_SECS,
        &format!("1 to {MAX_SECS} seconds (a week)"),
    )?;
    // The limits hold for each turn's flow.
    let limits = || {
        let tokens = tokens.map(Check::Tokens);
        let calls = model_calls.map(Check::ModelCalls);
        tokens
            .into_iter()
            .chain(calls)
            .chain(seconds.map(Check::Seconds))
    };
    checks.extend(limits());
    for turn in &mut turns {
        turn.checks.extend(limits());
    }
    Ok(Case {
        name,
        dir: dir.to_path_buf(),
        task: t.task,
        mode: match t.mode {
            ModeToml::Flow => FlowMode::Plan,
            ModeToml::Single => FlowMode::Single,
        },
        answers: t.answers,
        approve: t.approvals == ApprovalsToml::Approve,
        action: t.action,
        memory: t.memory,
        deadline: seconds.map(Duration::from_secs),
        checks,
        turns,
    })
}

/// A flow's checks from their TOML (`prefix` names where they are: "" or "turns[N]."),
/// the flow's status (`expect`, else completed) first.
fn checks_of(
    list: Vec<toml::Spanned<CheckToml>>,
    expect: Option<FlowStatus>,
    prefix: &str,
    dir: &Path,
    at: &impl Fn(std::ops::Range<usize>, &str, String) -> String,
) -> Result<Vec<Check>, String> {
    let mut checks = vec![Check::Status(expect.unwrap_or(FlowStatus::Completed))];
    for (i, spanned) in list.into_iter().enumerate() {
        let span = spanned.span();
        let key = |k: &str| format!("{prefix}checks[{i}].{k}");
        let check = match spanned.into_inner() {
            CheckToml::File {
                path,
                contains,
                matches,
                equals,
                same_as,
                absent,
            } => {
                if !relative(&path) {
                    return Err(at(
                        span,
                        &key("path"),
                        format!("`{path}` is not a path inside the workspace (relative, no ..)"),
                    ));
                }
                let equals = match (equals, same_as) {
                    (Some(_), Some(_)) => {
                        return Err(at(
                            span,
                            &key("same_as"),
                            "give equals or same_as, not both".into(),
                        ));
                    }
                    (e, None) => e,
                    (None, Some(other)) if !relative(&other) => {
                        return Err(at(
                            span,
                            &key("same_as"),
                            format!(
                                "`{other}` is not a path inside the case directory (relative, no ..)"
                            ),
                        ));
                    }
                    (None, Some(other)) => Some(
                        read_beneath(dir, &other, "the case directory")
                            .map_err(|why| at(span.clone(), &key("same_as"), why))?,
                    ),
                };
                let text = text_rule(contains, matches, equals)
                    .map_err(|why| at(span.clone(), &key("matches"), why))?;
                let rule = match (absent, text) {
                    (true, Some(_)) => {
                        return Err(at(
                            span,
                            &key("absent"),
                            "an absent file has no content to check".into(),
                        ));
                    }
                    (true, None) => FileRule::Absent,
                    (false, None) => FileRule::Exists,
                    (false, Some(t)) => FileRule::Text(t),
                };
                Check::File { path, rule }
            }
            CheckToml::Command { run, timeout_secs } => {
                let secs = timeout_secs.unwrap_or(30);
                if !(1..=MAX_COMMAND_SECS).contains(&secs) {
                    return Err(at(
                        span,
                        &key("timeout_secs"),
                        format!("{secs} is out of range: 1 to {MAX_COMMAND_SECS} seconds"),
                    ));
                }
                Check::Command {
                    run,
                    timeout: Duration::from_secs(secs),
                }
            }
            CheckToml::Answer {
                contains,
                matches,
                equals,
            } => match text_rule(contains, matches, equals) {
                Ok(Some(rule)) => Check::Answer(rule),
                Ok(None) => {
                    return Err(at(
                        span,
                        &key("matches"),
                        "an answer check needs contains, matches or equals".into(),
                    ));
                }
                Err(why) => return Err(at(span, &key("matches"), why)),
            },
            CheckToml::Trajectory {
                mode,
                tools,
                calls,
                step,
            } => {
                let expected: Vec<Expected> = match (tools.is_empty(), calls.is_empty()) {
                    (false, false) => {
                        return Err(at(
                            span,
                            &key("calls"),
                            "give tools (names) or calls (names with arguments), not both".into(),
                        ));
                    }
                    (true, true) => {
                        return Err(at(
                            span,
                            &key("tools"),
                            "a trajectory check needs the tools (or calls) it expects".into(),
                        ));
                    }
                    (false, true) => tools
                        .into_iter()
                        .map(|tool| Expected {
                            tool,
                            arguments: Map::new(),
                        })
                        .collect(),
                    (true, false) => calls
                        .into_iter()
                        .map(|c| Expected {
                            tool: c.tool,
                            arguments: c.arguments,
                        })
                        .collect(),
                };
                Check::Trajectory {
                    mode,
                    expected,
                    step,
                }
            }
        };
        checks.push(check);
    }
    Ok(checks)
}

/// `path` is relative and does not go up (no `..`).
fn relative(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// A text rule from its three keys, `None` if none is given.
fn text_rule(
    contains: Vec<String>,
    matches: Option<String>,
    equals: Option<String>,
) -> Result<Option<TextRule>, String> {
    let matches = matches
        .map(|m| Regex::new(&m).map_err(|e| format!("not a valid regex: {e}")))
        .transpose()?;
    Ok(
        (!contains.is_empty() || matches.is_some() || equals.is_some()).then_some(TextRule {
            contains,
            matches,
            equals,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(text: &str) -> Result<Case, String> {
        case_with(text, |_| {})
    }

    /// A case whose directory `make` fills besides its case.toml.
    fn case_with(text: &str, make: impl FnOnce(&Path)) -> Result<Case, String> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("manus-eval-case-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("case.toml"), text).unwrap();
        make(&dir);
        let loaded = load_case(&dir, "c".into());
        std::fs::remove_dir_all(&dir).unwrap();
        loaded
    }

    /// Later turns carry their own task, answers and checks (status first), the limits
    /// apply to each, and a bad turn is named with its line.
    #[test]
    fn turns_carry_their_own_checks() {
        let c = case(
            "task = \"one\"\n[limits]\ntokens = 100\n\n[[turns]]\ntask = \"two\"\nanswers = [\"yes\"]\n\
             [[turns.checks]]\nkind = \"answer\"\ncontains = [\"x\"]\n\n\
             [[turns]]\ntask = \"three\"\nnew_thread = true\nexpect = \"failed\"\n",
        )
        .unwrap();
        assert_eq!(c.turns.len(), 2);
        assert_eq!(
            (c.turns[0].task.as_str(), c.turns[0].new_thread),
            ("two", false)
        );
        assert_eq!(c.turns[0].answers, ["yes"]);
        let names = |checks: &[Check]| checks.iter().map(Check::name).collect::<Vec<_>>();
        assert_eq!(names(&c.turns[0].checks), ["status", "answer", "tokens"]);
        assert!(c.turns[1].new_thread);
        assert!(matches!(
            c.turns[1].checks[0],
            Check::Status(FlowStatus::Failed)
        ));
        let bad = case(
            "task = \"one\"\n\n[[turns]]\ntask = \"two\"\n[[turns.checks]]\nkind = \"answer\"\n",
        )
        .unwrap_err();
        assert!(bad.contains("line 5: turns[0].checks[0].matches"), "{bad}");
        let empty = case("task = \"one\"\n[[turns]]\ntask = \" \"\n").unwrap_err();
        assert!(empty.contains("turns[0].task: is empty"), "{empty}");
    }

    #[test]
    fn a_case_reads_its_checks_and_limits() {
        let c = case(
            "task = \"t\"\nmode = \"single\"\nanswers = [\"a\"]\n[limits]\nseconds = 9\ntokens = 100\n\
             [[checks]]\nkind = \"file\"\npath = \"a.txt\"\ncontains = [\"x\"]\n\
             [[checks]]\nkind = \"trajectory\"\nmatch = \"in_order\"\ncalls = [{ tool = \"bash\", arguments = { command = \"ls\" } }]\n",
        )
        .unwrap();
        assert_eq!(c.mode, FlowMode::Single);
        assert_eq!(c.deadline, Some(Duration::from_secs(9)));
        let names: Vec<String> = c.checks.iter().map(Check::name).collect();
        assert_eq!(
            names,
            ["status", "file a.txt", "trajectory", "tokens", "time"]
        );
    }

    #[test]
    fn mistakes_name_the_line_and_key() {
        let bad_regex =
            case("task = \"t\"\n\n[[checks]]\nkind = \"answer\"\nmatches = \"(\"\n").unwrap_err();
        assert!(
            bad_regex.contains("line 3") && bad_regex.contains("checks[0].matches"),
            "{bad_regex}"
        );
        let typo =
            case("task = \"t\"\n[[checks]]\nkind = \"answer\"\ncontain = [\"x\"]\n").unwrap_err();
        // The parser names the check's table and the unknown key.
        assert!(
            typo.contains("line 2") && typo.contains("unknown field `contain`"),
            "{typo}"
        );
        let outside =
            case("task = \"t\"\n[[checks]]\nkind = \"file\"\npath = \"../x\"\n").unwrap_err();
        assert!(
            outside.contains("not a path inside the workspace"),
            "{outside}"
        );
        let zero = case("task = \"t\"\n[limits]\ntokens = 0\n").unwrap_err();
        assert!(
            zero.contains("limits.tokens") && zero.contains("at least 1"),
            "{zero}"
        );
    }

    /// `same_as` reads a regular file of the case directory, bounded: `/dev/zero` (read
    /// whole, it never ends) and a named pipe there (it would wait) are refused.
    #[test]
    fn same_as_reads_only_a_file_of_the_case() {
        let check = |same_as: &str| {
            format!(
                "task = \"t\"\n[[checks]]\nkind = \"file\"\npath = \"a\"\nsame_as = \"{same_as}\"\n"
            )
        };
        let zero = case(&check("/dev/zero")).unwrap_err();
        assert!(
            zero.contains("line 2")
                && zero.contains("checks[0].same_as")
                && zero.contains("not a path inside the case directory"),
            "{zero}"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let loaded = case_with(&check("expected/pipe"), |dir| {
                std::fs::create_dir(dir.join("expected")).unwrap();
                let pipe = dir
                    .join("expected/pipe")
                    .into_os_string()
                    .into_encoded_bytes();
                let pipe = std::ffi::CString::new(pipe).unwrap();
                // SAFETY: a NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(pipe.as_ptr(), 0o644) }, 0);
            });
            tx.send(loaded.map(|_| ()))
        });
        let pipe = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("reading same_as hung")
            .unwrap_err();
        assert!(
            pipe.contains("checks[0].same_as") && pipe.contains("named pipe"),
            "{pipe}"
        );
        let kept = case_with(&check("expected/out.txt"), |dir| {
            std::fs::create_dir(dir.join("expected")).unwrap();
            std::fs::write(dir.join("expected/out.txt"), "42\n").unwrap();
        })
        .unwrap();
        assert_eq!(kept.checks.len(), 2);
    }

    /// Each limit names its line, its key and the range it takes; a time limit past a week
    /// would overflow the clock when the run starts.
    #[test]
    fn limits_out_of_range_say_the_range() {
        let huge = case("task = \"t\"\n[limits]\nseconds = 9223372036854775807\n").unwrap_err();
        assert!(
            huge.contains("line 3")
                && huge.contains("limits.seconds")
                && huge.contains("use 1 to 604800 seconds"),
            "{huge}"
        );
        let zero = case("task = \"t\"\n[limits]\nmodel_calls = 0\n").unwrap_err();
        assert!(
            zero.contains("line 3")
                && zero.contains("limits.model_calls")
                && zero.contains("at least 1"),
            "{zero}"
        );
        let week = case("task = \"t\"\n[limits]\nseconds = 604800\n").unwrap();
        assert_eq!(week.deadline, Some(Duration::from_secs(604800)));
    }
}
