//! A supervisor's child actors, one per flow: the browser supervisor's owners and the
//! sandbox supervisor's containers. A child is started linked to its supervisor on its
//! flow's first request; it leaves the table when it stops or fails (the supervisor hands
//! its supervision events to `forget`), so the flow's next request starts a new one; the
//! rest are stopped with the supervisor. Each entry carries what the supervisor keeps
//! beside its child (`T`). Knows nothing else of the engine.

use std::collections::HashMap;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorRef, Message, SpawnErr, SupervisionEvent};

/// One flow's child and what its supervisor keeps beside it.
pub(crate) struct Child<M, T> {
    pub actor: ActorRef<M>,
    pub data: T,
}

/// The children of one supervisor, by flow id.
pub(crate) struct FlowChildren<M, T = ()> {
    /// What a child is, for the log (`a {what} failed`).
    what: &'static str,
    by_flow: HashMap<String, Child<M, T>>,
}

impl<M: Message, T> FlowChildren<M, T> {
    pub fn new(what: &'static str) -> Self {
        FlowChildren {
            what,
            by_flow: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_flow.len()
    }

    pub fn get(&self, flow: &str) -> Option<&Child<M, T>> {
        self.by_flow.get(flow)
    }

    pub fn get_mut(&mut self, flow: &str) -> Option<&mut Child<M, T>> {
        self.by_flow.get_mut(flow)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Child<M, T>)> {
        self.by_flow.iter()
    }

    /// Takes the flow's child out of the table; stopping it is the caller's.
    pub fn remove(&mut self, flow: &str) -> Option<Child<M, T>> {
        self.by_flow.remove(flow)
    }

    /// Spawns `flow`'s child linked to `supervisor` and keeps it with `data()`, made once
    /// the child has started (its `pre_start` may take a while: a container is created).
    pub async fn start<A: Actor<Msg = M>>(
        &mut self,
        flow: &str,
        actor: A,
        args: A::Arguments,
        supervisor: ActorCell,
        data: impl FnOnce() -> T,
    ) -> Result<ActorRef<M>, SpawnErr> {
        let (child, _) = Actor::spawn_linked(None, actor, args, supervisor).await?;
        let kept = Child {
            actor: child.clone(),
            data: data(),
        };
        self.by_flow.insert(flow.to_string(), kept);
        Ok(child)
    }

    /// A child that stopped or failed leaves the table (a failure is logged).
    pub fn forget(&mut self, evt: &SupervisionEvent) {
        let gone = match evt {
            SupervisionEvent::ActorTerminated(cell, _, _) => cell.get_id(),
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::warn!("a {} failed: {err}", self.what);
                cell.get_id()
            }
            _ => return,
        };
        self.by_flow.retain(|_, c| c.actor.get_id() != gone);
    }

    /// Empties the table, stopping each child in turn and waiting up to `wait` for it:
    /// the supervisor's own stop, so no child outlives it.
    pub async fn stop_all(&mut self, wait: Duration) {
        for (_, c) in self.by_flow.drain() {
            let _ = c
                .actor
                .stop_and_wait(Some("shutdown".into()), Some(wait))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ractor::ActorProcessingErr;

    struct Idle;

    impl Actor for Idle {
        type Msg = ();
        type State = ();
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<()>,
            _args: (),
        ) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_stopped_child_leaves_and_the_rest_stop_with_the_table() {
        let (parent, _) = Actor::spawn(None, Idle, ()).await.unwrap();
        let mut children: FlowChildren<(), u8> = FlowChildren::new("test child");
        let a = children
            .start("a", Idle, (), parent.get_cell(), || 1)
            .await
            .unwrap();
        let b = children
            .start("b", Idle, (), parent.get_cell(), || 2)
            .await
            .unwrap();
        assert_eq!(children.len(), 2);
        assert_eq!(children.get("b").map(|c| c.data), Some(2));
        assert_eq!(children.get("a").unwrap().actor.get_id(), a.get_id());

        children.forget(&SupervisionEvent::ActorTerminated(a.get_cell(), None, None));
        assert!(children.get("a").is_none());
        assert_eq!(children.len(), 1);

        children.stop_all(Duration::from_secs(5)).await;
        assert_eq!(children.len(), 0);
        assert_eq!(b.get_status(), ractor::ActorStatus::Stopped);
        a.stop(None);
        parent.stop(None);
    }
}
