//! The root supervisor: owns every flow's planner, so a crashed flow is logged and
//! contained, never the end of the process.

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::planner::Planner;
use crate::protocol::{FlowMsg, RootMsg};

pub struct Root;

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
        myself: ActorRef<RootMsg>,
        msg: RootMsg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RootMsg::StartFlow(spec, reply) => {
                let id = spec.id.clone();
                let started = Actor::spawn_linked(None, Planner, spec, myself.get_cell()).await;
                let answer = match started {
                    Ok((planner, _)) => planner
                        .send_message(FlowMsg::Begin)
                        .map(|_| planner)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(format!("cannot start flow {id}: {e}")),
                };
                let _ = reply.send(answer);
            }
        }
        Ok(())
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
