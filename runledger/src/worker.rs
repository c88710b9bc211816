//! [`Worker`]: one call that registers every `#[job]` and `#[schedule]` and runs them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::catalog::{self, EngineHandler};
use crate::context::Data;
use crate::engine::core::jobs::JobDefaults;
use crate::engine::postgres::{
    DEFAULT_CONNECT_TIMEOUT, check_connection, ensure_schema_compatible, migrate,
};
use crate::engine::runtime::catalog::JobCatalog;
use crate::engine::runtime::config::{JobsConfig, JobsConfigError, check_pool_size};
use crate::engine::runtime::queues::QueueConcurrency;
use crate::engine::runtime::registry::JobHandler;
use crate::engine::runtime::supervisor::connections_used;
use crate::engine::runtime::worker::WorkerConfig;
use crate::engine::runtime::{JobLifecycleObserver, Supervisor, SupervisorBuilder};
use crate::error::Error;

// `Sync` as well as `Send`, so that `&Worker` may be held across an `.await` in a spawned task.
type AddObserver = Box<dyn FnOnce(SupervisorBuilder) -> SupervisorBuilder + Send + Sync>;

/// What a worker does with the database schema before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SchemaMode {
    /// Applies pending migrations (safe with many workers starting at once: sqlx takes an
    /// advisory lock). The default.
    #[default]
    Migrate,
    /// Only checks that the schema is the one this version expects, and refuses to start
    /// otherwise; for deployments that migrate in a separate step.
    Validate,
    /// Neither (the caller has checked).
    Skip,
}

/// A worker process: every `#[job]` and `#[schedule]` linked into the binary (plus any engine
/// handlers given to [`WorkerBuilder::handler`]), a database pool and the runtime settings.
///
/// Building a worker collects the registrations into the engine's
/// [`JobCatalog`] (two jobs, workflows or schedules with the same name fail here, naming both
/// source locations); [`start`](Self::start) prepares the schema, syncs job definitions and
/// schedules, and starts the worker, intent promoter, scheduler and reaper loops.
///
/// ```no_run
/// # async fn demo() -> Result<(), runledger::Error> {
/// // DATABASE_URL and the JOBS_* variables configure it; SIGINT or SIGTERM drains it.
/// runledger::Worker::from_env()?.run_until_ctrl_c().await?;
/// # Ok(()) }
/// ```
pub struct Worker {
    pool: PgPool,
    config: JobsConfig,
    schema: SchemaMode,
    shutdown_deadline: Duration,
    connect_timeout: Duration,
    observers: Vec<AddObserver>,
    catalog: JobCatalog,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.config.worker_id)
            .field("catalog", &self.catalog)
            .finish()
    }
}

impl Worker {
    /// How long in-flight handlers may finish after a shutdown signal, unless
    /// `JOBS_SHUTDOWN_TIMEOUT_SECONDS` or [`WorkerBuilder::shutdown_deadline`] says otherwise.
    pub const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(30);

    /// A worker configured from the environment: `DATABASE_URL` (required), `JOBS_*` (listed in
    /// `docs/configuration.md`), `JOBS_SHUTDOWN_TIMEOUT_SECONDS` (default 30) and
    /// `JOBS_CONNECT_TIMEOUT_SECONDS` (default 5). The pool connects lazily, so this call does
    /// not touch the database; [`prepare`](Self::prepare) and [`start`](Self::start) do.
    pub fn from_env() -> Result<Self, Error> {
        let url = std::env::var("DATABASE_URL").map_err(|_| Error::DatabaseUrl {
            problem: "is not set".to_owned(),
        })?;
        let config = JobsConfig::from_env()?;
        let pool = PgPoolOptions::new()
            .max_connections(pool_size(&config))
            .connect_lazy(&url)
            .map_err(|e| Error::DatabaseUrl {
                problem: format!("is not a usable PostgreSQL URL: {e}"),
            })?;
        let mut builder = Self::builder(&pool).config(config);
        if let Some(seconds) = read_seconds("JOBS_SHUTDOWN_TIMEOUT_SECONDS")? {
            builder = builder.shutdown_deadline(Duration::from_secs(seconds));
        }
        if let Some(seconds) = read_seconds("JOBS_CONNECT_TIMEOUT_SECONDS")? {
            builder = builder.connect_timeout(Duration::from_secs(seconds));
        }
        builder.build()
    }

    /// Starts configuring a worker on `pool`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use runledger::{JobsConfig, SchemaMode, Worker};
    ///
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let worker = Worker::builder(&pool)
    ///     .config(JobsConfig { max_global_concurrency: 16, ..JobsConfig::default() })
    ///     .schema(SchemaMode::Validate)
    ///     .shutdown_deadline(Duration::from_secs(60))
    ///     .build()?;
    /// let running = worker.start().await?;
    /// // ... serve requests ...
    /// running.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(pool: &PgPool) -> WorkerBuilder {
        WorkerBuilder {
            pool: pool.clone(),
            config: None,
            queues: None,
            schema: SchemaMode::default(),
            shutdown_deadline: Self::DEFAULT_SHUTDOWN_DEADLINE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            observers: Vec::new(),
            handlers: Vec::new(),
            data: Data::default(),
        }
    }

    /// The pool the worker uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Everything this worker runs and syncs, as the engine's catalog: every `#[job]` (sorted
    /// by name), the engine handlers given to
    /// [`WorkerBuilder::handler`], and every `#[schedule]` (sorted by name).
    ///
    /// Read it to check what a binary registers; hand it to an engine `Supervisor` of your
    /// own (`SupervisorBuilder::with_catalog`) to run the typed jobs there.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let worker = runledger::Worker::builder(&pool).build()?;
    /// for schedule in worker.catalog().schedules() {
    ///     println!("{} enqueues {} at {}", schedule.name(), schedule.job_type(), schedule.cron_expr());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn catalog(&self) -> &JobCatalog {
        &self.catalog
    }

    /// Checks that the database can be reached (within the connect timeout, failing with
    /// [`Error::Connection`] that names the host, port, database, cause and a hint), prepares
    /// the schema (per [`SchemaMode`]) and syncs job definitions and schedules, without
    /// starting any loop. [`start`](Self::start) does this first; call it alone in a process
    /// that only enqueues (an API server), so that its job types exist before the first
    /// enqueue even when no worker has started yet.
    pub async fn prepare(&self) -> Result<(), Error> {
        check_connection(&self.pool, self.connect_timeout).await?;
        match self.schema {
            SchemaMode::Migrate => migrate(&self.pool).await?,
            SchemaMode::Validate => ensure_schema_compatible(&self.pool).await?,
            SchemaMode::Skip => {}
        }
        self.catalog.sync_definitions(&self.pool).await?;
        self.catalog.sync_schedules(&self.pool).await?;
        Ok(())
    }

    /// Prepares (see [`prepare`](Self::prepare)) and starts the worker, intent promoter,
    /// scheduler and reaper loops. Returns once the worker is running.
    pub async fn start(self) -> Result<RunningWorker, Error> {
        self.prepare().await?;
        let mut builder =
            Supervisor::builder(&self.pool, self.config.clone())?.with_catalog(&self.catalog);
        for add in self.observers {
            builder = add(builder);
        }
        let supervisor = builder.build()?;
        tracing::info!(
            worker.id = %self.config.worker_id,
            jobs = self.catalog.job_types().len(),
            schedules = self.catalog.schedules().len(),
            "runledger worker started"
        );
        Ok(RunningWorker {
            supervisor,
            shutdown_deadline: self.shutdown_deadline,
        })
    }

    /// Starts, runs until `signal` completes (or a loop fails), then drains within the
    /// shutdown deadline.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), Error> {
        self.start().await?.run_until(signal).await
    }

    /// Starts, runs until SIGINT (Ctrl-C) or SIGTERM, then drains in-flight jobs within the
    /// shutdown deadline; jobs still running after it are aborted (and retried elsewhere once
    /// their leases expire).
    pub async fn run_until_ctrl_c(self) -> Result<(), Error> {
        self.run_until(shutdown_signal()).await
    }
}

/// The runtime's own connections (LISTEN, claims, batched completions, heartbeats, logs, the
/// reaper, the scheduler, and the intent promoter's pass and LISTEN) plus one per handler slot
/// for handlers that use [`Worker::pool`]; capped at 50 so that a few worker processes stay
/// within PostgreSQL's default `max_connections` (pass your own pool to [`Worker::builder`] to
/// size it differently).
fn pool_size(config: &JobsConfig) -> u32 {
    let loops = connections_used(config);
    loops
        .saturating_add(WorkerConfig::from_jobs_config(config).total_concurrency())
        .min(50)
        .max(loops)
}

fn read_seconds(variable: &'static str) -> Result<Option<u64>, Error> {
    match std::env::var(variable) {
        Ok(value) if !value.trim().is_empty() => value.trim().parse().map(Some).map_err(|_| {
            Error::Config(JobsConfigError::InvalidEnvVar {
                variable,
                value,
                expected: "a non-negative integer",
            })
        }),
        _ => Ok(None),
    }
}

/// Configures a [`Worker`]; made by [`Worker::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkerBuilder {
    pool: PgPool,
    config: Option<JobsConfig>,
    queues: Option<Vec<QueueConcurrency>>,
    schema: SchemaMode,
    shutdown_deadline: Duration,
    connect_timeout: Duration,
    observers: Vec<AddObserver>,
    handlers: Vec<EngineHandler>,
    data: Data,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("config", &self.config)
            .field("queues", &self.queues)
            .field("schema", &self.schema)
            .field("shutdown_deadline", &self.shutdown_deadline)
            .field("connect_timeout", &self.connect_timeout)
            .field("data", &self.data)
            .finish()
    }
}

impl WorkerBuilder {
    /// Shares `value` with every `#[job]` handler of this worker, by type: a handler reads it
    /// with [`ctx.data::<T>()`](crate::JobContext::data), which fails with `job.data_missing`
    /// when no `T` was given. A second value of the same type replaces the first. Wrap what
    /// is not cheap to share in an `Arc`; pools and clients usually are already.
    ///
    /// ```no_run
    /// use runledger::prelude::*;
    ///
    /// #[derive(Clone)]
    /// struct Billing { api_key: String }
    ///
    /// #[job]
    /// async fn charge(ctx: JobContext, cents: u64) -> Result<(), JobError> {
    ///     let billing = ctx.data::<Billing>()?;
    ///     let _ = (&billing.api_key, cents);
    ///     Ok(())
    /// }
    ///
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let worker = Worker::builder(&pool)
    ///     .data(Billing { api_key: "sk_test".into() })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Runtime settings (default: [`JobsConfig::default`]; `from_env` reads `JOBS_*`).
    pub fn config(mut self, config: JobsConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// The queues this worker serves, each with how many of its jobs it runs at once; it
    /// replaces the config's `queues` (`JOBS_QUEUES`). Without queues a worker serves every
    /// queue within `max_global_concurrency`. A queue's jobs are those whose `#[job(queue =
    /// "..")]` names it (`default` otherwise); a limit across all workers is set on the queue
    /// itself ([`admin::set_queue_global_concurrency`](crate::admin::set_queue_global_concurrency)).
    ///
    /// Each queue has its own concurrency slots and claim loops, so a backlog in one never
    /// holds back the others.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let worker = runledger::Worker::builder(&pool)
    ///     .queues([("default", 16), ("emails", 4)])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn queues<Q: Into<String>>(mut self, queues: impl IntoIterator<Item = (Q, u32)>) -> Self {
        self.queues = Some(
            queues
                .into_iter()
                .map(|(name, concurrency)| QueueConcurrency::new(name, concurrency))
                .collect(),
        );
        self
    }

    /// What to do with the schema at start (default: [`SchemaMode::Migrate`]).
    pub fn schema(mut self, schema: SchemaMode) -> Self {
        self.schema = schema;
        self
    }

    /// How long in-flight jobs may finish after a shutdown signal (default 30 s).
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.shutdown_deadline = deadline;
        self
    }

    /// How long the startup connection check waits for the server (default 5 s; `from_env`
    /// reads `JOBS_CONNECT_TIMEOUT_SECONDS`). The check runs once, in
    /// [`Worker::prepare`]; the pool's own timeouts are not changed.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Adds a lifecycle observer (called after each state change commits).
    pub fn observer(mut self, observer: impl JobLifecycleObserver) -> Self {
        self.observers.push(Box::new(move |builder| {
            builder.with_job_lifecycle_observer(observer)
        }));
        self
    }

    /// Adds an engine handler (a job type chosen at run time, or one ported from the engine
    /// API) to run next to the `#[job]`s, with the built-in definition values. Its job type
    /// must not be a `#[job]`'s name: [`build`](Self::build) fails with
    /// `worker.duplicate_job` naming both.
    ///
    /// ```no_run
    /// use runledger::engine::core::prelude::*;
    ///
    /// struct Resize;
    ///
    /// #[async_trait]
    /// impl JobHandler for Resize {
    ///     fn job_type(&self) -> JobType<'static> {
    ///         JobType::new("images.resize")
    ///     }
    ///     async fn execute(&self, _: JobContext, _: serde_json::Value) -> Result<JobCompletion, JobFailure> {
    ///         Ok(JobCompletion::success())
    ///     }
    /// }
    ///
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let worker = runledger::Worker::builder(&pool).handler(Resize).build()?;
    /// # Ok(()) }
    /// ```
    pub fn handler(self, handler: impl JobHandler) -> Self {
        self.handler_with_defaults(handler, JobDefaults::new())
    }

    /// Like [`handler`](Self::handler), with definition values.
    pub fn handler_with_defaults(
        mut self,
        handler: impl JobHandler,
        defaults: JobDefaults,
    ) -> Self {
        let rust_type = std::any::type_name_of_val(&handler);
        self.handlers.push(EngineHandler {
            name: handler.job_type().as_str().to_owned(),
            handler: Arc::new(handler),
            defaults,
            rust_type,
        });
        self
    }

    /// Collects the registered jobs, workflows and schedules and checks the settings. Fails
    /// with `worker.duplicate_job` / `worker.duplicate_workflow` /
    /// `worker.duplicate_schedule` (naming both registrations),
    /// `worker.schedule_payload_invalid`, `config.pool_too_small` (a pool of fewer than two
    /// connections: LISTEN would hold the only one), or another config code.
    pub fn build(self) -> Result<Worker, Error> {
        let mut config = self.config.unwrap_or_default();
        if let Some(queues) = self.queues {
            config.queues = queues;
        }
        config.validate()?;
        check_pool_size(&self.pool)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::Config(JobsConfigError::InvalidField {
                field: "connect_timeout",
                problem: "must be positive",
            }));
        }
        let catalog = catalog::build(&Arc::new(self.data), self.handlers)?;
        Ok(Worker {
            pool: self.pool,
            config,
            schema: self.schema,
            shutdown_deadline: self.shutdown_deadline,
            connect_timeout: self.connect_timeout,
            observers: self.observers,
            catalog,
        })
    }
}

/// A started [`Worker`].
#[derive(Debug)]
pub struct RunningWorker {
    supervisor: Supervisor,
    shutdown_deadline: Duration,
}

impl RunningWorker {
    /// Runs until `signal` completes (or a loop fails), then drains within the deadline.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), Error> {
        Ok(self
            .supervisor
            .run_until_shutdown(signal, self.shutdown_deadline)
            .await?)
    }

    /// Stops claiming, lets in-flight jobs finish within the shutdown deadline, and stops.
    pub async fn shutdown(self) -> Result<(), Error> {
        Ok(self
            .supervisor
            .shutdown_with_timeout(self.shutdown_deadline)
            .await?)
    }
}

/// Completes on SIGINT or (on Unix) SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; waiting for Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
