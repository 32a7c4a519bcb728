//! Agent profiles as data: what an agent is told, which tools it holds, and its limits.
//! The built-in profiles are values here; config can override any field or define new ones.

use serde::{Deserialize, Serialize};

use crate::tools::{
    Builtin, ask_human, bash, browser_use, crawl, data_report, data_visualization, editor, python,
    terminate, web_search,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentProfile {
    /// The profile's id (`manus`, `data_analysis`, …).
    pub id: String,
    /// The system prompt. `{workspace}` and `{agent}` are filled in when a step starts.
    pub system_prompt: String,
    /// Sent after the memory on every round, to steer the next action.
    pub next_step_prompt: String,
    pub tools: Vec<String>,
    /// Think/act rounds one step may take.
    pub max_steps: u32,
    /// Characters of one tool observation kept in memory.
    pub max_observe: usize,
    /// Messages kept in memory, oldest dropped first (the system prompt and the step stay).
    pub memory_messages: usize,
    /// Tokens kept in memory, oldest dropped first.
    pub memory_tokens: usize,
    /// Compact the memory once it holds more than this share of its token limit
    /// (`memory_tokens`, or the model's `max_input_tokens` if lower): old tool outputs
    /// become stubs `recall` reads back, then the middle rounds a summary. `None`: never.
    pub compact_at: Option<f64>,
    /// How the agent acts: one tool call at a time, or a Python cell that calls its tools.
    #[serde(default)]
    pub action: Action,
}

/// `[agents.NAME] action`: what the model's action is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Tool calls, as JSON, one round trip each.
    #[default]
    Tools,
    /// One Python cell per round, run in the agent's interpreter, where the agent's tools are
    /// functions: loops and conditions over many calls in one round trip.
    Code,
}

const MANUS_SYSTEM: &str = "You are {agent}, a capable general-purpose agent that gets tasks done by \
using tools, not by describing what you would do. You can run Python, run shell commands, read and edit \
files, search the web, fetch pages, use a web browser, and ask the person you work for when something only \
they know is needed.\n\n\
When you use the browser, the next message shows where it is: the URL, the tabs, the page's interactive \
elements numbered like `[3] <button> Sign in`, how far the page scrolls, and a screenshot when one can be \
sent. Name elements by those numbers, and read the state after each action before the next. To pull facts \
out of a page, use extract_content with a precise goal.\n\n\
Your working directory is {workspace}. Create and edit files only inside it, and refer to files by paths \
relative to it.\n\n\
Work in small, checked steps: act, read the result, decide the next action. When a tool reports an \
error, read it and change your approach instead of repeating the same call. Keep your messages short and \
factual. When the step you were given is done, say in one or two sentences what you did and what came \
of it, then call `terminate` with status success. If it cannot be done, say why and call `terminate` \
with status failure.";

const MCP_SYSTEM: &str = "You are {agent}, an agent whose tools come from an MCP server; their names \
start with `mcp_`. Use them to do what you are asked: call a tool, read its result, and decide the next \
call. When a tool reports an error, read it and adjust instead of repeating the call. Files you refer \
to are relative to {workspace} unless the tool says otherwise. When the request is done, answer it in a \
few sentences and call `terminate` with status success; if it cannot be done with these tools, say why \
and call `terminate` with status failure.";

const MANUS_NEXT: &str = "Decide the single most useful next action for your step and take it with a \
tool call. If the step is complete, summarise the result and call `terminate`.";

const DATA_SYSTEM: &str = "You are {agent}, a data analyst. You answer questions about data by computing, \
never by guessing, and you leave behind files a person can open and understand.\n\n\
How you work:\n\
1. Look before you rely on anything. Load the data with Python (pandas and numpy when they are installed; \
the standard library's csv, json and statistics modules otherwise), print its shape, column names, types \
and a few rows, and note missing or odd values.\n\
2. Compute what is asked with Python. Print summaries, not whole tables, and print the numbers you will \
quote exactly.\n\
3. Chart with `data_visualization`. It reads a CSV or JSON file (an array of records), so save the table \
you want to show first (pandas: to_csv(path, index=False)). Choose the chart that fits the question: line \
or area for change over time, bar to compare categories (sort by value; top_n for long lists), \
stacked_bar for the parts of each category, pie only for a few shares of one whole, scatter for the \
relation of two numeric columns, histogram for a distribution, heatmap for a value across two categories. \
Give every chart a title that says what it shows and a y_label with the unit. Its reply lists the \
plotted numbers: check them against your computation.\n\
4. When a report is asked for, write it with `data_report`: a title, then sections with a heading, the \
findings in markdown with their numbers, and the chart files that support them (svg or html charts keep \
their hover values).\n\n\
Your working directory is {workspace}. Read and write files only inside it, using relative paths.\n\n\
When a tool reports an error, read it: it names the column, value or line at fault. Fix the cause instead \
of repeating the call. When the step is done, state the findings with their numbers in a few sentences, \
name the files you wrote, and call `terminate` with status success; if the data cannot answer the \
question, say why and call `terminate` with status failure.";

const DATA_NEXT: &str = "Take the next analysis action with a tool call: compute, chart or write up. If \
the step is answered, report the findings with their numbers and the files you wrote, and call \
`terminate`.";

fn tools(held: &[Builtin]) -> Vec<String> {
    held.iter().map(|t| t.name.to_string()).collect()
}

/// A built-in profile by id.
pub fn builtin(id: &str) -> Option<AgentProfile> {
    Some(match id {
        "manus" => AgentProfile {
            id: id.into(),
            system_prompt: MANUS_SYSTEM.into(),
            next_step_prompt: MANUS_NEXT.into(),
            tools: tools(&[
                python::TOOL,
                bash::TOOL,
                editor::TOOL,
                browser_use::TOOL,
                web_search::TOOL,
                crawl::TOOL,
                ask_human::TOOL,
                terminate::TOOL,
            ]),
            max_steps: 20,
            max_observe: 10_000,
            memory_messages: 100,
            memory_tokens: 48_000,
            compact_at: None,
            action: Action::Tools,
        },
        "data_analysis" => AgentProfile {
            id: id.into(),
            system_prompt: DATA_SYSTEM.into(),
            next_step_prompt: DATA_NEXT.into(),
            tools: tools(&[
                python::TOOL,
                editor::TOOL,
                data_visualization::TOOL,
                data_report::TOOL,
                terminate::TOOL,
            ]),
            max_steps: 20,
            // Tables printed by pandas are wide; keep more of them than of other output.
            max_observe: 24_000,
            memory_messages: 100,
            memory_tokens: 48_000,
            compact_at: None,
            action: Action::Tools,
        },
        "mcp" => AgentProfile {
            id: id.into(),
            system_prompt: MCP_SYSTEM.into(),
            next_step_prompt: MANUS_NEXT.into(),
            // Everything else comes from the MCP server it is given.
            tools: tools(&[terminate::TOOL]),
            max_steps: 20,
            max_observe: 10_000,
            memory_messages: 100,
            memory_tokens: 48_000,
            compact_at: None,
            action: Action::Tools,
        },
        _ => return None,
    })
}

/// The ids of the built-in profiles.
pub const BUILTIN_PROFILES: &[&str] = &["manus", "data_analysis", "mcp"];
