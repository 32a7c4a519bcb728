//! The real model server of the suite: llama.cpp's `llama-server` with a tiny instruct model,
//! which `scripts/test.sh` builds, starts on 127.0.0.1 and names in `MANUS_TEST_LLAMA_URL`
//! (stopping it by PID when the suite ends). Owns finding that server and the config text
//! that points a profile at it.

/// The server's OpenAI-compatible base URL (`…/v1`), or `None` (the test is skipped, loudly)
/// when the suite was not started by `scripts/test.sh`. Under test.sh
/// (`MANUS_TEST_REQUIRE_PEERS`) a missing server fails the test instead.
pub fn url() -> Option<String> {
    match std::env::var("MANUS_TEST_LLAMA_URL") {
        Ok(url) => Some(url),
        Err(_) if std::env::var_os("MANUS_TEST_REQUIRE_PEERS").is_some() => {
            panic!("MANUS_TEST_LLAMA_URL is not set, but test.sh said every peer was started")
        }
        Err(_) => {
            eprintln!(
                "\n!!! MANUS_TEST_LLAMA_URL is not set: the llama-server tests are SKIPPED.\n\
                 !!! scripts/test.sh builds and starts one and sets it; run the suite that way.\n"
            );
            None
        }
    }
}

/// A config whose one profile is the server at `url`, answering deterministically
/// (temperature 0) and briefly, and whose one agent is `manus` with the file tools only and
/// few rounds; `llm_extra` is appended inside the `[llm]` table, `extra` after the rest.
pub fn config_text(url: &str, llm_extra: &str, extra: &str) -> String {
    config_text_for("llamacpp", url, llm_extra, extra)
}

/// `config_text` for the server's Anthropic Messages endpoint (`{root}/v1/messages`).
pub fn anthropic_config_text(url: &str, llm_extra: &str, extra: &str) -> String {
    config_text_for("anthropic", url.trim_end_matches("/v1"), llm_extra, extra)
}

/// The answer limit of every profile `config_text_for` writes: brief, so the suite is quick.
pub const MAX_TOKENS: u32 = 256;

/// `config_text` for the server's endpoint of `api_type` (its base URL `url`).
pub fn config_text_for(api_type: &str, url: &str, llm_extra: &str, extra: &str) -> String {
    format!(
        "[llm]\napi_type = \"{api_type}\"\nbase_url = \"{url}\"\nmodel = \"smollm2\"\n\
         temperature = 0.0\nmax_tokens = {MAX_TOKENS}\n{llm_extra}\n\n\
         [agents.manus]\nprofile = \"manus\"\nmax_steps = 4\n\
         tools = [\"str_replace_editor\", \"terminate\"]\n\n\
         [flow]\nmax_step_retries = 0\n{extra}\n"
    )
}
