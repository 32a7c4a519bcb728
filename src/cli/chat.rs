//! `chat`: a conversation at the terminal. Each line typed is the next turn of one thread
//! (`SubmitOptions::continues`), followed on the board as `run-flow` follows a flow; Ctrl-C
//! cancels the running turn, not the chat.

use std::io::Write;
use std::process::ExitCode;

use manus_rt::{Config, FlowMode, SubmitOptions};

use super::args::ChatArgs;
use super::terminal::Prompt;
use super::{exit, flow};

pub async fn run(config: Config, args: ChatArgs) -> ExitCode {
    let Some(runtime) = flow::start(config, args.record.as_deref()).await else {
        return exit::not_started();
    };
    if runtime.store().is_none() {
        runtime.shutdown().await;
        return exit::not_started_because(
            "a chat keeps its turns in the run store, and [store] enabled = false",
        );
    }
    let mode = if args.single {
        FlowMode::Single
    } else {
        FlowMode::Plan
    };
    eprintln!(
        "manus-rt chat: type a request and press Enter; each line is a turn that sees the earlier \
         ones. Ctrl-C cancels a running turn; at the prompt, Ctrl-C, Ctrl-D or /exit ends the chat."
    );
    let mut last = args.continues;
    let mut prompt = Prompt::new();
    loop {
        eprint!("you> ");
        let _ = std::io::stderr().flush();
        let line = tokio::select! {
            line = prompt.line() => line,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else {
            eprintln!();
            break;
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            _ => {}
        }
        let options = SubmitOptions {
            mode,
            deltas: true,
            continues: last.clone(),
            user: Some(manus_rt::approvals::local_user()),
        };
        match runtime.submit(line, options).await {
            Ok(handle) => {
                last = Some(handle.id.clone());
                let followed = flow::follow(handle, false, args.approvals.on_approval).await;
                if let flow::Followed::Paused { .. } = followed {
                    // Says how to decide and resume; the next turn waits for that.
                    exit::of_followed(Some(&followed));
                }
            }
            Err(e) => eprintln!("manus-rt: {e}"),
        }
    }
    if let Some(id) = &last {
        eprintln!("note: `manus-rt chat --continue {id}` takes this conversation up again");
    }
    runtime.shutdown().await;
    ExitCode::SUCCESS
}
