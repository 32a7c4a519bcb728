//! Threads whose work no running step waits on, and that give way to it: the idle
//! scheduling class (`give_way`), used by the run store's thread and by the planning thread
//! (`PlanningThread`), where the planners make their model calls.

use std::io;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Put the calling thread in Linux's idle scheduling class (SCHED_IDLE), so that when a
/// running step and this thread both want the CPU the step gets it: a step's thread that
/// wakes takes the core at once, rather than after this thread's time slice (which at
/// nice 19, the fallback, can hold a step up for a millisecond or more). The thread still
/// gets a sliver of a busy CPU, so it never stops. `who` names it in the log if the call
/// is refused. Elsewhere than Linux this does nothing.
pub fn give_way(who: &str) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; sched_setscheduler and setpriority only read
        // their arguments, and lowering a thread's own priority needs no privilege.
        let failed = unsafe {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0
                && libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) != 0
        };
        if failed {
            tracing::debug!(
                "{who}: cannot lower its thread's priority: {}",
                io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = who;
}

/// The thread where planners make their model calls (the plan and the summary): a tokio
/// runtime of its own on one thread in the idle class. When 1,000 flows arrive at once,
/// their plans come back in the same millisecond as the first steps' answers; here, reading
/// and parsing the plans waits for the cores the running steps leave free, instead of
/// queueing ahead of those steps on the runtime's workers. Only the finished plan crosses
/// back, as one message to its planner. Stopped when dropped (the runtime and its planners
/// share it); calls still in flight end with it.
pub struct PlanningThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl PlanningThread {
    pub fn start() -> io::Result<PlanningThread> {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("planning".into())
            .spawn(move || {
                give_way("planning");
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => {
                        let _ = ready_tx.send(Ok(rt.handle().clone()));
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })?;
        let handle = ready
            .recv()
            .map_err(|_| io::Error::other("the planning thread ended as it started"))??;
        Ok(PlanningThread {
            handle,
            stop: Some(stop),
        })
    }

    /// Where a planner spawns its model calls.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for PlanningThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduling policy of the calling thread.
    fn policy() -> i32 {
        // SAFETY: no arguments beyond the calling thread's id (0).
        unsafe { libc::sched_getscheduler(0) }
    }

    #[tokio::test]
    async fn planning_calls_run_on_a_thread_of_their_own_in_the_idle_class() {
        let planning = PlanningThread::start().unwrap();
        let (name, class) = planning
            .handle()
            .spawn(async {
                let name = std::thread::current().name().map(str::to_owned);
                (name, policy())
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("planning"));
        assert_eq!(class, libc::SCHED_IDLE);
        assert_eq!(
            policy(),
            libc::SCHED_OTHER,
            "the caller's thread keeps its class"
        );
    }

    #[tokio::test]
    async fn dropping_it_stops_its_calls() {
        let planning = PlanningThread::start().unwrap();
        let handle = planning.handle().clone();
        let call = handle.spawn(std::future::pending::<()>());
        drop(planning);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), call).await;
        assert!(
            ended.expect("the call ends with the thread").is_err(),
            "cancelled, not finished"
        );
    }
}
