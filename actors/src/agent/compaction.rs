//! Compaction: folding a step's middle rounds into a summary once its memory passes
//! `compact_at` (after pruning old outputs, which `memory` does), and the brief of long
//! final notes that later steps' prompts show. Both are written by the compaction model
//! (`compact_llm`), else the agent's own, counted toward the step and the flow's budgets
//! and published as `Compacted`. The step loop compacts before each round's model call;
//! the actor briefs a step's notes once it has ended. Knows nothing of tools.

use std::time::Instant;

use tracing::Instrument;

use super::prompts::{NOTES_SYSTEM, SUMMARY_SYSTEM};
use super::step::StepRun;
use crate::llm::{ChatRequest, LlmClient, Message, Role, ToolChoice, ToolSet, Usage};
use crate::plan::{NOTE_CHARS, StepStatus};
use crate::protocol::{FlowEvent, StepOutcome};
use crate::text::clip;

impl StepRun<'_> {
    /// Who writes summaries: the compaction model, else the agent's own.
    fn compaction_llm(&self) -> LlmClient {
        let spec = &self.state.spec;
        spec.compact_llm.clone().unwrap_or_else(|| spec.llm.clone())
    }

    /// Ask the compaction model to summarise `text` as `system` says: the summary and its
    /// tokens (counted toward the step and the budgets, and published), or why not.
    async fn summarise(&mut self, system: &str, text: String) -> Result<(String, Usage), String> {
        let llm = self.compaction_llm();
        let system = Message::system(system);
        let ask = Message::user(text);
        let request = ChatRequest {
            messages: vec![&system, &ask],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::None,
        };
        let started = Instant::now();
        let resp = llm.chat(&request).await.map_err(|e| e.to_string())?;
        let summary = resp.message.text().trim().to_string();
        if summary.is_empty() {
            return Err("the summary came back empty".into());
        }
        let usage = resp.usage;
        self.usage.add(usage);
        self.spent(usage).await;
        self.emit(FlowEvent::LlmCalled {
            agent: self.state.spec.name.clone(),
            step: Some(self.req.step_index),
            model: llm.model().to_string(),
            usage,
            elapsed_ms: started.elapsed().as_millis() as u64,
        });
        Ok((summary, usage))
    }

    /// Final notes longer than the plan view shows are summarised for the later steps'
    /// prompts (by the compaction model, else the agent's); if that fails, the view cuts
    /// them instead. The step's own notes stay whole.
    pub(super) async fn brief(&mut self, outcome: &mut StepOutcome) {
        let notes = outcome.summary.trim();
        if notes.len() <= NOTE_CHARS || outcome.status == StepStatus::AwaitingApproval {
            return;
        }
        // A step replayed whole asks no model: its brief is the recorded one.
        if self.replay.whole() {
            outcome.brief = self.req.replay.brief.clone();
            return;
        }
        let ask = format!("The step: {}\n\nIts notes:\n{notes}", self.req.step);
        let span = tracing::info_span!("compact", manus.compact.notes = true);
        let (brief, usage) = match self.summarise(NOTES_SYSTEM, ask).instrument(span).await {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(agent = %self.state.spec.name, "could not summarise the step's notes ({e}); later steps see them cut");
                return;
            }
        };
        outcome.usage = self.usage;
        let llm = self.compaction_llm();
        let bpe = crate::llm::tokens::encoding_for(llm.model());
        let count = |t: &str| crate::llm::tokens::count_text(bpe, t);
        self.emit(FlowEvent::Compacted {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tokens_before: count(notes),
            tokens_after: count(&brief),
            pruned: 0,
            folded: 0,
            usage,
            notes: true,
        });
        outcome.brief = Some(brief);
    }

    /// Past the compaction threshold after pruning, fold the middle rounds into a summary
    /// the model writes (a failed summary leaves the memory to its token cap, which drops
    /// the oldest rounds); publish what compaction did this round.
    pub(super) async fn compact(&mut self, round: u32) {
        if self.state.spec.profile.compact_at.is_none() {
            return;
        }
        let pruned = std::mem::take(&mut self.memory.pruned_lately);
        let over = self.memory.over_compaction();
        if pruned == 0 && !over {
            return;
        }
        let span = tracing::info_span!(
            "compact",
            manus.round = round,
            manus.compact.pruned = pruned,
            manus.compact.folded = tracing::field::Empty,
            manus.compact.tokens_before = tracing::field::Empty,
            manus.compact.tokens_after = tracing::field::Empty,
        );
        let before = self.memory.tokens();
        let mut folded = 0;
        let mut usage = Usage::default();
        let middle = self.memory.middle();
        if over && !middle.is_empty() {
            let transcript = transcript(self.memory.messages(middle.clone()));
            match self
                .summarise(SUMMARY_SYSTEM, transcript)
                .instrument(span.clone())
                .await
            {
                Ok((summary, spent)) => {
                    usage = spent;
                    folded = middle.len();
                    let summary = format!(
                        "Summary of this step's earlier rounds (folded to save context; pruned \
                         outputs can still be read with recall):\n{summary}"
                    );
                    self.memory.fold(middle, Message::user(summary));
                }
                Err(e) => {
                    tracing::warn!(agent = %self.state.spec.name, "could not summarise old rounds ({e}); they will be dropped instead")
                }
            }
        }
        let after = self.memory.tokens();
        span.record("manus.compact.folded", folded);
        span.record("manus.compact.tokens_before", before);
        span.record("manus.compact.tokens_after", after);
        self.emit(FlowEvent::Compacted {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tokens_before: before,
            tokens_after: after,
            pruned,
            folded,
            usage,
            notes: false,
        });
    }
}

/// Messages as a transcript for the summary call: each one's role, its text (long results
/// cut to their head and tail) and the calls it made.
fn transcript<'a>(messages: impl Iterator<Item = &'a Message>) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::Tool => format!("result of {}", m.name.as_deref().unwrap_or("a tool")),
            Role::Assistant => "agent".into(),
            Role::User => "note".into(),
            Role::System => "system".into(),
        };
        out.push_str(&format!("[{who}] {}\n", clip(m.text(), 4_000)));
        for c in &m.tool_calls {
            out.push_str(&format!(
                "[agent calls {}] {}\n",
                c.function.name,
                clip(&c.function.arguments, 2_000)
            ));
        }
    }
    out
}
