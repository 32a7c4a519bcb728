//! The integration tests, one binary: each module is the former test file of its name, and
//! `support` (shared with the benches) is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod approvals;
mod browser;
mod cli;
mod cluster;
mod code_mode;
mod compaction;
mod confine;
mod console;
mod conversations;
mod data_analysis;
mod evals;
mod example_cassette;
mod flow_runtime;
mod fork;
mod graph;
mod llama;
mod llm_server_selftest;
mod mcp;
mod mcp_asks;
mod mcp_http;
mod mcp_oauth;
mod mcp_serve;
mod memory;
mod provider_sdks;
mod providers;
mod python;
mod sandbox;
mod serve;
mod store;
mod streaming;
mod telemetry;
