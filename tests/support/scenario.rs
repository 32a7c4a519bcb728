//! Test scaffolding around the scripted model: scratch directories, config text pointing at
//! the scripted server, and the example task's script (also used to record the shipped
//! cassette).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;

use super::llm_server::{Reply, ScriptedLlm};

/// Where a run without a config file looks for local model servers, pointed at a closed
/// port: tests never depend on an Ollama or llama.cpp server this machine may run (remove
/// `OPENAI_API_KEY` too).
pub const NO_MODELS_NEARBY: [(&str, &str); 2] = [
    ("MANUS_OLLAMA_URL", "http://127.0.0.1:1"),
    ("MANUS_LLAMACPP_URL", "http://127.0.0.1:1"),
];

/// A fresh directory under the system temp dir, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "manus-rt-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn workspace(&self) -> PathBuf {
        self.0.join("workspace")
    }

    /// Write `text` as config.toml here and return its path.
    pub fn write_config(&self, text: &str) -> PathBuf {
        let p = self.0.join("config.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A two-agent config against the scripted server, recording runs in `runs.db` beside the
/// workspace; `extra` is appended verbatim.
pub fn config_text(server: &ScriptedLlm, workspace: &Path, extra: &str) -> String {
    config_text_for(&server.base_url(), workspace, extra)
}

/// `config_text` for a model server at `base_url` (one in another process, say).
pub fn config_text_for(base_url: &str, workspace: &Path, extra: &str) -> String {
    format!(
        r#"[llm]
api_type = "openai"
base_url = "{}"
model = "gpt-4o-mini"
api_key = "test-key"
max_retries = 2
timeout_secs = 10

[runtime]
workspace = "{}"

[store]
url = "sqlite://{}"

[tools]
python_timeout_secs = 20
bash_timeout_secs = 20

[agents.manus]
profile = "manus"
max_steps = 6

[agents.data_analysis]
profile = "data_analysis"
max_steps = 6

[flow]
primary_agent = "manus"
step_timeout_secs = 60
flow_timeout_secs = 120
max_step_retries = 1
{extra}
"#,
        base_url,
        workspace.display(),
        workspace.with_file_name("runs.db").display()
    )
}

/// The README's example task.
pub const EXAMPLE_TASK: &str = "Find the prime numbers below 100, save them to primes.txt, and report how many there are and their sum.";

/// The model's side of the example flow: a two-step plan, a MANUS step that writes and runs
/// a script, a DATA_ANALYSIS step that checks the numbers, and a summary.
pub fn example_script() -> Vec<Reply> {
    let script = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n\n\
                  primes = [n for n in range(100) if is_prime(n)]\n\
                  with open(\"primes.txt\", \"w\") as f:\n    f.write(\"\\n\".join(map(str, primes)) + \"\\n\")\n\
                  print(f\"wrote {len(primes)} primes\")\n";
    vec![
        Reply::tool(
            "planning",
            json!({"command": "create", "plan_id": "primes", "title": "Primes below 100",
                   "steps": ["[MANUS] Write primes.py that writes the primes below 100 to primes.txt, one per line, and run it",
                             "[DATA_ANALYSIS] Read primes.txt and report how many primes it holds and their sum"]}),
        ),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "primes.py", "file_text": script}),
        )
        .with_text("I will write the script first."),
        Reply::tool(
            "bash",
            json!({"command": "python3 primes.py && wc -l primes.txt"}),
        ),
        Reply::tool("terminate", json!({"status": "success"})).with_text(
            "primes.py is written and ran: primes.txt holds the primes below 100, one per line.",
        ),
        Reply::tool(
            "python_execute",
            json!({"code": "nums = [int(x) for x in open('primes.txt').read().split()]\nprint(len(nums), sum(nums))"}),
        ),
        Reply::tool("terminate", json!({"status": "success"}))
            .with_text("primes.txt holds 25 primes below 100; their sum is 1060."),
        Reply::text(
            "Done. primes.py found the prime numbers below 100 and saved them to primes.txt: there are 25 of \
             them, and their sum is 1060.",
        ),
    ]
}

/// `config_text(server, workspace, "")` with keys replaced, added or removed. Each override
/// is `("table.key", value)` where `value` is TOML syntax (`"0"`, `"\"stop\""`), or `""` to
/// remove the key; `agents.manus.max_steps` reaches nested tables. Use it instead of `extra`
/// to change a key `config_text` already sets (a repeated key is a TOML error).
pub fn config_with(server: &ScriptedLlm, workspace: &Path, overrides: &[(&str, &str)]) -> String {
    config_with_for(&server.base_url(), workspace, overrides)
}

/// `config_with` for a model server at `base_url`.
pub fn config_with_for(base_url: &str, workspace: &Path, overrides: &[(&str, &str)]) -> String {
    let mut doc: toml::Table = config_text_for(base_url, workspace, "")
        .parse()
        .expect("config_text is valid TOML");
    for (path, value) in overrides {
        let parts: Vec<&str> = path.split('.').collect();
        let (key, tables) = parts.split_last().expect("a non-empty key path");
        let mut table = &mut doc;
        for name in tables {
            table = table
                .entry(name.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .unwrap_or_else(|| panic!("`{name}` in `{path}` is not a table"));
        }
        if value.is_empty() {
            table.remove(*key);
        } else {
            let mut holder: toml::Table = format!("v = {value}")
                .parse()
                .unwrap_or_else(|e| panic!("override {path} = {value} is not TOML: {e}"));
            table.insert(key.to_string(), holder.remove("v").unwrap());
        }
    }
    toml::to_string(&doc).expect("the config serialises")
}

/// A runtime on `config`, running `task` with the primary agent alone (no planner).
pub async fn start_single(
    config: manus_rt::Config,
    task: &str,
) -> (manus_rt::Runtime, manus_rt::FlowHandle) {
    let rt = manus_rt::Runtime::builder()
        .config(config)
        .start()
        .await
        .unwrap();
    let options = manus_rt::SubmitOptions {
        mode: manus_rt::FlowMode::Single,
        ..Default::default()
    };
    let flow = rt.submit(task, options).await.unwrap();
    (rt, flow)
}

/// The real binary in `dir` with `--config config` and `args`: stdin closed, stdout and
/// stderr piped, killed if dropped.
pub fn manus_cli(dir: &Scratch, config: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_manus-rt"));
    cmd.current_dir(dir.path())
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .arg("--config")
        .arg(config)
        .args(args);
    cmd
}

/// `config check --probe` on `config` in `dir`, with no provider's key taken from the
/// environment: it exits 0 and its report holds each of `lines`.
pub async fn probe_says(dir: &Scratch, config: &Path, lines: &[&str]) {
    let out = manus_cli(dir, config, &["config", "check", "--probe"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in lines {
        assert!(stdout.contains(line), "{line} missing from:\n{stdout}");
    }
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether something listens on 127.0.0.1:`port` within 10 s.
pub async fn listening_soon(port: u16) -> bool {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

/// The tool observation the model got after request `n` (0-based) was answered.
pub fn observation(server: &ScriptedLlm, n: usize) -> String {
    last_tool_text(&server.requests()[n + 1])
}

/// The 1-based line of the first line of `text` that contains `needle`.
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` is not in:\n{text}"))
        + 1
}

/// A `planning` create call with a fixed plan id (so the step prompts do not depend on the
/// flow id) and these steps.
pub fn plan_reply(steps: &[&str]) -> Reply {
    Reply::tool(
        "planning",
        json!({"command": "create", "plan_id": "test-plan", "title": "Test plan", "steps": steps}),
    )
}

/// What picks out step `i`'s requests (`ScriptedLlm::push_for`): its prompt names it as
/// the job.
pub fn job(i: usize) -> String {
    format!("Your job now is step {i} only")
}

/// The requests of `all` made for step `i`, in arrival order.
pub fn requests_of(
    all: &[super::llm_server::Recorded],
    i: usize,
) -> Vec<super::llm_server::Recorded> {
    all.iter()
        .filter(|r| r.step() == Some(i))
        .cloned()
        .collect()
}

/// `terminate` with status success, the text being the agent's final words.
pub fn done(text: &str) -> Reply {
    Reply::tool("terminate", json!({"status": "success"})).with_text(text)
}

/// `terminate` with status failure, the text saying why.
pub fn give_up(text: &str) -> Reply {
    Reply::tool("terminate", json!({"status": "failure"})).with_text(text)
}

/// The text of the last `tool` message of a request, or "" when it has none.
pub fn last_tool_text(request: &super::llm_server::Recorded) -> String {
    request
        .messages()
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(serde_json::Value::as_str) == Some("tool"))
        .and_then(|m| m.get("content").and_then(serde_json::Value::as_str))
        .unwrap_or_default()
        .to_string()
}

// ─── A long step, for memory compaction ────────────────────────────────────────────────

/// The rounds of `long_step`.
pub const ROUNDS: usize = 60;
/// What `long_step` plants in its first tool output.
pub const FACT: &str = "ledger-7781.csv holds 42 rows";

/// The agent's side of the long step: plant the fact in a long output, fill the memory
/// with long outputs, then recall the first one and finish. Summary requests (no tools)
/// get `summary`.
pub fn long_step(
    summary: Reply,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    super::llm_server::Responder,
) {
    let rounds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = rounds.clone();
    let responder = move |r: &super::llm_server::Request| -> Option<Reply> {
        let tools = r.json()["tools"].as_array().map_or(0, Vec::len);
        if tools == 0 {
            return Some(summary.clone());
        }
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(match n {
            0 => Reply::tool(
                "bash",
                json!({"command": format!("printf 'x%.0s' $(seq 1 500); echo; echo '{FACT}'")}),
            ),
            n if n < ROUNDS - 2 => {
                Reply::tool("bash", json!({"command": format!("seq {n} {}", n + 399)}))
            }
            n if n == ROUNDS - 2 => Reply::tool("recall", json!({"reference": "r1"})),
            _ => done("done after a long step"),
        })
    };
    (rounds, std::sync::Arc::new(responder))
}

// ─── Data fixtures for the chart and report tools ──────────────────────────────────────

/// A small deterministic random source (xorshift), so fixtures are the same on every run.
pub struct Noise(u64);

impl Noise {
    pub fn new(seed: u64) -> Noise {
        Noise(seed.max(1))
    }

    /// Uniform in [0, 1).
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.next().max(1e-12), self.next());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Write the chart fixtures under `workspace/data`: `monthly.csv` (24 months × 4 regions of
/// revenue and units, with a quarter column), `products.csv` (12 products in 3 categories),
/// `campaigns.json` (60 ad campaigns as records) and `orders.csv` (800 order values).
pub fn write_chart_fixtures(workspace: &Path) {
    let data = workspace.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut noise = Noise::new(7);

    let regions = [
        ("North", 42_000.0, 41.0),
        ("South", 31_000.0, 38.5),
        ("East", 24_500.0, 44.0),
        ("West", 18_000.0, 39.0),
    ];
    let mut monthly = String::from("month,quarter,region,revenue,units\n");
    for i in 0..24 {
        let (year, month) = (2023 + i / 12, i % 12 + 1);
        let season = 1.0 + 0.18 * (std::f64::consts::TAU * (month as f64 - 3.0) / 12.0).sin();
        for (region, base, price) in regions {
            let revenue =
                (base * season * (1.0 + 0.012 * i as f64) * (1.0 + 0.04 * (noise.next() - 0.5)))
                    .round();
            let units = (revenue / price).round();
            monthly.push_str(&format!(
                "{year}-{month:02},{year}-Q{},{region},{revenue},{units}\n",
                (month - 1) / 3 + 1
            ));
        }
    }
    std::fs::write(data.join("monthly.csv"), monthly).unwrap();

    let products = [
        ("Espresso machine", "Appliances", 184_500, 412),
        ("Burr grinder", "Appliances", 96_200, 687),
        ("Milk frother", "Appliances", 41_800, 1_045),
        ("Pour-over kettle", "Appliances", 58_300, 1_166),
        ("House blend 1 kg", "Coffee", 221_900, 11_095),
        ("Single origin Ethiopia 250 g", "Coffee", 87_400, 7_283),
        ("Decaf 500 g", "Coffee", 23_100, 1_650),
        ("Cold brew concentrate", "Coffee", 35_600, 2_967),
        ("Ceramic mugs, set of 4", "Accessories", 27_900, 930),
        ("Travel tumbler", "Accessories", 31_200, 1_248),
        ("Paper filters (200)", "Accessories", 12_800, 2_560),
        ("Cleaning tablets", "Accessories", 9_700, 1_940),
    ];
    let mut text = String::from("product,category,revenue,units\n");
    for (name, category, revenue, units) in products {
        // Quoted where the name holds a comma, as a CSV writer would.
        let name = if name.contains(',') {
            format!("\"{name}\"")
        } else {
            name.to_string()
        };
        text.push_str(&format!("{name},{category},{revenue},{units}\n"));
    }
    std::fs::write(data.join("products.csv"), text).unwrap();

    let channels = [("Search", 3.1), ("Social", 2.2), ("Email", 4.0)];
    let campaigns: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            let (channel, roi) = channels[i % 3];
            let spend = (500.0 + noise.next() * 19_500.0).round();
            let revenue = (spend * roi * (1.0 + 0.25 * noise.normal())).max(0.0).round();
            json!({"campaign": format!("C-{:03}", i + 1), "channel": channel, "ad_spend": spend, "revenue": revenue})
        })
        .collect();
    std::fs::write(
        data.join("campaigns.json"),
        serde_json::to_string_pretty(&campaigns).unwrap(),
    )
    .unwrap();

    let mut orders = String::from("order_id,order_value\n");
    for i in 0..800 {
        let value = (3.8 + 0.5 * noise.normal()).exp();
        orders.push_str(&format!("{},{:.2}\n", 10_001 + i, value));
    }
    std::fs::write(data.join("orders.csv"), orders).unwrap();
}

/// A fresh database on the test server (MANUS_TEST_POSTGRES_URL names its maintenance
/// database and a role that may create databases); its URL.
pub fn postgres_database() -> Option<String> {
    let Ok(base) = std::env::var("MANUS_TEST_POSTGRES_URL") else {
        eprintln!(
            "\n!!! MANUS_TEST_POSTGRES_URL is not set: the PostgreSQL store tests are SKIPPED.\n\
             !!! scripts/test.sh starts a server and sets it; run the suite that way.\n"
        );
        return None;
    };
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "manus_test_{}_{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let base_c = base.clone();
    let create = format!("CREATE DATABASE {name}");
    // The blocking client runs a runtime of its own: keep it off the test's.
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&base_c, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the test server {base_c}: {e}"));
        client.batch_execute(&create).unwrap();
    })
    .join()
    .unwrap();
    let (server, _) = base.rsplit_once('/').expect("a URL ending in /DATABASE");
    Some(format!("{server}/{name}"))
}

/// The number in environment variable `name` (a bench's setting), else `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
