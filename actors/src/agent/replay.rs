//! A forked step's recorded answers (`StepRequest.replay`), fed to the think/act loop in
//! place of model calls while its tools run for real, and each tool result compared with
//! the one recorded. Once they run out the step goes on live. Knows nothing of where the
//! record comes from.

use std::collections::VecDeque;

use super::step::StepRun;
use crate::llm::{Message, ToolCall};
use crate::protocol::{FlowEvent, RecordedAnswer, StepReplay, ToolDiff, ToolResult};
use crate::text::clip;

/// How much of a differing result the report keeps, each side.
const DIFF_CHARS: usize = 400;

/// Where a step stands in its recorded answers.
#[derive(Debug, Default)]
pub(super) struct Replaying {
    answers: VecDeque<RecordedAnswer>,
    /// How many recorded answers were fed, and whether a model was asked after them.
    fed: u32,
    went_live: bool,
    /// The round of the answer fed last, and its calls' recorded results.
    round: u32,
    expected: Vec<(String, bool, String)>,
    differed: Vec<ToolDiff>,
}

impl Replaying {
    pub(super) fn new(replay: &StepReplay) -> Self {
        Replaying {
            answers: replay.answers.iter().cloned().collect(),
            ..Default::default()
        }
    }

    /// The next recorded answer, for round `round`; `None` once they have run out (and
    /// the step asks the model from then on).
    pub(super) fn next(&mut self, round: u32) -> Option<Message> {
        let Some(answer) = self.answers.pop_front() else {
            self.went_live = true;
            self.expected.clear();
            return None;
        };
        self.fed += 1;
        self.round = round;
        self.expected = answer.results;
        Some(answer.message)
    }

    /// More recorded answers follow the one fed last: the recorded step went on after it.
    pub(super) fn more(&self) -> bool {
        !self.answers.is_empty()
    }

    /// Every answer of the step came from the record: no model was asked.
    pub(super) fn whole(&self) -> bool {
        self.fed > 0 && !self.went_live
    }

    /// Note `result` of `call` if the record says otherwise (as `ToolFinished` holds both).
    pub(super) fn compare(&mut self, call: &ToolCall, result: &ToolResult) {
        let Some((_, ok, output)) = self.expected.iter().find(|(id, ..)| *id == call.id) else {
            return;
        };
        let now = clip(&result.output, super::act::FINISHED_CHARS);
        if *ok == result.ok && *output == now {
            return;
        }
        let shown = |ok: bool, text: &str| {
            let text = clip(text, DIFF_CHARS);
            if ok { text } else { format!("Error: {text}") }
        };
        self.differed.push(ToolDiff {
            round: self.round,
            tool: call.function.name.clone(),
            call_id: call.id.clone(),
            recorded: shown(*ok, output),
            now: shown(result.ok, &now),
        });
    }
}

impl StepRun<'_> {
    /// Tell the flow how many recorded answers the step ran on, and which tool results
    /// came out otherwise than recorded (nothing, for a step that replayed none).
    pub(super) fn replay_report(&self) {
        if self.replay.fed == 0 {
            return;
        }
        self.emit(FlowEvent::StepReplayed {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            answers: self.replay.fed,
            differed: self.replay.differed.clone(),
        });
    }
}
