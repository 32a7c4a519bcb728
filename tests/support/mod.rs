//! Shared helpers for the integration tests and benchmarks; owns nothing but the module list.
#![allow(dead_code)]

pub mod anthropic_server;
pub mod browser;
pub mod cluster;
pub mod gemini_server;
pub mod issuer;
pub mod llama;
pub mod llm_server;
pub mod oauth_server;
pub mod otlp;
pub mod scenario;
pub mod service;
pub mod threads;
