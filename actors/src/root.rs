//! The root supervisor: owns every flow's planner, so a crashed flow is logged and
//! contained, never the end of the process, and stopping it stops every flow. It takes no
//! messages; `start_flow` starts a flow under it.

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::planner::{FlowSpec, Planner};
use crate::protocol::{FlowMsg, RootMsg};

pub struct Root;

/// Start the flow `spec` describes under `root` and tell its planner to begin; returns the
/// planner. This runs in the caller's task: the planner's `pre_start` is quick and runs
/// inline, so submitting a flow costs no round trip through the root's mailbox, and the
/// planner is linked to the root (stopped with it, its crash reported to it) before this
/// returns.
pub async fn start_flow(
    root: &ActorRef<RootMsg>,
    spec: FlowSpec,
) -> Result<ActorRef<FlowMsg>, String> {
    let id = spec.id.clone();
    let (planner, _) = Actor::spawn_linked(None, Planner, spec, root.get_cell())
        .await
        .map_err(|e| format!("cannot start flow {id}: {e}"))?;
    planner
        .send_message(FlowMsg::Begin)
        .map_err(|e| format!("cannot start flow {id}: {e}"))?;
    Ok(planner)
}

impl Actor for Root {
    type Msg = RootMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<RootMsg>,
        _args: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<RootMsg>,
        msg: RootMsg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }

    async fn post_stop(
        &self,
        myself: ActorRef<RootMsg>,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children(None);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<RootMsg>,
        evt: SupervisionEvent,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            tracing::error!(planner = ?cell.get_name(), "a flow's planner crashed: {err}");
        }
        Ok(())
    }
}
