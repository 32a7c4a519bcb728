//! Generated-input tests of the host's parsers of outside input (test builds only): the
//! config here, the service's request bodies in `serve::fuzz`. The generator and the runner
//! are the engine's (`actors/src/fuzz.rs`), compiled here too, since test code of one crate
//! is not visible to another.

#[path = "../actors/src/fuzz.rs"]
mod harness;

mod config;

pub(crate) use harness::{Gen, run};
