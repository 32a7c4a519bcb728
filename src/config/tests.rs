//! The config's unit tests: defaults, every section's checks, errors with file, line and
//! key, every key's range (a table of mutations), a file that is not UTF-8, and `parse`
//! apart from `resolve`.

use manus_actors::browser::WebDriverSource;
use manus_actors::confine::Network;
use manus_actors::tools::web::search::Engine;

use super::llm::sees_images;
use super::sandbox::parse_bytes;
use super::*;

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_text(text, "test.toml", None)
}

const MINIMAL: &str =
    "[llm]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\n[agents.manus]\n";

#[test]
fn the_embedded_example_loads() {
    let c = Config::from_text(EMBEDDED_EXAMPLE, "example", None).unwrap();
    assert!(c.agents.iter().any(|(a, _)| a.name == "manus"));
    assert!(c.agents.iter().any(|(a, _)| a.name == "data_analysis"));
}

#[test]
fn sandbox_settings_parse_and_sizes_are_checked() {
    let c = load(&format!(
        "{MINIMAL}\n[sandbox]\nuse_sandbox = true\nmemory_limit = \"64m\"\n"
    ))
    .unwrap();
    let s = c.sandbox.unwrap();
    assert_eq!(s.memory_limit, 64 << 20);
    assert_eq!(
        (s.work_dir.as_str(), s.network_enabled),
        ("/workspace", false)
    );
    assert!(
        load(MINIMAL).unwrap().sandbox.is_none(),
        "off unless asked for"
    );
    let e = load(&format!(
        "{MINIMAL}\n[sandbox]\nuse_sandbox = true\nmemory_limit = \"lots\"\n"
    ))
    .unwrap_err();
    assert_eq!(e.line, Some(9), "{e}");
    assert!(e.message.contains("memory_limit"), "{e}");
    assert_eq!(parse_bytes("2g"), Some(2 << 30));
    assert_eq!(parse_bytes("512MB"), Some(512 << 20));
    assert_eq!(parse_bytes("0"), None);
    let e = load(&format!("{MINIMAL}\n[sandbox]\nmemory_limit = \"1m\"\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("at least \"6m\""), "{e}");
}

#[test]
fn store_and_server_settings() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.store, Some(StoreUrl::Sqlite("runs.db".into())));
    assert!(c.server.resume_on_start);
    let c = load(&format!(
        "{MINIMAL}\n[store]\nurl = \"postgres://u:p@127.0.0.1:5432/runs\"\n\n[server]\nresume_on_start = false\n"
    ))
    .unwrap();
    assert!(matches!(c.store, Some(StoreUrl::Postgres(_))));
    assert!(!c.server.resume_on_start);
    let c = load(&format!("{MINIMAL}\n[store]\nenabled = false\n")).unwrap();
    assert_eq!(c.store, None);

    let e = load(&format!("{MINIMAL}\n[store]\nurl = \"mysql://h/db\"\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(
        e.message.contains("[store] url = \"mysql://h/db\"") && e.message.contains("sqlite://"),
        "{e}"
    );
    let e = load(&format!("{MINIMAL}\n[store]\nurl = \"sqlite://\"\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    let e = load(&format!("{MINIMAL}\n[store]\npath = \"x\"\n")).unwrap_err();
    assert!(e.message.contains("path"), "{e}");

    assert_eq!(c.server.keep_finished, 10_000);
    assert!(!c.retention.bounded(), "runs are kept forever by default");
    let c = load(&format!(
        "{MINIMAL}\n[store]\nkeep_days = 30\nkeep_runs = 5000\n"
    ))
    .unwrap();
    assert_eq!(
        (c.retention.keep_days, c.retention.keep_runs),
        (Some(30), Some(5000))
    );
    for (key, bad) in [
        ("keep_days", "0"),
        ("keep_days", "36501"),
        ("keep_runs", "-1"),
    ] {
        let e = load(&format!("{MINIMAL}\n[store]\n{key} = {bad}\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert_eq!(
            e.key.as_deref(),
            Some(format!("[store] {key}").as_str()),
            "{e}"
        );
        assert!(
            e.message.contains(&format!("[store] {key} = {bad}"))
                && e.message.contains("out of range: use 1 to"),
            "{e}"
        );
    }
    let c = load(&format!("{MINIMAL}\n[server]\nkeep_finished_flows = 3\n")).unwrap();
    assert_eq!(c.server.keep_finished, 3);
    assert_eq!(c.server.blocking_wait, std::time::Duration::from_secs(60));
    let c = load(&format!("{MINIMAL}\n[server]\nblocking_wait_secs = 5\n")).unwrap();
    assert_eq!(c.server.blocking_wait, std::time::Duration::from_secs(5));
    let c = load(&format!(
        "{MINIMAL}\n[server]\nallowed_hosts = [\"Manus.internal\", \"[fd00::5]\"]\nmax_connections = 64\n"
    ))
    .unwrap();
    assert_eq!(c.server.max_connections, 64);
    assert!(c.server.host_allowed(Some("manus.internal:8080")));
    for bad in ["\"h:80\"", "\"\"", "\"a/b\""] {
        let e = load(&format!("{MINIMAL}\n[server]\nallowed_hosts = [{bad}]\n")).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("without a port"), "{e}");
    }
    let e = load(&format!("{MINIMAL}\n[server]\nmax_connections = 0\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("use 1 to 1000000"), "{e}");
    let e = load(&format!("{MINIMAL}\n[server]\nkeep_finished_flows = 0\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("keep_finished_flows = 0"), "{e}");
}

#[test]
fn browser_and_search_settings_parse_and_bad_keys_are_named() {
    let c = load(&format!(
        "{MINIMAL}\n[browser]\nwebdriver_url = \"http://127.0.0.1:9515/\"\nheadless = false\n\
         viewport = {{ width = 800, height = 600 }}\n[browser.proxy]\nserver = \"http://127.0.0.1:3128\"\nusername = \"u\"\n\
         [search]\nengine = \"searxng\"\nfallback_engines = [\"duckduckgo\"]\nsearxng_url = \"http://127.0.0.1:8888\"\n"
    ))
    .unwrap();
    let b = &c.browser;
    assert_eq!(
        b.webdriver,
        WebDriverSource::Url("http://127.0.0.1:9515".into())
    );
    assert_eq!((b.headless, b.viewport), (false, (800, 600)));
    assert_eq!(b.proxy.as_ref().unwrap().username.as_deref(), Some("u"));
    assert_eq!(
        c.tools.search.engines,
        vec![Engine::Searxng, Engine::Duckduckgo]
    );
    let d = load(MINIMAL).unwrap();
    assert_eq!(
        d.browser.webdriver,
        WebDriverSource::Launch("chromedriver".into())
    );
    let pool = load(&format!(
        "{MINIMAL}\n[browser]\nwebdriver_urls = [\"http://a:4444/\", \"https://b:4444\"]\n"
    ))
    .unwrap();
    assert_eq!(
        pool.browser.webdriver,
        WebDriverSource::Pool(vec!["http://a:4444".into(), "https://b:4444".into()])
    );
    for (extra, says) in [
        ("webdriver_urls = [\"ftp://a\"]", "must start with http"),
        ("webdriver_urls = []", "is empty"),
        (
            "webdriver_urls = [\"http://a\"]\nwebdriver_url = \"http://b\"",
            "leave out webdriver_url",
        ),
    ] {
        let e = load(&format!("{MINIMAL}\n[browser]\n{extra}\n")).unwrap_err();
        assert!(e.message.contains(says) && e.line.is_some(), "{e}");
    }
    assert!(
        d.llm["default"].vision == sees_images("m")
            && sees_images("gpt-4o-mini")
            && !sees_images("qwen2.5:7b")
    );

    let bad = |extra: &str| load(&format!("{MINIMAL}\n{extra}")).unwrap_err();
    let e = bad("[browser]\nheadles = true\n");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("headles"), "{e}");
    let e = bad("[browser]\nwebdriver_url = \"127.0.0.1:9515\"\n");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("must start with http://"), "{e}");
    let e = bad("[browser]\nwebdriver_url = \"http://x\"\nchromedriver_path = \"chromedriver\"\n");
    assert!(e.message.contains("both set"), "{e}");
    let e = bad("[browser]\npage_load_timeout_secs = 0\n");
    assert_eq!(e.line, Some(8), "{e}");
    let e = bad("[browser]\nviewport = { width = 10, height = 600 }\n");
    assert!(e.message.contains("between 200 and 8000"), "{e}");
    let e = bad("[browser.proxy]\nuser = \"x\"\nserver = \"http://p\"\n");
    assert!(e.message.contains("user"), "{e}");
    let e = bad("[search]\nengine = \"google\"\n");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(
        e.message.contains("unknown search engine `google`")
            && e.message.contains("searxng, brave, duckduckgo"),
        "{e}"
    );
    let e = bad("[search]\nfallback_engines = [\"bing\"]\n");
    assert!(e.message.contains("`bing`"), "{e}");
    let e = bad("[search]\nsearxng_url = \"ftp://x\"\n");
    assert!(e.message.contains("[search] searxng_url"), "{e}");
    let e = bad("[llm.v]\nvision = \"yes\"\n");
    assert!(
        e.message.contains("vision") || e.message.contains("bool"),
        "{e}"
    );
}

#[test]
fn named_profiles_merge_over_the_default() {
    let c = load(&format!("{MINIMAL}\n[llm.fast]\nmodel = \"small\"\n")).unwrap();
    assert_eq!(c.llm["fast"].model, "small");
    assert_eq!(c.llm["fast"].base_url, "http://127.0.0.1:1/v1");
}

#[test]
fn errors_name_key_and_line() {
    let e = load("[llm]\nmodel = \"m\"\nmodle = \"x\"\n[agents.manus]\n").unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("modle"), "{e}");

    let e = load(&format!("{MINIMAL}max_steps = \"ten\"\n")).unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");

    let e = load(&format!("{MINIMAL}llm = \"nope\"\n")).unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(
        e.message.contains("[agents.manus] llm") && e.message.contains("nope"),
        "{e}"
    );

    let e = load(&format!("{MINIMAL}colour = 1\n")).unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("colour"), "{e}");

    let e = load("[llm]\nmodel = \"m\"\n").unwrap_err();
    assert!(e.message.contains("pool is empty"), "{e}");

    let e = load(&format!("{MINIMAL}\n[flow]\nprimary_agent = \"ghost\"\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");

    let e = load(&format!("{MINIMAL}\n[flow]\nplanner_replicas = 0\n")).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("[flow] planner_replicas"), "{e}");

    let e = load(&format!("{MINIMAL}tools = [\"bash\", \"teleport\"]\n")).unwrap_err();
    assert!(e.message.contains("teleport"), "{e}");
}

#[test]
fn parse_reads_neither_the_environment_nor_the_disk() {
    // A cassette and a servers file that do not exist: `parse` does not look for them.
    let text = "[llm]\napi_type = \"replay\"\ncassette = \"no-such.jsonl\"\n\n[agents.manus]\n\
                mcp_servers = [\"ghost\"]\n\n[mcp]\nservers_file = \"no-such.json\"\n";
    let parsed = parse(text, "test.toml").unwrap();
    let dir = std::env::temp_dir().join(format!("manus-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = parsed.clone().resolve(&|_| None, Some(&dir)).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("[llm] cassette"), "{e}");
    assert!(e.message.contains("no-such.jsonl"), "{e}");

    std::fs::write(dir.join("no-such.jsonl"), EMBEDDED_CASSETTE).unwrap();
    let e = parsed.clone().resolve(&|_| None, Some(&dir)).unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(9), Some("[mcp] servers_file")),
        "{e}"
    );

    std::fs::write(dir.join("no-such.json"), "{\"mcpServers\": {}}").unwrap();
    let e = parsed.resolve(&|_| None, Some(&dir)).unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(6), Some("[agents.manus] mcp_servers")),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("test.toml:6: [agents.manus] mcp_servers: no MCP server `ghost`"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn resolve_takes_secrets_from_the_environment_it_is_given() {
    let text = format!(
        "{MINIMAL}\n[llm.azure]\napi_type = \"azure\"\nbase_url = \"https://a.example\"\napi_key = \"in-file\"\n\
         api_key_env = \"AZURE_KEY\"\n[llm.filed]\napi_key = \"in-file\"\n\
         [sandbox]\nuse_sandbox = true\n[browser.proxy]\nserver = \"http://p\"\npassword = \"pw\"\n\
         password_env = \"PROXY_PW\"\n[search]\nbrave_api_key_env = \"MY_BRAVE\"\n\
         [server]\napi_tokens = [\"a\"]\n[telemetry]\notlp_endpoint = \"http://c:4318/v1/traces\"\n"
    );
    let parsed = parse(&text, "test.toml").unwrap();
    let vars = [
        ("OPENAI_API_KEY", "sk-env"),
        ("AZURE_KEY", "az-env"),
        ("DOCKER_HOST", "unix:///run/other.sock"),
        ("PROXY_PW", "pw-env"),
        ("MY_BRAVE", "brave-env"),
        ("MANUS_API_TOKENS", " b, ,c "),
        ("OTEL_SERVICE_NAME", "svc"),
    ];
    let env = |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    let c = parsed.clone().resolve(&env, None).unwrap();
    assert_eq!(c.llm["default"].api_key.as_deref(), Some("sk-env"));
    assert_eq!(c.llm["azure"].api_key.as_deref(), Some("az-env"));
    assert_eq!(
        c.llm["filed"].api_key.as_deref(),
        Some("in-file"),
        "a key in the file: OPENAI_API_KEY is not read"
    );
    assert_eq!(c.sandbox.unwrap().engines_text(), "unix:///run/other.sock");
    assert_eq!(c.browser.proxy.unwrap().password.as_deref(), Some("pw-env"));
    assert_eq!(c.tools.search.brave_api_key.as_deref(), Some("brave-env"));
    assert_eq!(c.server.api_tokens, ["a", "b", "c"]);
    assert_eq!(c.telemetry.service_name, "svc");

    let c = parsed.resolve(&|_| None, None).unwrap();
    assert_eq!(c.llm["default"].api_key, None);
    assert_eq!(c.llm["azure"].api_key.as_deref(), Some("in-file"));
    assert_eq!(
        c.sandbox.unwrap().engines_text(),
        "unix:///var/run/docker.sock"
    );
    assert_eq!(c.browser.proxy.unwrap().password.as_deref(), Some("pw"));
    assert_eq!(c.tools.search.brave_api_key, None);
    assert_eq!(c.server.api_tokens, ["a"]);
    assert_eq!(c.telemetry.service_name, "manus-rt");
}

#[test]
fn price_keys_are_llm_keys_and_the_unknown_key_error_lists_them() {
    let c = load(
        "[llm]\nmodel = \"m\"\ninput_price_per_mtok = 3.0\n[llm.x]\noutput_price_per_mtok = 1.5\n\n\
         [agents.manus]\n",
    )
    .unwrap();
    assert_eq!(c.llm["default"].input_price_per_mtok, 3.0);
    assert_eq!(
        (
            c.llm["x"].input_price_per_mtok,
            c.llm["x"].output_price_per_mtok
        ),
        (3.0, 1.5)
    );
    let e = load("[llm]\nmodel = \"m\"\nfoo = 1\n[agents.manus]\n").unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    let listed = e
        .message
        .split("(keys: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no key list in {e}"));
    assert_eq!(listed, super::file::LlmToml::KEYS.join(", "));
    for key in [
        "input_price_per_mtok",
        "output_price_per_mtok",
        "vision",
        "cassette",
    ] {
        assert!(
            listed.split(", ").any(|k| k == key),
            "{key} missing from {e}"
        );
    }
}

#[test]
fn errors_carry_the_key_apart_from_the_message() {
    let key = |text: &str| load(text).unwrap_err().key;
    assert_eq!(
        key(&format!("{MINIMAL}llm = \"nope\"\n")).as_deref(),
        Some("[agents.manus] llm")
    );
    assert_eq!(
        key(&format!("{MINIMAL}colour = 1\n")).as_deref(),
        Some("[agents.manus] colour")
    );
    assert_eq!(
        key(&format!("{MINIMAL}\n[sandbox]\nmemory_limit = \"lots\"\n")).as_deref(),
        Some("[sandbox] memory_limit")
    );
    assert_eq!(
        key("[llm]\nmodel = \"m\"\n"),
        None,
        "an empty pool is no one key's fault"
    );
}

#[test]
fn mcp_http_settings_parse_and_are_checked() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(
        c.mcp_http,
        manus_actors::mcp::server::HttpSettings::default()
    );
    let c = load(&format!(
        "{MINIMAL}\n[mcp]\nmax_sessions = 4\nsession_idle_secs = 60\nallowed_origins = [\"https://app.example:443\"]\n"
    ))
    .unwrap();
    assert_eq!(c.mcp_http.max_sessions, 4);
    assert_eq!(c.mcp_http.session_idle, std::time::Duration::from_secs(60));
    assert_eq!(c.mcp_http.allowed_origins, ["https://app.example:443"]);
    for (line, key) in [
        ("max_sessions = 0", "[mcp] max_sessions"),
        ("session_idle_secs = -5", "[mcp] session_idle_secs"),
        (
            "allowed_origins = [\"app.example\"]",
            "[mcp] allowed_origins",
        ),
    ] {
        let e = load(&format!("{MINIMAL}\n[mcp]\n{line}\n")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert_eq!(e.line, Some(8), "{e}");
    }
}

#[test]
fn mcp_oauth_keys_parse_and_are_checked() {
    assert_eq!(load(MINIMAL).unwrap().mcp_oauth, None);
    let c = load(&format!(
        "{MINIMAL}\n[mcp]\noauth_issuer = \"https://auth.example/tenant\"\noauth_audience = \"https://tools.example/mcp\"\noauth_scopes = [\"mcp:tools\"]\n"
    ))
    .unwrap();
    let oauth = c.mcp_oauth.unwrap();
    assert_eq!(oauth.issuer, "https://auth.example/tenant");
    assert_eq!(oauth.audience, "https://tools.example/mcp");
    assert_eq!(oauth.scopes, ["mcp:tools"]);
    let aud = "oauth_audience = \"https://tools.example/mcp\"";
    for (lines, key, says) in [
        (
            "oauth_issuer = \"http://auth.example\"".to_string(),
            "[mcp] oauth_audience",
            "needs oauth_audience",
        ),
        (aud.to_string(), "[mcp] oauth_issuer", "needs oauth_issuer"),
        (
            "oauth_scopes = [\"a\"]".to_string(),
            "[mcp] oauth_scopes",
            "needs oauth_issuer and oauth_audience",
        ),
        (
            format!("oauth_issuer = \"http://auth.example\"\n{aud}"),
            "[mcp] oauth_issuer",
            "http only for localhost",
        ),
        (
            format!("oauth_issuer = \"auth.example\"\n{aud}"),
            "[mcp] oauth_issuer",
            "write https://host[/path]",
        ),
        (
            "oauth_issuer = \"http://127.0.0.1:9000\"\noauth_audience = \" \"".to_string(),
            "[mcp] oauth_audience",
            "",
        ),
    ] {
        let e = load(&format!("{MINIMAL}\n[mcp]\n{lines}\n")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert!(e.line.is_some_and(|l| l >= 8), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn mcp_sampling_is_one_of_three_rules() {
    use manus_actors::mcp::Sampling;
    let servers = |extra: &str| {
        let dir = std::env::temp_dir().join(format!("manus-sampling-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("mcp.json"),
            r#"{"mcpServers": {"s": {"command": "true"}}}"#,
        )
        .unwrap();
        let text = format!("{MINIMAL}\n[mcp]\nservers_file = \"mcp.json\"\n{extra}");
        let c = Config::from_text(&text, "test.toml", Some(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        c
    };
    assert_eq!(servers("").unwrap().mcp_servers[0].sampling, Sampling::Deny);
    for (rule, want) in [
        ("allow", Sampling::Allow),
        ("approve", Sampling::Approve),
        ("deny", Sampling::Deny),
    ] {
        let c = servers(&format!("sampling = \"{rule}\"\n")).unwrap();
        assert_eq!((c.mcp_servers[0].sampling, c.mcp_sampling), (want, want));
    }
    let e = load(&format!("{MINIMAL}\n[mcp]\nsampling = \"maybe\"\n")).unwrap_err();
    assert_eq!(e.source, "test.toml", "{e}");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("sampling"), "{e}");
    assert!(
        e.message.contains("allow") && e.message.contains("approve") && e.message.contains("deny"),
        "{e}"
    );
}

/// What a key accepts, as the mutation table writes it.
enum Accepts {
    Int(i64, i64),
    Float(f64, f64),
    /// Text that must not be blank (a list of such, with `List`).
    Text,
    List,
    /// An `http(s)://` URL.
    Url,
    /// A name looked up elsewhere (a profile, an engine, …): refused with this message.
    Named(&'static str),
}

/// Every number and text key of the file, with what it accepts.
const KEYS: &[(&str, &str, Accepts)] = {
    use Accepts::*;
    const WEEK: Accepts = Int(1, 604_800);
    &[
        ("llm.x", "max_tokens", Int(1, 1_000_000)),
        ("llm.x", "max_input_tokens", Int(1, 100_000_000)),
        ("llm.x", "temperature", Float(0.0, 2.0)),
        ("llm.x", "timeout_secs", WEEK),
        ("llm.x", "max_retries", Int(0, 20)),
        ("llm.x", "input_price_per_mtok", Float(0.0, 1e6)),
        ("llm.x", "output_price_per_mtok", Float(0.0, 1e6)),
        ("llm.x", "cache_read_price_per_mtok", Float(0.0, 1e6)),
        ("llm.x", "cache_write_price_per_mtok", Float(0.0, 1e6)),
        ("llm.x", "thinking_tokens", Int(1024, 1_000_000)),
        (
            "llm.x",
            "api_type",
            Named(
                "is not a wire API this build knows: use one of openai, azure, anthropic, openai-responses, gemini, ollama, llamacpp, replay",
            ),
        ),
        ("llm.x", "base_url", Url),
        ("llm.x", "model", Text),
        ("llm.x", "api_key", Text),
        ("llm.x", "api_key_env", Text),
        ("llm.x", "api_version", Text),
        ("llm.x", "cassette", Text),
        ("runtime", "workspace", Text),
        ("tools", "python", Text),
        ("tools", "python_timeout_secs", WEEK),
        ("tools", "bash_timeout_secs", WEEK),
        ("tools", "ask_timeout_secs", WEEK),
        ("agents.manus", "replicas", Int(1, 10_000)),
        ("agents.manus", "max_steps", Int(1, 10_000)),
        ("agents.manus", "max_observe", Int(1, 10_000_000)),
        ("agents.manus", "memory_messages", Int(1, 100_000)),
        ("agents.manus", "memory_tokens", Int(1, 10_000_000)),
        ("agents.manus", "compact_at", Float(0.05, 1.0)),
        ("agents.manus", "description", Text),
        ("agents.manus", "system_prompt", Text),
        ("agents.manus", "next_step_prompt", Text),
        ("agents.manus", "profile", Named("no such profile")),
        ("agents.manus", "llm", Named("no such LLM profile")),
        ("agents.manus", "compact_llm", Named("no such LLM profile")),
        ("flow", "step_timeout_secs", WEEK),
        ("flow", "flow_timeout_secs", WEEK),
        ("flow", "planner_replicas", Int(1, 10_000)),
        ("flow", "max_step_retries", Int(0, 100)),
        ("flow", "max_replans", Int(0, 100)),
        ("flow", "max_parallel_steps", Int(1, 1_000)),
        ("flow", "max_tokens", Int(1, 1_000_000_000_000)),
        ("flow", "max_cost", Float(0.0, 1e6)),
        ("flow", "primary_agent", Named("no such agent")),
        ("flow", "planner_llm", Named("no such LLM profile")),
        ("sandbox", "cpu_limit", Float(0.01, 1024.0)),
        ("sandbox", "pids_limit", Int(1, 4_194_304)),
        ("sandbox", "idle_timeout_secs", WEEK),
        ("sandbox", "max_sandboxes", Int(1, 10_000)),
        ("sandbox", "docker_host", Text),
        ("sandbox", "image", Text),
        ("sandbox", "work_dir", Text),
        ("sandbox", "memory_limit", Named("use a size such as")),
        ("browser", "max_content_length", Int(1, 10_000_000)),
        ("browser", "page_load_timeout_secs", WEEK),
        ("browser", "chromedriver_path", Text),
        ("browser", "chromium_path", Text),
        ("browser", "extra_args", List),
        ("browser", "webdriver_url", Url),
        ("browser.proxy", "server", Text),
        ("browser.proxy", "username", Text),
        ("browser.proxy", "password", Text),
        ("browser.proxy", "password_env", Text),
        ("search", "max_retries", Int(0, 10)),
        ("search", "retry_delay_secs", Int(0, 3600)),
        ("search", "timeout_secs", WEEK),
        ("search", "lang", Text),
        ("search", "country", Text),
        ("search", "brave_api_key_env", Text),
        ("search", "searxng_url", Url),
        ("search", "brave_url", Url),
        ("search", "duckduckgo_url", Url),
        ("search", "engine", Named("unknown search engine")),
        ("mcp", "call_timeout_secs", WEEK),
        ("mcp", "connect_timeout_secs", WEEK),
        ("mcp", "servers_file", Text),
        ("store", "keep_days", Int(1, 36_500)),
        ("store", "keep_runs", Int(1, 1_000_000_000)),
        ("store", "url", Named("[store] url = \"\"")),
        ("server", "max_body_kb", Int(1, 1 << 20)),
        ("server", "keep_finished_flows", Int(1, 10_000_000)),
        ("server", "max_connections", Int(1, 1_000_000)),
        ("server", "blocking_wait_secs", WEEK),
        ("server", "api_tokens", List),
        ("server", "allowed_hosts", Named("without a port")),
        ("telemetry", "sample_ratio", Float(0.0, 1.0)),
        ("telemetry", "content_max_chars", Int(1, 1_000_000)),
        ("telemetry", "service_name", Text),
        ("telemetry", "otlp_endpoint", Url),
        ("cluster", "node_id", Text),
        ("cluster", "lease_secs", Int(3, 300)),
        ("cluster", "max_flows", Int(1, 100_000)),
        ("cluster", "drain_secs", WEEK),
    ]
};

/// The values `accepts` refuses, each with what the error must say (`None`: TOML itself
/// refuses it, so only the line and key are checked).
fn refused(accepts: &Accepts) -> Vec<(String, Option<String>)> {
    let all = |values: Vec<String>, says: &str| {
        values
            .into_iter()
            .map(|v| (v, Some(says.to_string())))
            .collect::<Vec<_>>()
    };
    match *accepts {
        Accepts::Int(min, max) => {
            let mut values: Vec<i64> = vec![min - 1, -1, max + 1, 1 << 54, i64::MAX, i64::MIN];
            values.dedup();
            let mut out = all(
                values.iter().map(i64::to_string).collect(),
                &format!("is out of range: use {min} to {max}"),
            );
            // Past what TOML's integers hold.
            out.push((u64::MAX.to_string(), None));
            out
        }
        Accepts::Float(min, max) => {
            let mut values = vec!["nan", "inf", "-inf", "-1.0", "1e300"];
            if min > 0.0 {
                values.push("0.0");
            }
            all(
                values.into_iter().map(String::from).collect(),
                &format!("is out of range: use {min} to {max}"),
            )
        }
        Accepts::Text => all(vec!["\"\"".into(), "\"  \"".into()], "is blank: give "),
        Accepts::List => all(
            vec!["[\"\"]".into(), "[\"a\", \" \"]".into()],
            "is blank: give ",
        ),
        Accepts::Url => all(
            vec!["\"\"".into(), "\" \"".into(), "\"ftp://x\"".into()],
            "must start with http:// or https://",
        ),
        Accepts::Named(says) => all(
            vec![
                if says == "without a port" {
                    "[\"\"]"
                } else {
                    "\"\""
                }
                .into(),
            ],
            says,
        ),
    }
}

/// A config that is valid but for `line`, written in `[table]`.
fn config_setting(table: &str, key: &str, line: &str) -> String {
    match (table, key) {
        ("agents.manus", _) => format!("{MINIMAL}{line}\n"),
        ("browser.proxy", "server") => format!("{MINIMAL}\n[browser.proxy]\n{line}\n"),
        ("browser.proxy", _) => {
            format!("{MINIMAL}\n[browser.proxy]\nserver = \"http://p\"\n{line}\n")
        }
        _ => format!("{MINIMAL}\n[{table}]\n{line}\n"),
    }
}

/// Every number and text key, set to values it cannot work with (0, -1, NaN, infinities,
/// past its range, past what TOML holds, blank): each is refused, and the error names the
/// file, the line, the key and what the key accepts.
#[test]
fn every_key_refuses_values_out_of_its_range_naming_line_key_and_range() {
    let mut tried = 0;
    for (table, key, accepts) in KEYS {
        for (value, says) in refused(accepts) {
            let line = format!("{key} = {value}");
            let text = config_setting(table, key, &line);
            let at = text.lines().position(|l| l == line).map(|i| i + 1);
            let e = load(&text).expect_err(&text);
            let shown = e.to_string();
            let key_name = format!("[{table}] {key}");
            assert_eq!(e.line, at, "{shown}\n{text}");
            assert_eq!(e.key.as_deref(), Some(key_name.as_str()), "{shown}");
            assert!(
                shown.starts_with(&format!("test.toml:{}: ", at.unwrap_or(0))),
                "{shown}"
            );
            if let Some(says) = says {
                assert!(shown.contains(&says), "expected `{says}` in {shown}");
                if !matches!(accepts, Accepts::Named(_)) {
                    assert!(shown.contains(&key_name), "{shown}");
                }
            }
            tried += 1;
        }
    }
    eprintln!("{tried} config mutations, each refused with its line, key and range");
    assert!(tried >= 300, "{tried}");
}

/// The cases of issue 24, as `config check` shows them.
#[test]
fn the_issue_s_examples_are_refused() {
    for (extra, says) in [
        (
            "replicas = 0\n",
            "test.toml:6: [agents.manus] replicas = 0 is out of range: use 1 to 10000",
        ),
        (
            "\n[server]\nmax_body_kb = 18014398509481984\n",
            "test.toml:8: [server] max_body_kb = 18014398509481984 is out of range: use 1 to 1048576",
        ),
        (
            "\n[sandbox]\ncpu_limit = nan\n",
            "test.toml:8: [sandbox] cpu_limit = NaN is out of range: use 0.01 to 1024",
        ),
        (
            "\n[runtime]\nworkspace = \"\"\n",
            "test.toml:8: [runtime] workspace = \"\" is blank: give a directory's path",
        ),
        (
            "\n[llm.hot]\ntemperature = 99\n",
            "test.toml:8: [llm.hot] temperature = 99 is out of range: use 0 to 2",
        ),
        (
            "\n[flow]\nmax_cost = -1\n",
            "test.toml:8: [flow] max_cost = -1 is out of range: use 0 to 1000000",
        ),
    ] {
        let text = format!("{MINIMAL}{extra}");
        let e = load(&text).unwrap_err().to_string();
        assert!(e.starts_with(says), "{e}\n{text}");
    }
}

#[test]
fn a_file_that_is_not_utf8_names_the_line_and_byte() {
    let dir = std::env::temp_dir().join(format!("manus-config-utf8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    let mut bytes = MINIMAL.as_bytes().to_vec();
    bytes.extend_from_slice(b"description = \"caf\xe9\"\n");
    std::fs::write(&path, &bytes).unwrap();
    let e = Config::load(&path).unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(
        e.to_string().starts_with(&format!(
            "{}:6: byte 19 of this line, after \"description = \"caf\", is not UTF-8",
            path.display()
        )),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_key_is_reported_on_its_tables_header_line() {
    let e = load(
        "[agents.manus]\n\n[ llm ]  # the default profile\nbase_url = \"http://127.0.0.1:1/v1\"\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(3), Some("[llm] model")),
        "{e}"
    );
    let e = load("[llm]\nmodel = \"m\"\n[llm.\"rec\"]\napi_type = \"replay\"\n[agents.manus]\n")
        .unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(3), Some("[llm.rec] cassette")),
        "{e}"
    );
    // No header to point at: the key alone says where.
    let e = load("[agents.manus]\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (None, Some("[llm] model")),
        "{e}"
    );
}

#[test]
fn sandbox_hosts_are_sockets_or_tls_engines() {
    let c = load(&format!(
        "{MINIMAL}\n[sandbox]\nuse_sandbox = true\nhosts = [\"unix:///run/a.sock\", \
         {{ url = \"tcp://10.0.0.2:2376\", ca = \"ca.pem\", cert = \"cert.pem\", key = \"key.pem\" }}]\n"
    ))
    .unwrap();
    let hosts = c.sandbox.unwrap().hosts;
    assert_eq!(hosts.len(), 2);
    assert_eq!(
        (hosts[0].url.as_str(), hosts[0].tls.is_none()),
        ("unix:///run/a.sock", true)
    );
    let tls = hosts[1].tls.as_ref().unwrap();
    assert_eq!(
        (hosts[1].url.as_str(), tls.key.to_str()),
        ("tcp://10.0.0.2:2376", Some("key.pem"))
    );
    for (extra, says) in [
        ("hosts = [\"tcp://10.0.0.2:2375\"]", "a socket is unix://"),
        ("hosts = []", "is empty"),
        (
            "hosts = [\"unix:///a\"]\ndocker_host = \"unix:///b\"",
            "leave out docker_host",
        ),
        (
            "hosts = [{ url = \"unix:///a\", ca = \"c\", cert = \"c\", key = \"k\" }]",
            "reached over tcp://",
        ),
    ] {
        let e = load(&format!(
            "{MINIMAL}\n[sandbox]\nuse_sandbox = true\n{extra}\n"
        ))
        .unwrap_err();
        assert!(e.message.contains(says) && e.line.is_some(), "{extra}: {e}");
    }
}

/// Where an invalid value of issue 37 is written: config.toml, or the MCP servers file.
enum Written {
    Config(&'static str),
    Servers(&'static str),
}

/// Invalid values the config once took (issue 37, item 16), each with the key the error
/// must name and what it must say: the line is the value's own line.
const INVALID: &[(Written, &str, &str)] = {
    use Written::*;
    &[
        // [cluster] is checked whether or not it is enabled.
        (
            Config("[cluster]\nnode_id = \"\""),
            "[cluster] node_id",
            "is blank: give the node's name",
        ),
        (
            Config("[cluster]\nlease_secs = 0"),
            "[cluster] lease_secs",
            "= 0 is out of range: use 3 to 300",
        ),
        (
            Config("[cluster]\nenabled = false\nmax_flows = 0"),
            "[cluster] max_flows",
            "= 0 is out of range: use 1 to 100000",
        ),
        (
            Config("[cluster]\ndrain_secs = 9223372036854775807"),
            "[cluster] drain_secs",
            "is out of range: use 1 to 604800",
        ),
        // Approval rules that would never apply, or apply to everything.
        (
            Config("[approvals.tools]\nbash = { matches = \"rm\", argument = \"\" }"),
            "[approvals.tools] bash",
            "`argument` is blank",
        ),
        (
            Config("[approvals.tools]\nbash = { matches = \"rm\", argument = \"cmd\" }"),
            "[approvals.tools] bash",
            "`argument` = \"cmd\" is not an argument of this tool, so the rule would never apply; its arguments: command",
        ),
        (
            Config(
                "[agents.manus.approvals]\npython_execute = { matches = \"os\", argument = \"command\" }",
            ),
            "[agents.manus.approvals] python_execute",
            "its arguments: code",
        ),
        (
            Config("[approvals.tools]\nbash = { matches = \" \" }"),
            "[approvals.tools] bash",
            "`matches` is blank",
        ),
        (
            Config("[approvals.tools]\nstr_replace_editor = { outside = \"\" }"),
            "[approvals.tools] str_replace_editor",
            "`outside` is blank",
        ),
        (
            Config("[approvals.tools]\nbrowser_use = { domains = [\"https://docs.rs/\"] }"),
            "[approvals.tools] browser_use",
            "no scheme, port or path",
        ),
        (
            Config("[approvals.tools]\nbsh = \"always\""),
            "[approvals.tools] bsh",
            "no tool is called `bsh`",
        ),
        // The sandbox's engines.
        (
            Config("[sandbox]\nhosts = [\"unix://\"]"),
            "[sandbox] hosts",
            "\"unix://\": a socket is unix:///path/docker.sock",
        ),
        (
            Config("[sandbox]\nhosts = [\"unix://run/docker.sock\"]"),
            "[sandbox] hosts",
            "a socket is unix:///path/docker.sock",
        ),
        (
            Config(
                "[sandbox]\nhosts = [{ url = \"tcp://h:2376\", ca = \"\", cert = \"c.pem\", key = \"k.pem\" }]",
            ),
            "[sandbox] hosts",
            "ca is blank: give the path of its PEM file",
        ),
        (
            Config(
                "[sandbox]\nhosts = [{ url = \"tcp://h:2376\", ca = \"a.pem\", cert = \"c.pem\", key = \" \" }]",
            ),
            "[sandbox] hosts",
            "key is blank",
        ),
        (
            Config(
                "[sandbox]\nhosts = [{ url = \"tcp://:2376\", ca = \"a.pem\", cert = \"c.pem\", key = \"k.pem\" }]",
            ),
            "[sandbox] hosts",
            "reached over tcp://host:port",
        ),
        (
            Config("[sandbox]\ndocker_host = \"ftp://x\""),
            "[sandbox] docker_host",
            "\"ftp://x\" is not a socket: use unix:///path/docker.sock",
        ),
        (
            Config("[sandbox]\ndocker_host = \"unix://\""),
            "[sandbox] docker_host",
            "is not a socket",
        ),
        // Origins and URLs.
        (
            Config("[mcp]\nallowed_origins = [\"https://app.example.com/console\"]"),
            "[mcp] allowed_origins",
            "is not an origin: write scheme://host[:port]",
        ),
        (
            Config("[mcp]\nallowed_origins = [\"http://\"]"),
            "[mcp] allowed_origins",
            "is not an origin",
        ),
        (
            Config("[llm.x]\nbase_url = \"http://\""),
            "[llm.x] base_url",
            "\"http://\" is not a URL with a host",
        ),
        (
            Config("[telemetry]\notlp_endpoint = \"https:///v1/traces\""),
            "[telemetry] otlp_endpoint",
            "is not a URL with a host",
        ),
        (
            Config("[browser]\nwebdriver_urls = [\"http://127.0.0.1:4444\", \"http://\"]"),
            "[browser] webdriver_urls",
            "\"http://\" is not a URL with a host",
        ),
        (
            Config("[browser.proxy]\nserver = \"ftp://p:21\""),
            "[browser.proxy] server",
            "use http, https, socks4 or socks5",
        ),
        (
            Config("[browser.proxy]\nserver = \"http://\""),
            "[browser.proxy] server",
            "write HOST:PORT or SCHEME://HOST:PORT",
        ),
        (
            Config("[browser.proxy]\nserver = \"socks5://p:1080\"\nusername = \"u\""),
            "[browser.proxy] username",
            "http:// proxies only, not socks5://",
        ),
        // Agents' names, which plan steps write as [NAME] tags, case aside.
        (
            Config("[agents.\"data analysis\"]"),
            "[agents.data analysis]",
            "cannot name an agent: plan steps name their agent as [NAME]",
        ),
        (
            Config("[agents.Manus]"),
            "[agents.Manus]",
            "[agents.manus] is the same agent (names are not case-sensitive)",
        ),
        // The MCP servers file.
        (
            Servers("{\"mcpServers\": {\"s\": {\"command\": \"x\", \"timeout_secs\": 0}}}"),
            "mcpServers.s",
            "`timeout_secs` = 0 is out of range: use 1 to 604800",
        ),
        (
            Servers(
                "{\"mcpServers\": {\"s\": {\"command\": \"x\", \"timeout_secs\": 18446744073709551615}}}",
            ),
            "mcpServers.s",
            "is out of range: use 1 to 604800",
        ),
        (
            Servers("{\"mcpServers\": {\"s\": {\"command\": \" \"}}}"),
            "mcpServers.s",
            "`command` is blank",
        ),
        (
            Servers("{\"mcpServers\": {\"s\": {\"url\": \"http://\"}}}"),
            "mcpServers.s",
            "is not a URL with a host",
        ),
    ]
};

/// Each invalid value of `INVALID` is refused by loading the config (what `config check`
/// does), and the error names the file, the value's line, the key and what it accepts.
#[test]
fn the_invalid_values_of_issue_37_are_refused_naming_file_line_key_and_range() {
    let dir = std::env::temp_dir().join(format!("manus-config-37-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (written, key, says) in INVALID {
        let (text, file, last) = match written {
            Written::Config(extra) => {
                let text = format!("{MINIMAL}\n{extra}\n");
                let last = text.lines().count();
                (text, dir.join("config.toml"), last)
            }
            Written::Servers(json) => {
                std::fs::write(dir.join("mcp.json"), json).unwrap();
                (MINIMAL.to_string(), dir.join("mcp.json"), 1)
            }
        };
        std::fs::write(dir.join("config.toml"), &text).unwrap();
        let e = Config::load(&dir.join("config.toml")).expect_err(&text);
        let _ = std::fs::remove_file(dir.join("mcp.json"));
        let shown = e.to_string();
        assert_eq!(e.source, file.display().to_string(), "{shown}");
        assert_eq!(e.line, Some(last), "{shown}\n{text}");
        assert_eq!(e.key.as_deref(), Some(*key), "{shown}");
        assert!(
            shown.contains(key) && shown.contains(says),
            "expected `{says}` in {shown}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memory_settings_parse_and_bad_values_name_line_key_and_choices() {
    use crate::store::memory::{MemorySettings, Scope};
    let tools = |c: &Config| c.agents[0].0.profile.tools.clone();
    let off = load(MINIMAL).unwrap();
    assert_eq!(off.memory, None);
    assert!(!tools(&off).iter().any(|t| t.starts_with("memory_")));

    let on = load(&format!("{MINIMAL}\n[memory]\nenabled = true\n")).unwrap();
    assert_eq!(on.memory, Some(MemorySettings::default()));
    let held = tools(&on);
    assert!(held.contains(&"memory_save".to_string()), "{held:?}");
    assert!(held.contains(&"memory_search".to_string()), "{held:?}");

    let set = load(&format!(
        "{MINIMAL}\n[memory]\nenabled = true\nsave_to = \"global\"\nsearch = [\"global\", \"thread\"]\nmax_results = 3\ndistill = true\n"
    ))
    .unwrap();
    assert_eq!(
        set.memory,
        Some(MemorySettings {
            save_to: Scope::Global,
            search: vec![Scope::Global, Scope::Thread],
            max_results: 3,
            distill: true,
        })
    );
    // An agent that lists its tools holds the memory tools only if it lists them.
    let listed = load(&format!(
        "{MINIMAL}tools = [\"bash\"]\n\n[memory]\nenabled = true\n"
    ))
    .unwrap();
    assert_eq!(tools(&listed), ["bash", "terminate"]);

    let refused =
        |tail: &str| load(&format!("{MINIMAL}\n[memory]\nenabled = true\n{tail}")).unwrap_err();
    let e = refused("save_to = \"team\"\n");
    assert_eq!((e.source.as_str(), e.line), ("test.toml", Some(9)), "{e}");
    assert_eq!(e.key.as_deref(), Some("[memory] save_to"), "{e}");
    assert!(e.message.contains("use one of thread, user, global"), "{e}");
    let e = refused("search = [\"user\", \"everyone\"]\n");
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(9), Some("[memory] search")),
        "{e}"
    );
    assert!(e.message.contains("\"everyone\" is no namespace"), "{e}");
    let e = refused("search = []\n");
    assert!(e.message.contains("[memory] search is empty"), "{e}");
    let e = refused("max_results = 0\n");
    assert_eq!(e.line, Some(9), "{e}");
    assert!(e.message.contains("use 1 to 20"), "{e}");
    let e = refused("forget_after = 3\n");
    assert!(e.message.contains("forget_after"), "{e}");

    let e = load(&format!("{MINIMAL}tools = [\"memory_save\"]\n")).unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(
        e.message
            .contains("`memory_save` needs [memory] enabled = true"),
        "{e}"
    );
    let e = load(&format!(
        "{MINIMAL}\n[store]\nenabled = false\n\n[memory]\nenabled = true\n"
    ))
    .unwrap_err();
    assert_eq!(e.line, Some(10), "{e}");
    assert!(e.message.contains("keeps notes in the run store"), "{e}");
}

#[test]
fn sandbox_mode_parses_use_sandbox_is_its_old_spelling_and_bad_values_are_named() {
    let sandbox = |extra: &str| load(&format!("{MINIMAL}\n[sandbox]\n{extra}\n"));
    // Safe by default: process mode where the kernel can confine; where it cannot, code
    // runs unconfined and the config says so (fallback = "none", the default).
    let c = load(MINIMAL).unwrap();
    if manus_actors::confine::Support::here().full() {
        assert_eq!(c.sandbox_mode, SandboxMode::Process);
        assert!(c.tools.confine.is_some() && c.unconfined.is_none());
    } else {
        assert_eq!(c.sandbox_mode, SandboxMode::None);
        assert!(c.tools.confine.is_none() && c.unconfined.is_some());
    }
    assert!(c.sandbox.is_none());
    let c = sandbox("mode = \"none\"").unwrap();
    assert_eq!(c.sandbox_mode, SandboxMode::None);
    assert!(c.tools.confine.is_none() && c.unconfined.is_none());
    let e = sandbox("fallback = \"maybe\"").unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("refuse"), "{e}");
    let c = sandbox("mode = \"process\"\nmemory_limit = \"1g\"\npids_limit = 64").unwrap();
    assert_eq!(c.sandbox_mode, SandboxMode::Process);
    let confine = c.tools.confine.unwrap();
    assert_eq!(
        (confine.network, confine.memory_limit, confine.processes),
        (Network::Off, 1 << 30, 64)
    );
    assert_eq!(confine.cpu_time, 3600);
    assert!(c.sandbox.is_none());
    let c = sandbox("mode = \"process\"\nnetwork = true").unwrap();
    assert_eq!(c.tools.confine.unwrap().network, Network::On);
    let c =
        sandbox("mode = \"process\"\nnetwork = [\"PyPI.org\", \"*.example.com:8443\"]").unwrap();
    assert_eq!(
        c.tools.confine.unwrap().network.to_string(),
        "only pypi.org, *.example.com:8443"
    );
    let e = sandbox("mode = \"process\"\nnetwork = [\"pypi.org\", \"bad host\"]").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(9), Some("[sandbox] network")),
        "{e}"
    );
    assert!(e.message.contains("`bad host` is not a host"), "{e}");
    let e = sandbox("mode = \"container\"\nnetwork = [\"pypi.org\"]").unwrap_err();
    assert!(e.message.contains("process mode only"), "{e}");
    let e = sandbox("network = []").unwrap_err();
    assert!(e.message.contains("at least one host"), "{e}");
    let e = sandbox("network = \"yes\"").unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("a list of hosts"), "{e}");
    let e = sandbox("cpu_time_limit_secs = 0").unwrap_err();
    assert!(e.message.contains("604800"), "{e}");
    let c = sandbox("file_size_limit = \"100m\"\nopen_files = 256").unwrap();
    if let Some(confine) = c.tools.confine {
        assert_eq!((confine.file_size, confine.open_files), (100 << 20, 256));
    }
    let e = sandbox("open_files = 4").unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(
        e.message.contains("16") && e.message.contains("1048576"),
        "{e}"
    );
    let e = sandbox("file_size_limit = \"1k\"").unwrap_err();
    assert!(e.message.contains("at least \"1m\""), "{e}");
    let c = sandbox("use_sandbox = true").unwrap();
    assert_eq!(c.sandbox_mode, SandboxMode::Container);
    assert!(c.sandbox_old_spelling && c.sandbox.is_some() && c.tools.confine.is_none());
    let c = sandbox("mode = \"container\"\nnetwork = true").unwrap();
    assert!(!c.sandbox_old_spelling && c.sandbox.unwrap().network_enabled);
    let e = sandbox("mode = \"jail\"").unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    for choice in ["process", "container", "none"] {
        assert!(e.message.contains(choice), "{e}");
    }
    let e = sandbox("mode = \"process\"\nuse_sandbox = true").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(9), Some("[sandbox] use_sandbox")),
        "{e}"
    );
    let e = sandbox("network = true\nnetwork_enabled = true").unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("network_enabled"), "{e}");
}

/// Where the kernel cannot confine, process mode runs unconfined with a loud warning
/// (fallback = "none") or refuses (fallback = "refuse"); where it can, nothing changes.
#[test]
fn process_mode_falls_back_only_as_the_config_says() {
    use manus_actors::confine::Support;
    let none = Support {
        landlock_abi: 0,
        seccomp: true,
        private_mounts: true,
        pids_cgroup: true,
    };
    let warning = super::sandbox::fall_back(&none, true).unwrap().unwrap();
    assert!(
        warning.contains("UNCONFINED") && warning.contains("Landlock ABI 0"),
        "{warning}"
    );
    let refused = super::sandbox::fall_back(&none, false).unwrap_err();
    assert!(refused.contains("fallback = \"refuse\""), "{refused}");
    let full = Support {
        landlock_abi: 7,
        ..none
    };
    assert_eq!(super::sandbox::fall_back(&full, false), Ok(None));
}

#[test]
fn a_replay_profile_takes_the_recordings_max_tokens() {
    let replay =
        "[agents.manus]\n[llm]\napi_type = \"replay\"\ncassette = \"builtin:example-flow\"\n";
    let limit = |text: &str| load(text).unwrap().llm["default"].max_tokens;
    assert_eq!(limit(replay), 4096);
    assert_eq!(limit(&format!("{replay}max_tokens = 256\n")), 256);
    let e = load(&format!("{replay}max_tokens = 0\n")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("[llm] max_tokens"), "{e}");
}
