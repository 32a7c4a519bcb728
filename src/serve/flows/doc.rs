//! `FlowDoc`, the one document a flow is shown as (`Flow` and `FlowSummary` in
//! docs/openapi.json), whether it is held here or read from a cluster's store, and the
//! approvals list's rows. Data and serialisation only.

use std::collections::BTreeMap;

use manus_actors::llm::Usage;
use manus_actors::plan::Plan;
use serde::{Serialize, Serializer};

use crate::store::{RunStatus, StoredRun};
use crate::view::{Approval, FlowView, Question};

/// A flow as the service shows it (`Flow` and `FlowSummary` in docs/openapi.json).
#[derive(Debug, Serialize)]
pub(in crate::serve) struct FlowDoc {
    id: String,
    task: String,
    status: Shown,
    /// Whether it has ended: nothing more will happen to it.
    finished: bool,
    created_ms: u64,
    usage: Usage,
    /// Events logged, where known (a flow held here).
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<u64>,
    /// On a cluster, the node that runs (or ran) it.
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    detail: Option<Detail>,
}

/// What a full document adds: the plan, what waits for a person, and how it ended.
#[derive(Debug, Serialize)]
struct Detail {
    plan: Option<Plan>,
    #[serde(flatten)]
    pending: Pending,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    ended: Option<Ended>,
}

/// A flow's open questions and the calls waiting for approval.
#[derive(Debug, Default, Serialize)]
struct Pending {
    questions: Vec<QuestionDoc>,
    approvals: Vec<ApprovalDoc>,
}

#[derive(Debug, Serialize)]
struct QuestionDoc {
    id: u64,
    #[serde(flatten)]
    question: Question,
}

#[derive(Debug, Serialize)]
struct ApprovalDoc {
    id: u64,
    #[serde(flatten)]
    approval: Approval,
}

/// A call waiting for approval, with its flow (`GET /v1/approvals`).
#[derive(Debug, Serialize)]
pub(in crate::serve) struct FlowApproval {
    #[serde(flatten)]
    approval: ApprovalDoc,
    flow: String,
}

#[derive(Debug, Serialize)]
struct Ended {
    reason: String,
    result: String,
    usage_by_agent: BTreeMap<String, Usage>,
    elapsed_ms: u64,
}

/// A flow's status as the service shows it: `awaiting_approval` while a call waits for a
/// person, else the run's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    AwaitingApproval,
    Run(RunStatus),
}

impl Shown {
    fn of(v: &FlowView) -> Shown {
        match v.outcome {
            None if !v.approvals.is_empty() => Shown::AwaitingApproval,
            _ => Shown::Run(v.status()),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Shown::AwaitingApproval => "awaiting_approval",
            Shown::Run(s) => s.as_str(),
        }
    }
}

impl Serialize for Shown {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Pending {
    fn of(v: &FlowView) -> Pending {
        Pending {
            questions: v
                .questions
                .iter()
                .map(|(id, q)| QuestionDoc {
                    id: *id,
                    question: q.clone(),
                })
                .collect(),
            approvals: v
                .approvals
                .iter()
                .map(|(id, a)| ApprovalDoc::of(*id, a))
                .collect(),
        }
    }
}

impl ApprovalDoc {
    fn of(id: u64, a: &Approval) -> ApprovalDoc {
        ApprovalDoc {
            id,
            approval: a.clone(),
        }
    }
}

impl FlowApproval {
    pub(super) fn new(flow: &str, id: u64, a: &Approval) -> FlowApproval {
        FlowApproval {
            approval: ApprovalDoc::of(id, a),
            flow: flow.to_string(),
        }
    }
}

impl FlowDoc {
    /// A flow held here: its view folded from its `events` so far.
    pub(super) fn held(
        id: &str,
        v: &FlowView,
        created_ms: u64,
        events: u64,
        node: Option<String>,
        full: bool,
    ) -> FlowDoc {
        FlowDoc {
            id: id.to_string(),
            task: v.task.clone(),
            status: Shown::of(v),
            finished: v.outcome.is_some(),
            created_ms,
            usage: v.usage,
            events: Some(events),
            node,
            detail: full.then(|| Detail {
                plan: v.plan.clone(),
                pending: Pending::of(v),
                ended: v.outcome.as_ref().map(|o| Ended {
                    reason: o.reason.clone(),
                    result: o.summary.clone(),
                    usage_by_agent: o.usage_by_agent.clone(),
                    elapsed_ms: o.elapsed_ms,
                }),
            }),
        }
    }

    /// A run as the store holds it; what waits for a person from `folded`, its events
    /// folded, while it runs.
    pub(super) fn stored(run: &StoredRun, folded: Option<&FlowView>, full: bool) -> FlowDoc {
        FlowDoc {
            id: run.id.clone(),
            task: run.task.clone(),
            status: folded.map_or(Shown::Run(run.status), Shown::of),
            finished: run.status.ended(),
            created_ms: run.created_at.max(0) as u64,
            usage: run.usage,
            events: None,
            node: run.owner.clone(),
            detail: full.then(|| Detail {
                plan: run.plan.clone(),
                pending: folded.map(Pending::of).unwrap_or_default(),
                ended: run.outcome.as_ref().map(|o| Ended {
                    reason: o.reason.clone(),
                    result: o.summary.clone(),
                    usage_by_agent: o.usage_by_agent.clone(),
                    elapsed_ms: run.elapsed_ms,
                }),
            }),
        }
    }
}
