//! `RunStore`: the handle flows and commands use, and the thread that owns the backend.
//! Writes queue without waiting and are applied in batches, one transaction each; reads
//! queue behind them, so a read sees every write sent before it. The thread also beats this
//! process's heartbeat, which tells other processes that its running flows are alive, and
//! prunes ended runs past the retention (`prune.rs`), a chunk at a time between batches.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::lease::LeaseClock;
use super::prune::{self, Retention};
use super::sql::{self, Owner};
use super::tap::Folds;
use super::threads::{self, Refused, TurnOf};
use super::{Backend, StoreError, StoreUrl, StoredEvent, StoredMemory, StoredRun, now_ms};
use manus_actors::protocol::FlowEvent;

/// How often this process says it is alive.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// At most this many writes go in one transaction.
const BATCH: usize = 2_000;
/// How long a batch waits for more writes: the most a write waits before its commit.
const GATHER: Duration = Duration::from_millis(20);
/// The longest a caller waits for the store's answer (a read, a commit it waits for): a
/// request against a store that does not answer fails with a reason, never hangs.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);
/// How often the retention is applied, once nothing was left to prune.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// One thing to write: what a flow's tap sends (see `tap`). Writes travel boxed (see
/// `Job`), so an event's size costs nothing in the queue.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Write {
    /// A flow starts, or resumes, from this state, with tap number `tap`; its events follow.
    Open {
        row: Box<StoredRun>,
        tap: u64,
        /// Who the run was started for, kept with it (`threads::own`).
        user: Option<String>,
    },
    /// Event `seq` of run `run_id` (memories take no number) from tap `tap`, which happened
    /// at `at` (ms since the epoch), `ran_ms` after its tap opened.
    Event {
        run_id: Arc<str>,
        tap: u64,
        seq: u64,
        at: i64,
        ran_ms: u64,
        event: FlowEvent,
    },
    /// The flow's events from tap `.1` ended: its state is written and forgotten.
    Closed(Arc<str>, u64),
}

type ReadJob = Box<dyn FnOnce(&mut dyn Backend, &Owner) + Send>;

/// Told once the batch holding a write is committed (or failed).
type Committed = oneshot::Sender<Result<(), String>>;

enum Job {
    /// A write, and whom to tell once it is committed (if anyone waits for that).
    Write(Box<Write>, Option<Committed>),
    Read(ReadJob),
    /// Apply this retention from now on, in the background.
    Retain(Retention),
    /// Prune one chunk now; the ids pruned.
    Prune(Retention, oneshot::Sender<Result<Vec<String>, String>>),
    /// Flush, retire this process's heartbeat, and stop.
    Close(oneshot::Sender<()>),
    /// Cluster: claim the oldest queued run, or one whose lease lapsed; its id and fence.
    Claim(oneshot::Sender<Result<Option<(String, i64)>, String>>),
    /// Cluster: let go of one run, or of all this node's, for other nodes to take over.
    Release(Option<String>, oneshot::Sender<Result<(), String>>),
    /// Cluster: this node's leases lapsed by its own clock and its flows are being
    /// stopped; nothing they write from now on is written.
    Lapsed,
}

/// What a cluster node's store does besides a process's: renew its leases with each
/// heartbeat, fence its writes, and say which runs it lost.
struct Node {
    lease: Duration,
    lost: tokio::sync::mpsc::UnboundedSender<String>,
    /// Set after each renewal the database took.
    clock: Arc<LeaseClock>,
}

/// The run store of one process; cheap to clone.
#[derive(Clone)]
pub struct RunStore {
    jobs: Sender<Job>,
    /// Cuts the store thread's gathering short: a read or close is waiting behind it.
    hurry: Arc<Hurry>,
    owner: Arc<Owner>,
    url: Arc<String>,
    /// Statements sent to the database so far.
    sent: Arc<std::sync::atomic::AtomicU64>,
    /// Cluster: when this node's leases lapse by its own clock.
    clock: Option<Arc<LeaseClock>>,
}

impl RunStore {
    /// Connect, create the tables if they are missing, and register this process. A store
    /// that cannot be reached is an error here, not later.
    pub async fn open(url: &StoreUrl) -> Result<RunStore, StoreError> {
        RunStore::start(url, Owner::this_process(), None).await
    }

    /// Open the store as cluster node `node` (`[cluster]`, PostgreSQL): its leases are
    /// renewed three times per `lease`, its writes are fenced, and the ids of the runs it
    /// lost to other nodes come out of the receiver.
    pub async fn open_node(
        url: &StoreUrl,
        node: &crate::settings::ClusterSettings,
    ) -> Result<(RunStore, tokio::sync::mpsc::UnboundedReceiver<String>), StoreError> {
        let (lost, lost_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut owner = Owner::this_process();
        if let Some(name) = &node.node_id {
            owner.id = format!("{name}:{}:{:x}", owner.pid, now_ms());
        }
        let node = Node {
            lease: node.lease,
            lost,
            clock: Arc::new(LeaseClock::new(node.lease, Instant::now())),
        };
        Ok((RunStore::start(url, owner, Some(node)).await?, lost_rx))
    }

    async fn start(
        url: &StoreUrl,
        owner: Owner,
        node: Option<Node>,
    ) -> Result<RunStore, StoreError> {
        let described = url.describe();
        let clock = node.as_ref().map(|n| n.clock.clone());
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sent_c = sent.clone();
        let (jobs, rx) = mpsc::channel();
        let (ready_tx, ready) = oneshot::channel();
        let (url_c, owner_c) = (url.clone(), owner.clone());
        let hurry = Arc::new(Hurry {
            flag: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
        });
        let hurry_c = hurry.clone();
        let thread = std::thread::Builder::new()
            .name("run-store".into())
            .spawn(move || {
                // Nobody waits on a write: under a burst the store catches up in the gaps
                // (its queue grows meanwhile).
                manus_actors::background::give_way("run store");
                let opened = super::connect(&url_c).map(|inner| {
                    Box::new(super::Counted {
                        inner,
                        sent: sent_c,
                    }) as Box<dyn Backend>
                });
                let opened = opened.and_then(|mut db| {
                    let mut setup: Vec<super::Stmt> = sql::SCHEMA
                        .iter()
                        .map(|s| super::Stmt {
                            sql: s,
                            params: vec![],
                        })
                        .collect();
                    setup.extend(super::memory::schema(db.postgres()).iter().map(|s| {
                        super::Stmt {
                            sql: s,
                            params: vec![],
                        }
                    }));
                    if node.is_some() {
                        setup.extend(super::cluster::SCHEMA.iter().map(|s| super::Stmt {
                            sql: s,
                            params: vec![],
                        }));
                    }
                    setup.push(sql::heartbeat(&owner_c, now_ms()));
                    let sent_at = Instant::now();
                    // Two processes creating the tables at once can collide on PostgreSQL
                    // (IF NOT EXISTS is not atomic there): the loser tries again and finds
                    // them made.
                    let mut tries = 0;
                    while let Err(e) = db.transaction(&setup) {
                        tries += 1;
                        if tries == 3 {
                            return Err(e);
                        }
                        std::thread::sleep(Duration::from_millis(100 * tries));
                    }
                    if let Some(n) = &node {
                        n.clock.renewed(sent_at);
                    }
                    Ok(db)
                });
                match opened {
                    Ok(db) => {
                        let _ = ready_tx.send(Ok(()));
                        serve(db, &owner_c, node, &rx, &hurry_c);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| StoreError {
                url: described.clone(),
                message: format!("cannot start its thread: {e}"),
            })?;
        let _ = hurry.thread.set(thread.thread().clone());
        let message = match ready.await {
            Ok(Ok(())) => {
                return Ok(RunStore {
                    jobs,
                    hurry,
                    owner: Arc::new(owner),
                    url: Arc::new(described),
                    sent,
                    clock,
                });
            }
            Ok(Err(e)) => e,
            Err(_) => "its thread stopped while opening it".into(),
        };
        Err(StoreError {
            url: described,
            message,
        })
    }

    /// The store's URL, without a password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How many statements this process has sent the database (transactions' BEGIN and
    /// COMMIT included).
    pub fn statements(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Cluster: this node's own clock of its leases.
    pub(crate) fn lease_clock(&self) -> Option<Arc<LeaseClock>> {
        self.clock.clone()
    }

    /// Cluster: this node's leases lapsed by its own clock (see `LeaseClock`); what its
    /// flows write from now on is dropped, as they are being stopped.
    pub(crate) fn lapsed(&self) {
        let _ = self.jobs.send(Job::Lapsed);
        self.hurry.wake();
    }

    /// This process's name in the store (the owner of the runs it runs).
    pub fn owner(&self) -> &str {
        &self.owner.id
    }

    /// Queue a write; never waits, never fails (a write that fails later is logged).
    pub(crate) fn write(&self, w: Write) {
        let _ = self.jobs.send(Job::Write(Box::new(w), None));
    }

    /// Write `w` and wait until it is committed: what a caller may promise once this
    /// returns survives the process being killed. The store thread stops gathering at
    /// once; writes that queue meanwhile (other submissions) share the next commit.
    pub(crate) async fn write_durably(&self, w: Write) -> Result<(), StoreError> {
        self.ask(|done| Job::Write(Box::new(w), Some(done))).await
    }

    /// Queue `w` as `write_durably` does, without waiting: the receiver hears once it is
    /// committed, or why not.
    pub(crate) fn write_awaited(&self, w: Write) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.jobs.send(Job::Write(Box::new(w), Some(tx)));
        self.hurry.wake();
        rx
    }

    /// Queue the job `make` builds around a reply port, hurry the store thread, and wait
    /// for the answer.
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, String>>) -> Job,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let fail = |message: String| StoreError {
            url: self.url.to_string(),
            message,
        };
        self.jobs
            .send(make(tx))
            .map_err(|_| fail("the store is closed".into()))?;
        self.hurry.wake();
        match tokio::time::timeout(ANSWER_WITHIN, rx).await {
            Ok(answer) => answer
                .map_err(|_| fail("the store's thread stopped".into()))?
                .map_err(fail),
            Err(_) => Err(fail(format!(
                "no answer within {} s (the database is unreachable, frozen or overloaded)",
                ANSWER_WITHIN.as_secs()
            ))),
        }
    }

    /// Whether the store answers a trivial query within `within`: what readiness reports.
    pub async fn ping(&self, within: Duration) -> Result<(), StoreError> {
        let asked = self.read(|db, _| db.query("SELECT CAST(1 AS BIGINT)", &[]).map(drop));
        match tokio::time::timeout(within, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(StoreError {
                url: self.url.to_string(),
                message: format!("no answer within {} ms", within.as_millis()),
            }),
        }
    }

    /// Run `f` on the store's thread, after every write queued before it.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Backend, &Owner) -> Result<T, String> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.ask(|tx| {
            Job::Read(Box::new(move |db, owner| {
                let _ = tx.send(f(db, owner));
            }))
        })
        .await
    }

    /// The newest runs, at most `limit`.
    pub async fn list(&self, limit: usize) -> Result<Vec<StoredRun>, StoreError> {
        self.read(move |db, _| sql::list(db, limit)).await
    }

    pub async fn get(&self, id: &str) -> Result<Option<StoredRun>, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::get(db, &id)).await
    }

    /// A run's events in order.
    pub async fn events(&self, id: &str) -> Result<Vec<StoredEvent>, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::events(db, &id)).await
    }

    /// A run's events numbered `from` and after, in order.
    pub async fn events_from(&self, id: &str, from: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::events_from(db, &id, from))
            .await
    }

    /// The sequence number a run's next event gets.
    pub(crate) async fn next_seq(&self, id: &str) -> Result<u64, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::next_seq(db, &id)).await
    }

    /// Record a decision on approval request `approval_id` of run `id`: true if it is the
    /// first one recorded (the first stands). With `handed`, the process running the run
    /// hands it to the flow itself; without, that process finds it within a second, and a
    /// resumed run reads it.
    pub async fn decide(
        &self,
        id: &str,
        approval_id: u64,
        decision: manus_actors::protocol::Decision,
        handed: bool,
    ) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::decide(db, &id, approval_id, &decision, handed))
            .await
    }

    /// The decisions recorded for run `id` outside its process, by request.
    pub async fn decisions(
        &self,
        id: &str,
    ) -> Result<Vec<(u64, manus_actors::protocol::Decision)>, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::decisions(db, &id, false)).await
    }

    /// As `decisions`, marked handed to the run (which a resume is about to go on with).
    pub(crate) async fn take_run_decisions(
        &self,
        id: &str,
    ) -> Result<Vec<(u64, manus_actors::protocol::Decision)>, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::decisions(db, &id, true)).await
    }

    /// The decisions recorded for runs this process runs and not yet handed to them.
    pub(crate) async fn undelivered(
        &self,
    ) -> Result<Vec<(String, u64, manus_actors::protocol::Decision)>, StoreError> {
        self.read(|db, me| sql::undelivered(db, &me.id)).await
    }

    /// Mark a decision handed to its run's flow.
    pub(crate) async fn delivered(&self, id: &str, approval_id: u64) -> Result<(), StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::delivered(db, &id, approval_id))
            .await
    }

    /// A run's agent memories, by step and attempt.
    pub async fn memories(&self, id: &str) -> Result<Vec<StoredMemory>, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| sql::memories(db, &id)).await
    }

    /// Runs that were running in a process that is gone, with that process's name.
    pub async fn interrupted(&self) -> Result<Vec<(String, Option<String>)>, StoreError> {
        self.read(|db, me| sql::interrupted(db, me, now_ms())).await
    }

    /// Take run `id` over from `from` (its owner as read): false if someone else did first.
    pub async fn claim(&self, id: &str, from: Option<String>) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.read(move |db, me| sql::claim(db, &id, from.as_deref(), &me.id))
            .await
    }

    /// Cluster: claim the oldest queued run, or one whose node's lease lapsed: its id and
    /// the fence this node's writes to it carry from now on.
    pub(crate) async fn claim_next(&self) -> Result<Option<(String, i64)>, StoreError> {
        self.ask(Job::Claim).await
    }

    /// Cluster: let go of run `id`, or of every run this node holds, at once: their leases
    /// lapse and other nodes take them over from their last completed step.
    pub(crate) async fn release(&self, id: Option<&str>) -> Result<(), StoreError> {
        let id = id.map(String::from);
        self.ask(|done| Job::Release(id, done)).await
    }

    /// Cluster: queue a run for whichever node has room first, and tell the nodes: the
    /// run is committed when this returns. With `continues`, the run is the next turn of
    /// that run's thread, linked in the same transaction (or refused, and not queued).
    pub(crate) async fn enqueue(
        &self,
        run: StoredRun,
        continues: Option<String>,
        user: Option<String>,
    ) -> Result<Result<Option<TurnOf>, Refused>, StoreError> {
        self.read(move |db, _| {
            let now = now_ms();
            let mut stmts = vec![run.insert(now), super::cluster::announce(&run.id)];
            let mut turn = None;
            if let Some(continues) = continues {
                match threads::next_turn(db, &run.id, &continues, user.as_deref())? {
                    Ok((place, link)) => {
                        stmts.push(link);
                        turn = Some(place);
                    }
                    Err(refused) => return Ok(Err(refused)),
                }
            } else if let Some(user) = &user {
                stmts.push(threads::own(&run.id, user));
            }
            db.transaction(&stmts).map(|()| Ok(turn))
        })
        .await
    }

    /// Where run `id` stands in its conversation.
    pub async fn turn_of(&self, id: &str) -> Result<TurnOf, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| threads::turn_of(db, &id)).await
    }

    /// The runs of thread `thread`, turn by turn.
    pub async fn turns(&self, thread: &str) -> Result<Vec<(u32, StoredRun)>, StoreError> {
        let thread = thread.to_string();
        self.read(move |db, _| threads::turns(db, &thread)).await
    }

    /// Make run `run` (not started yet, for `user`) the next turn of the thread run
    /// `continues` belongs to, committed when this returns; refused while that thread's
    /// last turn has not ended.
    pub(crate) async fn link_turn(
        &self,
        run: &str,
        continues: &str,
        user: Option<String>,
    ) -> Result<Result<TurnOf, Refused>, StoreError> {
        let (run, continues) = (run.to_string(), continues.to_string());
        self.read(
            move |db, _| match threads::next_turn(db, &run, &continues, user.as_deref())? {
                Ok((place, link)) => db.transaction(&[link]).map(|()| Ok(place)),
                Err(refused) => Ok(Err(refused)),
            },
        )
        .await
    }

    /// Cluster: record an answer or a cancel for run `id`, which another node runs: true
    /// if it is the first such one. That node hands it to the flow within a second.
    pub async fn send(
        &self,
        id: &str,
        command: super::cluster::Command,
    ) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.read(move |db, _| super::cluster::send(db, &id, &command))
            .await
    }

    /// Cluster: the commands recorded for runs this node runs and not yet handed to them.
    pub(crate) async fn undelivered_commands(
        &self,
    ) -> Result<Vec<(String, super::cluster::Command)>, StoreError> {
        self.read(|db, me| super::cluster::undelivered(db, &me.id))
            .await
    }

    /// Cluster: mark a command handed to its run's flow.
    pub(crate) async fn command_delivered(
        &self,
        id: &str,
        command: super::cluster::Command,
    ) -> Result<(), StoreError> {
        let id = id.to_string();
        self.read(move |db, _| super::cluster::delivered(db, &id, &command))
            .await
    }

    /// Apply `retention` in the background from now on: every ten minutes, on the store's
    /// thread and a chunk at a time between batches of writes, ended runs past it are
    /// pruned (never a running or resumable one).
    pub fn keep(&self, retention: Retention) {
        let _ = self.jobs.send(Job::Retain(retention));
    }

    /// Prune now the ended runs past `retention`, a chunk per transaction (other writes go
    /// between them); the ids of the runs pruned. Runs still `running`, here or in another
    /// process, or interrupted and resumable, are never touched.
    pub async fn prune(&self, retention: Retention) -> Result<Vec<String>, StoreError> {
        let mut pruned = vec![];
        loop {
            let ids = self.ask(|done| Job::Prune(retention, done)).await?;
            let full = ids.len() == prune::CHUNK;
            pruned.extend(ids);
            if !full {
                return Ok(pruned);
            }
        }
    }

    /// Write what is queued and stop; this process's running flows count as interrupted
    /// from now on.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.jobs.send(Job::Close(tx)).is_ok() {
            self.hurry.wake();
            let _ = rx.await;
        }
    }
}

/// Writes do not wake the store thread while it gathers a batch (that would cost a wake-up
/// per event); a read or a close does, through this.
struct Hurry {
    flag: AtomicBool,
    thread: std::sync::OnceLock<std::thread::Thread>,
}

impl Hurry {
    fn wake(&self) {
        self.flag.store(true, Ordering::Release);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Wait out `gather`, unless someone hurries us.
    fn gather(&self, gather: Duration) {
        let until = Instant::now() + gather;
        while !self.flag.swap(false, Ordering::AcqRel) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// The store thread's loop: until closed, or until every handle is gone.
fn serve(
    mut db: Box<dyn Backend>,
    owner: &Owner,
    node: Option<Node>,
    jobs: &Receiver<Job>,
    hurry: &Hurry,
) {
    let heartbeat = node.as_ref().map_or(HEARTBEAT, |n| n.lease / 3);
    // Cluster: the runs this node claimed, with the fence of the claim (-1 once lost).
    let mut fences: HashMap<String, i64> = HashMap::new();
    let mut backlog = Backlog::default();
    let mut beat = Instant::now();
    let mut next = None;
    let mut folds = Folds::default();
    let mut retention = Retention::default();
    // When the retention is next applied, if any is set.
    let mut prune_at: Option<Instant> = None;
    loop {
        let job = match next.take() {
            Some(job) => Ok(job),
            None => {
                let mut wait = heartbeat.saturating_sub(beat.elapsed());
                if let Some(at) = prune_at {
                    wait = wait.min(at.saturating_duration_since(Instant::now()));
                }
                if !backlog.is_empty() {
                    wait = wait.min(RETRY);
                }
                jobs.recv_timeout(wait)
            }
        };
        match job {
            Ok(Job::Write(first, committed)) => {
                // Gather what comes within GATHER: one commit for many writes, and one row
                // for each run's state however often it changed in that time. The thread
                // parks through it rather than waiting on the channel, so writers never
                // wake it (a durable write does: someone waits for its commit).
                hurry.gather(GATHER);
                let mut batch = vec![(*first, committed)];
                loop {
                    while batch.len() < BATCH && next.is_none() {
                        match jobs.try_recv() {
                            Ok(Job::Write(w, committed)) => batch.push((*w, committed)),
                            Ok(other) => next = Some(other),
                            Err(_) => break,
                        }
                    }
                    let full = batch.len() == BATCH;
                    let batch = std::mem::take(&mut batch);
                    apply(
                        db.as_mut(),
                        &mut folds,
                        batch,
                        &mut backlog,
                        node.as_ref().map(|n| (n, owner, &mut fences)),
                    );
                    if !full || next.is_some() {
                        break;
                    }
                }
            }
            Ok(Job::Read(f)) => f(db.as_mut(), owner),
            Ok(Job::Claim(done)) => {
                let claimed = claim(db.as_mut(), owner, node.as_ref());
                if let Ok(Some((id, fence))) = &claimed {
                    fences.insert(id.clone(), *fence);
                }
                let _ = done.send(claimed);
            }
            Ok(Job::Release(id, done)) => {
                let stmt = super::cluster::release(&owner.id, id.as_deref());
                let released = db.transaction(&[stmt]);
                if released.is_ok() {
                    // What this node let go of, it writes no more: the node taking it over
                    // goes on from what is stored now.
                    for (run, fence) in fences.iter_mut() {
                        if id.as_ref().is_none_or(|i| i == run) {
                            *fence = -1;
                        }
                    }
                }
                let _ = done.send(released);
            }
            Ok(Job::Lapsed) => {
                // The flows are being stopped: what they write from now on is not written.
                // What they wrote before waits in the backlog with the fences it was made
                // under, and lands if no other node has taken the run meanwhile.
                for fence in fences.values_mut() {
                    *fence = -1;
                }
            }
            Ok(Job::Retain(r)) => {
                retention = r;
                prune_at = r.bounded().then(Instant::now);
            }
            Ok(Job::Prune(r, done)) => {
                let _ = done.send(prune::chunk(db.as_mut(), &r, now_ms(), |id| {
                    folds.is_open(id)
                }));
            }
            Ok(Job::Close(done)) => {
                backlog.flush(db.as_mut(), node.as_ref().map(|n| (n, owner, &mut fences)));
                retire(db.as_mut(), owner);
                // Closed before the answer, so SQLite has folded its log into the file.
                drop(db);
                let _ = done.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                backlog.flush(db.as_mut(), node.as_ref().map(|n| (n, owner, &mut fences)));
            }
            Err(RecvTimeoutError::Disconnected) => {
                backlog.flush(db.as_mut(), node.as_ref().map(|n| (n, owner, &mut fences)));
                retire(db.as_mut(), owner);
                return;
            }
        }
        if prune_at.is_some_and(|at| at <= Instant::now()) {
            // One chunk, then the queued writes; the next chunk at once if this one was full.
            let pruned = prune::chunk(db.as_mut(), &retention, now_ms(), |id| folds.is_open(id));
            let again = match pruned {
                Ok(ids) => {
                    if !ids.is_empty() {
                        tracing::info!(
                            runs = ids.len(),
                            "run store: pruned ended runs past the retention"
                        );
                    }
                    if ids.len() == prune::CHUNK {
                        Duration::ZERO
                    } else {
                        PRUNE_EVERY
                    }
                }
                Err(e) => {
                    tracing::warn!("run store: cannot prune ended runs: {e}");
                    PRUNE_EVERY
                }
            };
            prune_at = Some(Instant::now() + again);
        }
        if beat.elapsed() >= heartbeat {
            beat = Instant::now();
            let now = now_ms();
            let mut stmts = vec![sql::heartbeat(owner, now)];
            if let Some(n) = &node {
                // Only the runs still held: a lost one is not renewed, nor one whose end is
                // committed (its fence is forgotten then).
                let until = now + n.lease.as_millis() as i64;
                stmts.extend(
                    fences
                        .iter()
                        .filter(|(_, f)| **f >= 0)
                        .map(|(run, _)| super::cluster::renew(&owner.id, run, until)),
                );
            }
            match db.transaction(&stmts) {
                Ok(()) => {
                    if let Some(n) = &node {
                        n.clock.renewed(beat);
                    }
                }
                Err(e) => {
                    tracing::warn!("run store: cannot refresh this process's heartbeat: {e}")
                }
            }
        }
    }
}

fn retire(db: &mut dyn Backend, owner: &Owner) {
    if let Err(e) = db.transaction(&[sql::retire(owner)]) {
        tracing::warn!("run store: cannot retire this process: {e}");
    }
}

/// Claim the oldest claimable run for this node, its lease running one lease from now.
fn claim(
    db: &mut dyn Backend,
    owner: &Owner,
    node: Option<&Node>,
) -> Result<Option<(String, i64)>, String> {
    let node = node.ok_or("only a cluster node claims runs")?;
    // A node whose leases lapsed takes nothing on until a heartbeat renews them: the flow
    // would start licensed in an epoch already ended (see `LeaseClock`).
    if !node.clock.holds() {
        return Err("this node's leases lapsed; it claims runs again once they are renewed".into());
    }
    let now = now_ms();
    let until = now + node.lease.as_millis() as i64;
    let rows = db.query(
        super::cluster::CLAIM,
        &[
            super::Val::Text(owner.id.clone()),
            super::Val::Int(now),
            super::Val::Int(until),
            super::Val::Int(now - sql::STALE_MS),
        ],
    )?;
    Ok(rows
        .first()
        .map(|r| (r[0].text().unwrap_or_default().to_string(), r[1].int())))
}

/// How often writes a failed transaction left behind are tried again.
const RETRY: Duration = Duration::from_secs(1);
/// The most statements kept for a store that does not answer; past it the oldest are
/// dropped (and said to be), so an outage costs bounded memory.
const BACKLOG_MAX: usize = 200_000;

/// Writes whose transaction failed (the database down or unreachable), in order, each
/// batch with the fences its runs had when it was made: tried again every `RETRY` and
/// before any new batch, so that once the store is back every run's record catches up,
/// its end included, exactly as it happened.
#[derive(Default)]
struct Backlog {
    batches: std::collections::VecDeque<Batch>,
    stmts: usize,
}

/// One batch's statements, ready to commit.
struct Batch {
    stmts: Vec<super::Stmt>,
    /// Cluster: the fences of the batch's runs as they were when it was made.
    fences: HashMap<String, i64>,
    /// The runs whose taps closed in this batch: held no more once it commits.
    closed: Vec<String>,
}

impl Backlog {
    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    fn push(&mut self, batch: Batch) {
        self.stmts += batch.stmts.len();
        self.batches.push_back(batch);
        let mut dropped = 0;
        while self.stmts > BACKLOG_MAX
            && let Some(old) = self.batches.pop_front()
        {
            self.stmts -= old.stmts.len();
            dropped += old.stmts.len();
        }
        if dropped > 0 {
            tracing::error!(
                "run store: the store has not answered for too long; {dropped} write(s) dropped"
            );
        }
    }

    /// Commit what waits, oldest first, until one fails: true when nothing is left.
    fn flush(
        &mut self,
        db: &mut dyn Backend,
        mut node: Option<(&Node, &Owner, &mut HashMap<String, i64>)>,
    ) -> bool {
        while let Some(batch) = self.batches.front() {
            let node = node.as_mut().map(|(n, o, f)| (*n, *o, &mut **f));
            if let Err(e) = commit(db, batch, node) {
                tracing::debug!("run store: the writes left behind wait on: {e}");
                return false;
            }
            tracing::info!(
                "run store: {} write(s) left behind by a failed transaction are committed",
                batch.stmts.len()
            );
            self.stmts -= batch.stmts.len();
            self.batches.pop_front();
        }
        true
    }
}

/// Commit `batch` in one transaction. On a cluster node the writes are fenced: a run
/// another node has taken over is written no more, and reported lost once; a run whose
/// tap closed in it is held no more.
fn commit(
    db: &mut dyn Backend,
    batch: &Batch,
    node: Option<(&Node, &Owner, &mut HashMap<String, i64>)>,
) -> Result<(), String> {
    let Some((node, owner, fences)) = node else {
        return db.transaction(&batch.stmts);
    };
    let lost = db.fenced(&owner.id, &batch.fences, &batch.stmts)?;
    for run in lost {
        if fences.insert(run.clone(), -1) != Some(-1) {
            tracing::warn!(run = %run, "run store: another node has taken this run over; it is stopped here and written no more");
            let _ = node.lost.send(run);
        }
    }
    for run in &batch.closed {
        fences.remove(run);
    }
    Ok(())
}

/// Write a batch in one transaction: its events, memories, and the newest state of each run
/// they changed, after whatever earlier batches left behind. Those who wait for a write
/// hear whether it committed. When the store fails, the flows go on: what they wrote waits
/// in the backlog and is tried again, except the writes someone waits for, which are told
/// the failure and forgotten (a flow not acknowledged, a decision not yet acted on: their
/// callers act on the failure).
fn apply(
    db: &mut dyn Backend,
    folds: &mut Folds,
    batch: Vec<(Write, Option<Committed>)>,
    backlog: &mut Backlog,
    mut node: Option<(&Node, &Owner, &mut HashMap<String, i64>)>,
) {
    let mut stmts = Vec::with_capacity(batch.len() + 1);
    let mut closed = vec![];
    let mut waiting = vec![];
    // Statements of writes someone waits for, by index, and the runs they opened.
    let mut awaited = std::collections::HashSet::new();
    let mut opened = vec![];
    for (w, committed) in batch {
        // A write whose waiter gave up (it was told the store did not answer) is not
        // written late: its caller acted on the failure.
        if committed.as_ref().is_some_and(|c| c.is_closed()) {
            continue;
        }
        match &w {
            // Only the current tap's end lets the run go: a stopped flow's tap may close
            // after the run was taken up again here.
            Write::Closed(id, tap) if folds.is_current(id, *tap) => closed.push(id.to_string()),
            Write::Open { row, .. } if committed.is_some() => opened.push(row.id.clone()),
            _ => {}
        }
        let from = stmts.len();
        folds.fold(w, &mut stmts);
        if let Some(c) = committed {
            awaited.extend(from..stmts.len());
            waiting.push(c);
        }
    }
    folds.snapshots(now_ms(), &mut stmts);
    let run_of = |s: &super::Stmt| s.params.first().and_then(|p| p.text()).map(String::from);
    if node.is_some() {
        // Nodes that stream these runs hear of the new events when they commit.
        let mut runs: Vec<String> = stmts.iter().filter_map(run_of).collect();
        runs.sort();
        runs.dedup();
        stmts.extend(runs.iter().map(|r| super::cluster::written(r)));
    }
    let fences = node
        .as_ref()
        .map(|(_, _, f)| (**f).clone())
        .unwrap_or_default();
    let mut batch = Batch {
        stmts,
        fences,
        closed,
    };
    let caught_up = backlog.flush(db, node.as_mut().map(|(n, o, f)| (*n, *o, &mut **f)));
    let done = if caught_up {
        commit(db, &batch, node)
    } else {
        Err("the store has not taken earlier writes yet".to_string())
    };
    if let Err(e) = &done {
        // Keep what no one waits for; forget the runs whose opening failed.
        let all = std::mem::take(&mut batch.stmts);
        batch.stmts = all
            .into_iter()
            .enumerate()
            .filter(|(i, s)| !awaited.contains(i) && run_of(s).is_none_or(|r| !opened.contains(&r)))
            .map(|(_, s)| s)
            .collect();
        for run in &opened {
            folds.forget(run);
        }
        tracing::error!(
            "run store: a transaction failed ({e}); {} write(s) are kept and tried again",
            batch.stmts.len()
        );
        if !batch.stmts.is_empty() {
            backlog.push(batch);
        }
    }
    for w in waiting {
        let _ = w.send(done.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RunStatus;
    use manus_actors::llm::{Message, Usage};
    use manus_actors::plan::{Plan, StepStatus};
    use manus_actors::protocol::{FlowMode, FlowOutcome, FlowStatus};

    fn row(id: &str, owner: &str) -> StoredRun {
        StoredRun {
            id: id.into(),
            task: "count".into(),
            mode: FlowMode::Plan,
            status: RunStatus::Running,
            plan: Some(Plan::new("p", "Count", vec!["a".into(), "b".into()])),
            usage: Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
                calls: 1,
                ..Default::default()
            },
            usage_by_agent: Default::default(),
            outcome: None,
            owner: Some(owner.into()),
            created_at: 1,
            updated_at: 1,
            elapsed_ms: 7,
        }
    }

    #[tokio::test]
    async fn writes_are_read_back_in_order_and_runs_are_claimed_once() {
        let store = RunStore::open(&StoreUrl::Sqlite(":memory:".into()))
            .await
            .unwrap();
        let me = store.owner().to_string();
        store.write(Write::Open {
            row: Box::new(row("r1", &me)),
            tap: 1,
            user: None,
        });
        store.write(Write::Open {
            row: Box::new(row("r2", "gone:1:1")),
            tap: 1,
            user: None,
        });
        let r1: Arc<str> = "r1".into();
        let event = |seq: u64, ran_ms: u64, event: FlowEvent| Write::Event {
            run_id: r1.clone(),
            tap: 1,
            seq,
            at: 5,
            ran_ms,
            event,
        };
        store.write(event(
            0,
            1,
            FlowEvent::FlowStarted {
                flow_id: "r1".into(),
                task: "count".into(),
            },
        ));
        store.write(event(
            1,
            2,
            FlowEvent::StepStarted {
                step: 1,
                agent: "manus".into(),
                attempt: 2,
                queued_ms: 0,
            },
        ));
        // A memory takes no number: the next event is 2.
        store.write(event(
            2,
            3,
            FlowEvent::StepMemory {
                step: 1,
                agent: "manus".into(),
                messages: vec![Message::user("hi")],
            },
        ));
        let mut plan = Plan::new("p", "Count", vec!["a".into(), "b".into()]);
        plan.steps[1].status = StepStatus::Completed;
        let outcome = FlowOutcome {
            flow_id: "r1".into(),
            status: FlowStatus::Completed,
            reason: "done".into(),
            plan,
            summary: String::new(),
            usage: row("r1", &me).usage,
            usage_by_agent: Default::default(),
            elapsed_ms: 40,
        };
        store.write(event(2, 40, FlowEvent::FlowFinished { outcome }));
        store.write(Write::Closed(r1.clone(), 1));

        let r1 = store.get("r1").await.unwrap().unwrap();
        // Its elapsed time goes on from the 7 ms it had when opened.
        assert_eq!((r1.status, r1.elapsed_ms), (RunStatus::Completed, 47));
        assert_eq!(r1.outcome.as_ref().map(|o| o.reason.as_str()), Some("done"));
        assert_eq!(r1.progress(), (1, 2));
        assert_eq!(r1.usage.total(), 15);
        assert_eq!(store.list(10).await.unwrap().len(), 2);
        let events = store.events("r1").await.unwrap();
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(store.next_seq("r1").await.unwrap(), 3);
        assert_eq!(store.next_seq("r2").await.unwrap(), 0);
        let memories = store.memories("r1").await.unwrap();
        assert_eq!((memories[0].step, memories[0].attempt), (1, 2));
        assert_eq!(memories[0].messages[0].text(), "hi");
        assert!(store.get("nope").await.unwrap().is_none());

        // r2's owner never beat: it is interrupted, and only one claim takes it.
        let interrupted = store.interrupted().await.unwrap();
        assert_eq!(
            interrupted,
            [("r2".to_string(), Some("gone:1:1".to_string()))]
        );
        assert!(store.claim("r2", Some("gone:1:1".into())).await.unwrap());
        assert!(!store.claim("r2", Some("gone:1:1".into())).await.unwrap());
        assert!(
            store.interrupted().await.unwrap().is_empty(),
            "now it is mine"
        );
        store.close().await;
    }

    /// A row of `status` written as of `at`, with one event.
    async fn put(store: &RunStore, id: &str, owner: &str, status: &str, at: i64) {
        let mut run = row(id, owner);
        run.status = RunStatus::parse(status).expect("a status");
        run.created_at = at;
        let event = sql::insert_event(
            id,
            0,
            at,
            &FlowEvent::FlowStarted {
                flow_id: id.into(),
                task: "count".into(),
            },
        );
        store
            .read(move |db, _| db.transaction(&[run.upsert(at), event]))
            .await
            .unwrap();
    }

    /// A new run whose id is already stored is refused, not merged into the stored one: the
    /// first task stays, and the second submitter hears of the failure (on SQLite, and on
    /// PostgreSQL when the test run has one).
    #[tokio::test]
    async fn a_new_run_with_a_stored_id_is_refused_not_merged() {
        let mut urls = vec![StoreUrl::Sqlite(":memory:".into())];
        if let Ok(url) = std::env::var("MANUS_TEST_POSTGRES_URL") {
            urls.push(StoreUrl::parse(&url).unwrap());
        }
        for url in urls {
            let store = RunStore::open(&url).await.unwrap();
            let me = store.owner().to_string();
            let id = format!("one-id-{}", now_ms());
            let mut first = row(&id, &me);
            first.task = "the first task".into();
            let mut second = row(&id, &me);
            second.task = "the second task".into();
            let insert =
                |run: StoredRun| store.read(move |db, _| db.transaction(&[run.insert(now_ms())]));
            insert(first).await.unwrap();
            assert!(
                insert(second).await.is_err(),
                "{url:?}: the second insert merged"
            );
            let kept = store.get(&id).await.unwrap().unwrap();
            assert_eq!(kept.task, "the first task", "{url:?}");
            store.close().await;
        }
    }

    #[tokio::test]
    async fn prune_forgets_only_ended_runs_past_the_retention() {
        let store = RunStore::open(&StoreUrl::Sqlite(":memory:".into()))
            .await
            .unwrap();
        let me = store.owner().to_string();
        let now = now_ms();
        let days_ago = |d: i64| now - d * 86_400_000;
        put(&store, "old-done", &me, "completed", days_ago(40)).await;
        put(&store, "old-failed", &me, "failed", days_ago(31)).await;
        // Still running here, and interrupted (its owner is gone): resumable.
        put(&store, "old-running", &me, "running", days_ago(400)).await;
        put(
            &store,
            "old-resumable",
            "gone:1:1",
            "running",
            days_ago(400),
        )
        .await;
        put(&store, "new-done", &me, "completed", days_ago(2)).await;
        put(&store, "newer-done", &me, "cancelled", days_ago(1)).await;

        let by_days = Retention {
            keep_days: Some(30),
            keep_runs: None,
        };
        let mut pruned = store.prune(by_days).await.unwrap();
        pruned.sort();
        assert_eq!(pruned, ["old-done", "old-failed"]);
        assert!(store.events("old-done").await.unwrap().is_empty());
        assert_eq!(store.events("new-done").await.unwrap().len(), 1);

        // The newest ended run is kept; running ones neither count nor go.
        let by_count = Retention {
            keep_days: None,
            keep_runs: Some(1),
        };
        assert_eq!(store.prune(by_count).await.unwrap(), ["new-done"]);
        let mut left: Vec<String> = store
            .list(100)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        left.sort();
        assert_eq!(left, ["newer-done", "old-resumable", "old-running"]);
        assert_eq!(
            store.interrupted().await.unwrap().len(),
            1,
            "the resumable run is still there to resume"
        );
        assert!(store.prune(by_count).await.unwrap().is_empty());
        store.close().await;
    }

    #[tokio::test]
    async fn retention_is_applied_in_chunks_in_the_background() {
        let store = RunStore::open(&StoreUrl::Sqlite(":memory:".into()))
            .await
            .unwrap();
        let me = store.owner().to_string();
        let total = 2 * prune::CHUNK + 50;
        for n in 0..total {
            put(&store, &format!("r{n:04}"), &me, "completed", n as i64 + 1).await;
        }
        put(&store, "running", &me, "running", 0).await;
        store.keep(Retention {
            keep_days: None,
            keep_runs: Some(10),
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let left = loop {
            let left = store.list(1_000).await.unwrap();
            if left.len() <= 11 || Instant::now() > deadline {
                break left;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let mut ids: Vec<String> = left.into_iter().map(|r| r.id).collect();
        ids.sort();
        let mut expected: Vec<String> = (total - 10..total).map(|n| format!("r{n:04}")).collect();
        expected.push("running".into());
        assert_eq!(
            ids, expected,
            "the newest ten ended runs and the running one"
        );
        store.close().await;
    }

    /// A SQLite database that can be made to fail every statement, as a store that went
    /// away does.
    struct Flaky {
        db: crate::store::sqlite::Sqlite,
        down: bool,
    }

    impl Backend for Flaky {
        fn transaction(&mut self, stmts: &[crate::store::Stmt]) -> Result<(), String> {
            match self.down {
                true => Err("connection refused".into()),
                false => self.db.transaction(stmts),
            }
        }
        fn execute(&mut self, sql: &str, params: &[crate::store::Val]) -> Result<u64, String> {
            self.db.execute(sql, params)
        }
        fn query(
            &mut self,
            sql: &str,
            params: &[crate::store::Val],
        ) -> Result<Vec<Vec<crate::store::Val>>, String> {
            self.db.query(sql, params)
        }
    }

    #[tokio::test]
    async fn a_run_that_ends_while_the_store_is_down_is_written_once_it_is_back() {
        let mut db = Flaky {
            db: crate::store::sqlite::Sqlite::open(std::path::Path::new(":memory:")).unwrap(),
            down: false,
        };
        let schema: Vec<_> = sql::SCHEMA
            .iter()
            .map(|s| crate::store::Stmt {
                sql: s,
                params: vec![],
            })
            .collect();
        db.transaction(&schema).unwrap();
        let (mut folds, mut backlog) = (Folds::default(), Backlog::default());
        let open = |id: &str| Write::Open {
            row: Box::new(row(id, "me:1:1")),
            tap: 1,
            user: None,
        };
        apply(
            &mut db,
            &mut folds,
            vec![(open("r1"), None)],
            &mut backlog,
            None,
        );
        // The store goes away; the flow finishes meanwhile, and a submission waits on it.
        db.down = true;
        let mut plan = Plan::new("p", "Count", vec!["a".into(), "b".into()]);
        plan.steps[0].status = StepStatus::Completed;
        plan.steps[1].status = StepStatus::Completed;
        let finished = FlowEvent::FlowFinished {
            outcome: FlowOutcome {
                flow_id: "r1".into(),
                status: FlowStatus::Completed,
                reason: "done".into(),
                plan,
                summary: "2".into(),
                usage: Usage::default(),
                usage_by_agent: Default::default(),
                elapsed_ms: 9,
            },
        };
        let (told, heard) = oneshot::channel();
        let batch = vec![
            (
                Write::Event {
                    run_id: "r1".into(),
                    tap: 1,
                    seq: 0,
                    at: 5,
                    ran_ms: 9,
                    event: finished,
                },
                None,
            ),
            (Write::Closed("r1".into(), 1), None),
            (open("r2"), Some(told)),
        ];
        apply(&mut db, &mut folds, batch, &mut backlog, None);
        assert!(
            heard.await.unwrap().is_err(),
            "whoever waits hears it failed"
        );
        assert!(!backlog.is_empty());
        // Tried again while still down: kept.
        assert!(!backlog.flush(&mut db, None));
        db.down = false;
        assert!(backlog.flush(&mut db, None));
        let r1 = sql::get(&mut db, "r1").unwrap().unwrap();
        assert_eq!(r1.status, RunStatus::Completed, "the end is written");
        assert_eq!(sql::events(&mut db, "r1").unwrap().len(), 1);
        assert!(
            sql::get(&mut db, "r2").unwrap().is_none(),
            "a submission told it failed is not written later"
        );
        assert!(!folds.is_open("r2"));
    }

    /// Issue 37, item 7: a row this version cannot read (a run of an unknown mode, an
    /// event of an unknown kind) is skipped and reported; it never hides the others.
    #[tokio::test]
    async fn a_row_that_cannot_be_read_hides_nothing_else() {
        let store = RunStore::open(&StoreUrl::Sqlite(":memory:".into()))
            .await
            .unwrap();
        let me = store.owner().to_string();
        for id in ["r1", "r2"] {
            store.write(Write::Open {
                row: Box::new(row(id, &me)),
                tap: 1,
                user: None,
            });
        }
        for seq in 0..3 {
            store.write(Write::Event {
                run_id: "r1".into(),
                tap: 1,
                seq,
                at: 5,
                ran_ms: 1,
                event: FlowEvent::FlowStarted {
                    flow_id: "r1".into(),
                    task: "count".into(),
                },
            });
        }
        store
            .read(|db, _| {
                db.execute("UPDATE manus_runs SET mode = 'dream' WHERE id = 'r2'", &[])?;
                db.execute(
                    "UPDATE manus_events SET event = '{\"event\":\"from_the_future\"}' WHERE seq = 1",
                    &[],
                )
            })
            .await
            .unwrap();
        let listed: Vec<String> = store
            .list(10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(listed, ["r1"]);
        let seqs: Vec<u64> = store
            .events("r1")
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [0, 2]);
    }
}
