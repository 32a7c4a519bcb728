//! manus-rt: an actor-based multi-agent runtime. This crate is the host: the config file,
//! the embeddable `Runtime`, and (in the binary) the CLI. The engine lives in
//! `manus-actors`, re-exported here as `engine`.

pub mod allocator;
pub mod approvals;
pub mod board;
pub mod cells;
pub mod cluster;
pub mod config;
pub mod eval;
pub mod forks;
#[cfg(test)]
mod fuzz;
pub mod runtime;
pub mod serve;
pub mod settings;
pub mod store;
pub mod telemetry;
pub mod threads;
pub mod view;

pub use config::{Config, ConfigError, SandboxMode};
pub use manus_actors as engine;
pub use manus_actors::protocol::{FlowEvent, FlowMode, FlowOutcome, FlowStatus};
pub use runtime::{
    FlowControl, FlowHandle, ForkOptions, Runtime, RuntimeBuilder, RuntimeError, SubmitOptions,
};
