//! The producers: one per lane, owning the lane's capacity ([`LaneCapacity`]) and running its
//! claim loops, which claim up to the free capacity, start a task per job (the executor runs
//! it, the completer receives its outcome), claim again at once while claims come back full,
//! and otherwise wait for a notification or the poll interval.
//!
//! A claim that leases fewer jobs than it asked for took every due job that no other claim had
//! locked (`SKIP LOCKED` passes over those, and their claim leases them), so claiming again at
//! once would find nothing: on an idle worker that was one more statement for every job
//! picked up. A notification sent meanwhile is not lost: it leaves a wake-up for the loop's
//! next wait. The loop for gated jobs claims again after any find, since limits, not the
//! backlog, cut its claims short.
//!
//! Each lane runs `claim_parallelism` loops for ordinary jobs and one for gated jobs (under a
//! global limit or holding a resource key), which notifications of such jobs wake (they have
//! their own channel) and which is also woken when the outcome of one of its jobs is written
//! (that frees the job's global slot).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Backoff;
use super::WorkerConfig;
use super::capacity::{LaneCapacity, Start};
use super::config::Lane;
use super::executor::{Executor, job_span};
use super::outcome::{ExpectedOutcomes, Finished, OutcomeHold, OutcomeToCome};
use crate::postgres::jobs::{ClaimConnection, ClaimRequest, ClaimedJob};
use crate::runtime::metrics::WorkerMetrics;
use crate::runtime::tasks::TaskSpawner;

/// How this worker claims, whatever the lane: its lease, its job types, its pool.
pub(super) struct Claims {
    pub(super) pool: PgPool,
    pub(super) worker_id: String,
    pub(super) lease_ttl: Duration,
    pub(super) job_types: Vec<String>,
    pub(super) unflushed: bool,
    pub(super) poll_interval: Duration,
    pub(super) metrics: Arc<WorkerMetrics>,
}

impl Claims {
    /// A claim of up to `limit` jobs from `queues` (every queue when `None`).
    pub(super) fn request<'a>(
        &'a self,
        limit: i64,
        queues: Option<&'a [String]>,
    ) -> ClaimRequest<'a> {
        let mut request =
            ClaimRequest::new(&self.worker_id, limit, self.lease_ttl).job_types(&self.job_types);
        if self.unflushed {
            request = request.unflushed_commit();
        }
        match queues {
            Some(queues) => request.queues(queues),
            None => request,
        }
    }
}

/// Where claimed jobs go: a task each, in which the executor runs the handler, and then the
/// completer's channel.
pub(super) struct Launcher {
    pub(super) executor: Arc<Executor>,
    pub(super) jobs: JobTasks,
    pub(super) finished: mpsc::UnboundedSender<Finished>,
    pub(super) expected: Arc<ExpectedOutcomes>,
    pub(super) hard_stop: CancellationToken,
}

/// One lane's producer.
pub(super) struct Producer {
    queues: Option<Vec<String>>,
    capacity: Arc<LaneCapacity>,
    claims: Arc<Claims>,
    launcher: Arc<Launcher>,
    /// Notified by the listener, and by a sibling loop whose claim came back full.
    plain_wake: Arc<Notify>,
    /// Notified by the listener for gated jobs.
    gated_wake: Arc<Notify>,
    /// Notified when the outcome of a gated job of this lane is written.
    freed: Arc<Notify>,
}

/// What one claim did.
pub(super) struct Claim {
    /// Rows the statement leased (a job whose payload does not decode included).
    pub(super) leased: usize,
    /// Whether it leased every job it asked for: more may be due.
    pub(super) full: bool,
}

impl Producer {
    /// The producer of `lane`, with the lane's capacity under `config` and its share of the
    /// worker's room for `unpersisted` outcomes.
    pub(super) fn new(
        lane: Lane,
        config: &WorkerConfig,
        unpersisted: Arc<Semaphore>,
        claims: Arc<Claims>,
        launcher: Arc<Launcher>,
    ) -> Self {
        Self {
            capacity: Arc::new(LaneCapacity::new(lane.concurrency, config, unpersisted)),
            queues: lane.queues,
            claims,
            launcher,
            plain_wake: Arc::new(Notify::new()),
            gated_wake: Arc::new(Notify::new()),
            freed: Arc::new(Notify::new()),
        }
    }

    /// What the listener notifies: one of the lane's plain loops, and its gated loop.
    pub(super) fn wakers(&self) -> (Arc<Notify>, Arc<Notify>) {
        (Arc::clone(&self.plain_wake), Arc::clone(&self.gated_wake))
    }

    /// Starts the lane's `parallelism` plain claim loops and its gated one in `tasks`; each
    /// ends when `shutdown` fires.
    pub(super) fn start(
        self: Arc<Self>,
        tasks: &TaskSpawner,
        parallelism: u32,
        shutdown: &CancellationToken,
    ) -> Vec<JoinHandle<Option<()>>> {
        (0..=parallelism)
            .map(|index| {
                let producer = Arc::clone(&self);
                let gated = index == 0;
                tasks.spawn(
                    producer
                        .claim_loop(gated, shutdown.clone())
                        .in_current_span(),
                )
            })
            .collect()
    }

    async fn claim_loop(self: Arc<Self>, gated: bool, shutdown: CancellationToken) {
        let mut backoff = Backoff::default();
        let mut conn = ClaimConnection::default();
        let wake = if gated {
            &self.gated_wake
        } else {
            &self.plain_wake
        };
        // Whether the last wait ended with the poll interval, no wake-up having come.
        let mut idle = false;
        while !shutdown.is_cancelled() {
            // A loop that may wait long for a slot lends its connection back to the pool.
            if !self.capacity.has_free_slot() {
                conn.release();
            }
            let claim = match self.run_once(&mut conn, gated, &shutdown).await {
                Ok(Some(claim)) => {
                    backoff.reset();
                    claim
                }
                // Shut down while waiting for room.
                Ok(None) => break,
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "claim failed; backing off");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = shutdown.cancelled() => break,
                    }
                    continue;
                }
            };
            if claim.leased > 0 {
                idle = false;
                if claim.full || gated {
                    continue;
                }
            }
            // A loop that is woken keeps its connection while it waits, so that the claim of the
            // next wake-up costs one round trip. An idle one (a whole poll interval without a
            // wake-up) holds a connection only for its poll claims: kept through its waits too,
            // each of a worker's idle loops would hold one at all times.
            if idle {
                conn.release();
            }
            idle = tokio::select! {
                () = wake.notified() => false,
                () = tokio::time::sleep(self.claims.poll_interval) => true,
                () = self.freed.notified(), if gated => false,
                () = shutdown.cancelled() => break,
            };
        }
    }

    /// One claim: reserves room in the lane's capacity (concurrent claim loops never overshoot
    /// its limits), claims that many jobs on `conn` and starts them. `Ok(None)` when `shutdown`
    /// fired while it waited for room (a claim once sent is seen through: its jobs are leased);
    /// an error when the claim failed, the room given back.
    pub(super) async fn run_once(
        &self,
        conn: &mut ClaimConnection,
        gated: bool,
        shutdown: &CancellationToken,
    ) -> Result<Option<Claim>, crate::postgres::Error> {
        let reserved = tokio::select! {
            reserved = self.capacity.reserve(gated) => reserved,
            () = shutdown.cancelled() => return Ok(None),
        };
        let Ok(mut reserved) = reserved else {
            return Ok(None);
        };
        let want = reserved.jobs();
        let claims = &self.claims;
        let request = claims.request(want as i64, self.queues.as_deref());
        // Outcomes may come of this claim: the completer keeps gathering a batch meanwhile.
        let claiming = self.launcher.expected.expect();
        let claimed = conn.claim(&claims.pool, &request, gated).await?;
        claims.metrics.claimed(claimed.jobs.len());
        let full = claimed.leased == want;
        if full && !gated {
            // More may be due: let a sibling claim beside this loop.
            self.plain_wake.notify_one();
        }
        // Every outcome of the claim is counted as to come before any job starts, so that
        // the completer never takes the first to finish for the last.
        let to_come: Vec<OutcomeToCome> = claimed
            .jobs
            .iter()
            .map(|_| self.launcher.expected.expect())
            .collect();
        drop(claiming);
        for (job, to_come) in claimed.jobs.into_iter().zip(to_come) {
            let Some((start, outcome)) = reserved.next() else {
                break;
            };
            self.launch(job, start, outcome, to_come, gated);
        }
        Ok(Some(Claim {
            leased: claimed.leased,
            full,
        }))
    }

    /// Starts a claimed job's task (see [`JobRun`]).
    fn launch(
        &self,
        job: ClaimedJob,
        start: Start,
        outcome: OwnedSemaphorePermit,
        to_come: OutcomeToCome,
        gated: bool,
    ) {
        let launcher = &self.launcher;
        let lost = launcher.executor.leases.hold(job.id, job.attempt);
        let span = job_span(&job);
        let run = JobRun {
            executor: Arc::clone(&launcher.executor),
            capacity: Arc::clone(&self.capacity),
            finished: launcher.finished.clone(),
            hard_stop: launcher.hard_stop.clone(),
            freed: gated.then(|| Arc::clone(&self.freed)),
            job,
            lost,
            start,
            outcome,
            to_come,
        };
        launcher.jobs.spawn(run.run().instrument(span));
    }
}

/// A claimed job's task, with everything it holds.
struct JobRun {
    executor: Arc<Executor>,
    capacity: Arc<LaneCapacity>,
    finished: mpsc::UnboundedSender<Finished>,
    hard_stop: CancellationToken,
    /// The gated claim loop to wake once the outcome is written, for a gated job.
    freed: Option<Arc<Notify>>,
    job: ClaimedJob,
    lost: CancellationToken,
    start: Start,
    outcome: OwnedSemaphorePermit,
    to_come: OutcomeToCome,
}

impl JobRun {
    /// Waits for a slot if the job was claimed ahead, runs the handler, frees the slot as soon
    /// as the handler returns, and sends the outcome to the completer, holding its room among
    /// the unwritten outcomes until it is written.
    async fn run(self) {
        let slot = match self.start {
            Start::Now(slot) => slot,
            Start::Ahead(ahead) => {
                let slot = tokio::select! {
                    slot = self.capacity.slot() => slot.ok(),
                    () = self.hard_stop.cancelled() => None,
                };
                drop(ahead);
                // A job claimed ahead whose slot never came before the hard stop is given up
                // like a handler the hard stop dropped.
                match slot {
                    Some(slot) => slot,
                    None => return self.executor.leases.abort(self.job.id),
                }
            }
        };
        let started = Instant::now();
        let done = self
            .executor
            .execute(self.job, self.lost, self.hard_stop)
            .await;
        self.capacity.record_handler_time(started.elapsed());
        // The handler has returned: its slot can run the next job while the outcome waits for
        // the completer.
        drop(slot);
        if let Some(mut done) = done {
            done.permit = Some(OutcomeHold::new(self.outcome, self.freed));
            // Counted out first: a completer that then finds none to come has every outcome it
            // could wait for, or is about to receive it.
            drop(self.to_come);
            // The completer outlives every job task; a send error means it is gone.
            let _ = self.finished.send(done);
        }
    }
}

/// The handler tasks: tracked apart so the drain can wait for them alone, and spawned through
/// the worker's tree so they are dropped with it.
#[derive(Clone)]
pub(super) struct JobTasks {
    spawner: TaskSpawner,
    tracker: tokio_util::task::TaskTracker,
}

impl JobTasks {
    pub(super) fn new(spawner: &TaskSpawner) -> Self {
        Self {
            spawner: spawner.clone(),
            tracker: tokio_util::task::TaskTracker::new(),
        }
    }

    fn spawn(&self, future: impl std::future::Future<Output = ()> + Send + 'static) {
        // A job's future holds its whole handler run; boxed once here, the wrappers and the
        // runtime move a pointer instead of copying it at each layer.
        self.spawner
            .spawn(self.tracker.track_future(Box::pin(future)));
    }

    pub(super) fn len(&self) -> usize {
        self.tracker.len()
    }

    pub(super) fn close(&self) {
        self.tracker.close();
    }

    pub(super) async fn wait(&self) {
        self.tracker.wait().await;
    }
}
