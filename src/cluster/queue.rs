//! The runtime's queue verbs on a cluster: a task queued in the shared store for whichever
//! node has room, the oldest queued (or orphaned) run claimed and started here, and every
//! run this node holds handed back. The SQL is the store's.

use crate::runtime::{FlowHandle, Run, Runtime, RuntimeError, SubmitOptions, new_flow_id, refused};
use crate::store::{RunStatus, StoredRun};

impl Runtime {
    /// Cluster (`[cluster]`): queue a task for whichever node has room first (this one
    /// too); its run id. The run is in the store when this returns. With `continues`, it
    /// is the next turn of that run's thread (`SubmitOptions::continues`).
    pub async fn enqueue(
        &self,
        task: &str,
        options: &SubmitOptions,
    ) -> Result<String, RuntimeError> {
        let store = self.store().ok_or(RuntimeError::NoStore)?;
        let now = crate::store::now_ms();
        let run = StoredRun {
            id: new_flow_id(),
            task: task.to_string(),
            mode: options.mode,
            status: RunStatus::Queued,
            plan: None,
            usage: Default::default(),
            usage_by_agent: Default::default(),
            outcome: None,
            owner: None,
            created_at: now,
            updated_at: now,
            elapsed_ms: 0,
        };
        let id = run.id.clone();
        let continues = options.continues.clone();
        store
            .enqueue(run, continues.clone(), options.user.clone())
            .await?
            .map_err(|why| refused(&continues.unwrap_or_default(), why))?;
        Ok(id)
    }

    /// Cluster: take the oldest queued run, or one whose node fell silent, and run it
    /// here (a run taken over resumes from its last completed step); `None` when no run
    /// waits.
    pub async fn claim(&self, deltas: bool) -> Result<Option<FlowHandle>, RuntimeError> {
        let store = self.store().ok_or(RuntimeError::NoStore)?;
        let Some((id, fence)) = store.claim_next().await? else {
            return Ok(None);
        };
        let run = store
            .get(&id)
            .await?
            .ok_or_else(|| RuntimeError::UnknownRun(id.clone()))?;
        let seq = store.next_seq(&id).await?;
        tracing::info!(run = %id, fence, taken_over = seq > 0, "claimed a run");
        let handle = if seq == 0 {
            let (turn, user) = self.place(&run.id).await?;
            self.start_flow(Run {
                turn,
                user,
                id: run.id,
                task: run.task,
                mode: run.mode,
                resume: None,
                deltas,
                seq,
                created_at: run.created_at,
                workspace: None,
            })
            .await
        } else {
            self.continue_run(run, seq).await
        };
        if handle.is_err() {
            // Let another node try it.
            let _ = store.release(Some(&id)).await;
        }
        handle.map(Some)
    }

    /// Cluster: let go of every run this node holds, for the other nodes to take over
    /// from their last completed step; the flows here then stop without writing.
    pub async fn hand_back(&self) -> Result<(), RuntimeError> {
        if let Some(store) = self.store() {
            store.release(None).await?;
        }
        Ok(())
    }
}
