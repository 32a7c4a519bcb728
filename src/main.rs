//! The `manus-rt` binary: the allocator, the async runtime, and the command line (`cli`).

mod cli;

manus_rt::use_mimalloc!();

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cli::main().await
}
