//! The Supervisor: starts the worker, intent promoter, scheduler, reaper, pruner and queue depth
//! loops of a worker process, watches them, and shuts them down within a deadline.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::core::jobs::JobId;
use crate::postgres::jobs::WorkerPresence;
use crate::runtime::catalog::JobCatalog;
use crate::runtime::config::{JobsConfig, JobsConfigError, warn_if_pool_small};
use crate::runtime::error::{RuntimeError, RuntimeLoopExit};
use crate::runtime::intent_promoter::{IntentPromoter, IntentPromoterConfig};
use crate::runtime::observer::{JobLifecycleObserver, JobLifecycleObservers};
use crate::runtime::presence::Presence;
use crate::runtime::pruner::{Pruner, PrunerConfig};
use crate::runtime::queue_depth::{QueueDepthConfig, QueueDepthSampler};
use crate::runtime::reaper::{Reaper, ReaperConfig};
use crate::runtime::registry::JobRegistry;
use crate::runtime::scheduler::{Scheduler, SchedulerConfig};
use crate::runtime::tasks::TaskTree;
use crate::runtime::worker::{WorkerConfig, WorkerLoop};

/// How long loops get to finish after the deadline's hard stop before they are aborted.
const HARD_STOP_GRACE: Duration = Duration::from_millis(500);

/// Connections the Supervisor's loops other than the worker may hold at once: the reaper, the
/// scheduler, the pruner and the presence writer, one each.
pub const BACKGROUND_LOOP_CONNECTIONS: u32 = 4;

/// Connections a Supervisor with `config` may hold at once for its own loops: the worker's (see
/// [`WorkerConfig::connections_used`]), the reaper, scheduler, pruner and presence writer, the intent
/// promoter's pass and LISTEN when it runs, and the queue depth sampler's when it runs. Size a
/// pool above this by what handlers use.
pub fn connections_used(config: &JobsConfig) -> u32 {
    let promoter = if config.intent_promoter_enabled { 2 } else { 0 };
    let sampler = u32::from(!config.queue_depth_interval.is_zero());
    WorkerConfig::from_jobs_config(config)
        .connections_used()
        .saturating_add(BACKGROUND_LOOP_CONNECTIONS)
        .saturating_add(promoter)
        .saturating_add(sampler)
}

/// Anything `Supervisor::builder` accepts as configuration: a [`JobsConfig`], or the result of
/// [`JobsConfig::from_env`] (whose error then surfaces from the builder).
pub trait IntoJobsConfig {
    /// The config, or why there is none.
    fn into_jobs_config(self) -> Result<JobsConfig, JobsConfigError>;
}

impl IntoJobsConfig for JobsConfig {
    fn into_jobs_config(self) -> Result<JobsConfig, JobsConfigError> {
        Ok(self)
    }
}

impl IntoJobsConfig for Result<JobsConfig, JobsConfigError> {
    fn into_jobs_config(self) -> Result<JobsConfig, JobsConfigError> {
        self
    }
}

/// Builds a [`Supervisor`].
#[derive(Debug)]
pub struct SupervisorBuilder {
    pool: PgPool,
    config: JobsConfig,
    registry: JobRegistry,
    observers: JobLifecycleObservers,
    pending_error: Option<RuntimeError>,
}

impl SupervisorBuilder {
    /// Registers every handler of `catalog` (sync its definitions separately, before starting);
    /// a catalog with a mistake fails [`build`](Self::build) with the catalog's code.
    pub fn with_catalog(mut self, catalog: &JobCatalog) -> Self {
        match catalog.validate() {
            Ok(()) => self.with_registry(catalog.handlers().clone()),
            Err(err) => {
                self.keep_error(err.into());
                self
            }
        }
    }

    /// Registers every handler of `registry`.
    pub fn with_registry(mut self, registry: JobRegistry) -> Self {
        if self.registry.is_empty() {
            self.registry = registry;
        } else {
            self.merge_registry(&registry);
        }
        self
    }

    /// Adds a lifecycle observer.
    pub fn with_job_lifecycle_observer(mut self, observer: impl JobLifecycleObserver) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    fn merge_registry(&mut self, registry: &JobRegistry) {
        for job_type in registry.job_types() {
            if let Some(handler) = registry.get(&job_type)
                && let Err(err) = self.registry.insert(job_type, Arc::clone(handler))
            {
                self.keep_error(err.into());
            }
        }
    }

    fn keep_error(&mut self, err: RuntimeError) {
        self.pending_error.get_or_insert(err);
    }

    /// Validates everything and starts the loops (requires a Tokio runtime): the worker, the
    /// intent promoter for the registered job types (unless
    /// [`JobsConfig::intent_promoter_enabled`] is off), the scheduler, the reaper, the pruner
    /// (unless [`JobsConfig::pruner_enabled`] is off) and the queue depth sampler (unless
    /// [`JobsConfig::queue_depth_interval`] is zero). Install the metrics recorder before: the
    /// loops take their metric handles from it. Fails
    /// with `config.pool_too_small` when the pool cannot run a worker at all, and warns (in
    /// tracing) when it allows fewer connections than the loops may use at once.
    pub fn build(self) -> Result<Supervisor, RuntimeError> {
        if let Some(err) = self.pending_error {
            return Err(err);
        }
        self.config.validate()?;
        if self.registry.is_empty() {
            return Err(RuntimeError::NoHandlers);
        }
        let worker_config = WorkerConfig::from_jobs_config(&self.config);
        let presence = Presence::new(
            self.pool.clone(),
            WorkerPresence::new(
                self.config.worker_id.clone(),
                self.registry.job_types(),
                (!self.config.queues.is_empty()).then(|| {
                    self.config
                        .queues
                        .iter()
                        .map(|queue| queue.name.clone())
                        .collect()
                }),
            ),
        );
        let needed = connections_used(&self.config);
        warn_if_pool_small(&self.pool, needed);
        let promoter = if self.config.intent_promoter_enabled {
            let mut config = IntentPromoterConfig::from_jobs_config(&self.config);
            // A LISTEN connection held for good would starve the other loops of a small pool;
            // the promoter then relies on polling alone.
            config.listen = self.pool.options().get_max_connections() >= needed;
            Some(IntentPromoter::new(
                self.pool.clone(),
                self.registry.job_types(),
                config,
            )?)
        } else {
            None
        };
        let tree = TaskTree::new();
        let tasks = tree.spawner().clone();
        let shutdown = tasks.child_token();
        let hard_stop = tasks.child_token();
        let observer_stop = tasks.child_token();
        let (observers, dispatcher) = self.observers.start(&tasks, observer_stop.clone());
        let worker = WorkerLoop::new(
            self.pool.clone(),
            Arc::new(self.registry),
            worker_config,
            observers.clone(),
        )?;
        let reaper = Reaper::new(
            self.pool.clone(),
            ReaperConfig::from_jobs_config(&self.config),
            observers,
        )?;
        let scheduler = Scheduler::new(
            self.pool.clone(),
            SchedulerConfig::from_jobs_config(&self.config),
        )?;
        let sampler = if self.config.queue_depth_interval.is_zero() {
            None
        } else {
            Some(QueueDepthSampler::new(
                self.pool.clone(),
                QueueDepthConfig::from_jobs_config(&self.config),
            )?)
        };
        let pruner = Pruner::new(self.pool, PrunerConfig::from_jobs_config(&self.config))?;

        let mut loops = JoinSet::new();
        let mut names = HashMap::new();
        let mut start = |name: &'static str, run: BoxedLoop, span: tracing::Span| {
            let handle = loops.spawn(tasks.cancellable(run.instrument(span)));
            names.insert(handle.id(), name);
        };
        let (stop, hard) = (shutdown.clone(), hard_stop.clone());
        start(
            "worker",
            Box::pin(async move { worker.run(stop, hard).await }),
            tracing::info_span!("runledger.worker", worker.id = %self.config.worker_id),
        );
        let stop = shutdown.clone();
        start(
            "presence",
            Box::pin(async move { presence.run(stop).await }),
            tracing::info_span!("runledger.presence"),
        );
        if let Some(promoter) = promoter {
            let stop = shutdown.clone();
            start(
                "intent promoter",
                Box::pin(async move { promoter.run(stop).await }),
                tracing::info_span!("runledger.intent_promoter"),
            );
        }
        let stop = shutdown.clone();
        start(
            "reaper",
            Box::pin(async move { reaper.run(stop).await }),
            tracing::info_span!("runledger.reaper"),
        );
        let stop = shutdown.clone();
        start(
            "scheduler",
            Box::pin(async move { scheduler.run(stop).await }),
            tracing::info_span!("runledger.scheduler"),
        );
        if self.config.pruner_enabled {
            let stop = shutdown.clone();
            start(
                "pruner",
                Box::pin(async move { pruner.run(stop).await }),
                tracing::info_span!("runledger.pruner"),
            );
        }
        if let Some(sampler) = sampler {
            let stop = shutdown.clone();
            start(
                "queue depth sampler",
                Box::pin(async move { sampler.run(stop).await }),
                tracing::info_span!("runledger.queue_depth"),
            );
        }
        tracing::info!(worker.id = %self.config.worker_id, "supervisor started");
        Ok(Supervisor {
            loops,
            names,
            shutdown,
            hard_stop,
            observer_stop,
            dispatcher,
            early_error: None,
            tree,
        })
    }
}

type BoxedLoop = std::pin::Pin<Box<dyn Future<Output = RuntimeLoopExit> + Send>>;

/// Runs the worker, intent promoter, scheduler, reaper, pruner and queue depth loops of one
/// worker process.
///
/// `build()` starts the loops; then either hand the process over to
/// [`Supervisor::run_until_shutdown`] (the usual choice for a worker binary), or keep the
/// value and call [`Supervisor::shutdown_with_timeout`] when your own shutdown logic decides.
/// Treat any error as fatal for the process.
///
/// ```no_run
/// use std::time::Duration;
/// use runledger_engine::runtime::{catalog::JobCatalog, config::JobsConfig, Supervisor};
///
/// # async fn demo(pool: sqlx::PgPool, catalog: JobCatalog) -> Result<(), Box<dyn std::error::Error>> {
/// catalog.sync_definitions(&pool).await?;
/// let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
///     .with_catalog(&catalog)
///     .build()?;
/// supervisor
///     .run_until_shutdown(async { let _ = tokio::signal::ctrl_c().await; }, Duration::from_secs(30))
///     .await?;
/// # Ok(()) }
/// ```
///
/// Every task the Supervisor starts (its loops, their helpers, every handler, the observer
/// dispatcher) belongs to one task tree: dropping the Supervisor without a shutdown stops them
/// all, and every shutdown ends with none left running.
pub struct Supervisor {
    loops: JoinSet<Option<RuntimeLoopExit>>,
    names: HashMap<tokio::task::Id, &'static str>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    observer_stop: CancellationToken,
    dispatcher: Option<tokio::task::JoinHandle<Option<()>>>,
    early_error: Option<RuntimeError>,
    tree: TaskTree,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("loops", &self.loops.len())
            .field("shutting_down", &self.shutdown.is_cancelled())
            .finish()
    }
}

/// Alias of [`RuntimeError`] for shutdown results, under the original name.
pub type SupervisorShutdown = Result<(), RuntimeError>;

impl Supervisor {
    /// Starts building a supervisor for `pool` with `config` (a [`JobsConfig`] or the result of
    /// [`JobsConfig::from_env`]).
    pub fn builder(
        pool: &PgPool,
        config: impl IntoJobsConfig,
    ) -> Result<SupervisorBuilder, RuntimeError> {
        let config = config.into_jobs_config()?;
        config.validate()?;
        Ok(SupervisorBuilder {
            pool: pool.clone(),
            config,
            registry: JobRegistry::new(),
            observers: JobLifecycleObservers::new(),
            pending_error: None,
        })
    }

    /// Starts building with [`JobsConfig::from_env`].
    pub fn builder_from_env(pool: &PgPool) -> Result<SupervisorBuilder, RuntimeError> {
        Self::builder(pool, JobsConfig::from_env())
    }

    /// Runs until `signal` completes or a loop fails, then shuts down within `deadline`.
    /// Returns an error when a loop panicked or exited on its own, or when the deadline was
    /// missed (remaining tasks are then aborted and in-flight handlers dropped).
    pub async fn run_until_shutdown(
        mut self,
        signal: impl Future<Output = ()>,
        deadline: Duration,
    ) -> SupervisorShutdown {
        tokio::select! {
            () = signal => tracing::info!("shutdown signal received"),
            Some(joined) = self.loops.join_next_with_id() => {
                let err = loop_failure(joined, false, &self.names);
                tracing::error!(error = %err, "a runtime loop stopped; shutting down");
                self.early_error = Some(err);
            }
        }
        self.shutdown_with_timeout(deadline).await
    }

    /// Stops claiming, drains in-flight jobs without a deadline and waits for every loop.
    pub async fn shutdown(mut self) -> SupervisorShutdown {
        self.shutdown.cancel();
        let mut first_error = self.early_error.take();
        while let Some(joined) = self.loops.join_next_with_id().await {
            if let Some(err) = shutdown_failure(joined, &self.names) {
                first_error.get_or_insert(err);
            }
        }
        self.finish().await;
        first_error.map_or(Ok(()), Err)
    }

    /// Stops claiming and drains in-flight jobs for up to `deadline`; then drops the remaining
    /// handlers, aborts the loops and reports the dropped jobs.
    pub async fn shutdown_with_timeout(mut self, deadline: Duration) -> SupervisorShutdown {
        self.shutdown.cancel();
        let mut first_error = self.early_error.take();
        let mut aborted: Vec<JobId> = Vec::new();
        let drained = tokio::time::timeout(deadline, async {
            let mut errors = Vec::new();
            while let Some(joined) = self.loops.join_next_with_id().await {
                errors.push(joined);
            }
            errors
        })
        .await;
        let results = match drained {
            Ok(results) => results,
            Err(_) => {
                tracing::warn!("shutdown deadline reached; dropping in-flight handlers");
                self.hard_stop.cancel();
                let mut results = Vec::new();
                let grace = tokio::time::timeout(HARD_STOP_GRACE, async {
                    while let Some(joined) = self.loops.join_next_with_id().await {
                        results.push(joined);
                    }
                })
                .await;
                if grace.is_err() {
                    self.loops.abort_all();
                    while self.loops.join_next().await.is_some() {}
                }
                first_error.get_or_insert(RuntimeError::ShutdownDeadlineExceeded {
                    aborted_jobs: Vec::new(),
                });
                results
            }
        };
        for joined in results {
            match joined {
                Ok((_, Some(RuntimeLoopExit::Aborted { aborted_jobs }))) => {
                    aborted.extend(aborted_jobs);
                }
                other => {
                    if let Some(err) = shutdown_failure(other, &self.names) {
                        first_error.get_or_insert(err);
                    }
                }
            }
        }
        self.finish().await;
        match first_error {
            Some(RuntimeError::ShutdownDeadlineExceeded { .. }) => {
                Err(RuntimeError::ShutdownDeadlineExceeded {
                    aborted_jobs: aborted,
                })
            }
            Some(err) => Err(err),
            None if !aborted.is_empty() => Err(RuntimeError::ShutdownDeadlineExceeded {
                aborted_jobs: aborted,
            }),
            None => Ok(()),
        }
    }

    /// Delivers the observers' pending events (bounded), then stops whatever task is left.
    async fn finish(&mut self) {
        self.observer_stop.cancel();
        if let Some(dispatcher) = self.dispatcher.take() {
            let _ = dispatcher.await;
        }
        self.tree.stop().await;
    }
}

/// Interprets a loop that ended while shutdown was in progress.
fn shutdown_failure(
    joined: Result<(tokio::task::Id, Option<RuntimeLoopExit>), JoinError>,
    names: &HashMap<tokio::task::Id, &'static str>,
) -> Option<RuntimeError> {
    match joined {
        Ok((_, Some(RuntimeLoopExit::Shutdown) | None)) => None,
        other => Some(loop_failure(other, true, names)),
    }
}

/// Interprets a loop that ended; `shutting_down` tells whether that was expected.
fn loop_failure(
    joined: Result<(tokio::task::Id, Option<RuntimeLoopExit>), JoinError>,
    shutting_down: bool,
    names: &HashMap<tokio::task::Id, &'static str>,
) -> RuntimeError {
    let name = |id| names.get(&id).copied().unwrap_or("runtime");
    match joined {
        Ok((_, Some(RuntimeLoopExit::Aborted { aborted_jobs }))) if shutting_down => {
            RuntimeError::ShutdownDeadlineExceeded { aborted_jobs }
        }
        Ok((_, Some(RuntimeLoopExit::InvalidConfig(err)))) => RuntimeError::InvalidJobsConfig(err),
        Ok((id, exit)) => RuntimeError::LoopExitedEarly {
            loop_name: name(id),
            exit: exit.unwrap_or(RuntimeLoopExit::Shutdown),
        },
        Err(err) => {
            let loop_name = name(err.id());
            if err.is_panic() {
                RuntimeError::LoopPanicked { loop_name }
            } else {
                RuntimeError::LoopExitedEarly {
                    loop_name,
                    exit: RuntimeLoopExit::Shutdown,
                }
            }
        }
    }
}
