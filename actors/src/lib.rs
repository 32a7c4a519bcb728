//! manus-actors: the manus-rt engine. The actors (root supervisor, planner, executor
//! agents, tool workers), the messages between them, the LLM client and the tools.
//!
//! Start reading at `protocol.rs`; ARCHITECTURE.md at the repository root maps the rest.
//! The leaves every module may use: `protocol` (the messages), `plan` (the plan as data),
//! `text` and `process` (helpers); none of them imports an actor's module.
//! This crate knows nothing of the CLI, TOML or exporters: the host (`manus-rt`) maps its
//! config onto the typed arguments here.

pub mod agent;
pub mod approvals;
pub mod background;
pub mod browser;
pub(crate) mod children;
pub mod confine;
#[cfg(test)]
pub(crate) mod fuzz;
pub mod llm;
pub mod mcp;
pub mod plan;
pub mod planner;
pub(crate) mod process;
pub mod protocol;
pub mod root;
pub mod sandbox;
pub(crate) mod sse;
pub(crate) mod text;
pub mod tls;
pub mod tools;
