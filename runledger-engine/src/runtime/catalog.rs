//! The job catalog: one place that registers handlers and keeps their job definitions in step
//! with the code at startup.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::jobs::{
    IdentifierError, JobDefaults, JobType, StepKey, WorkflowStepEnqueueBuilder,
};
use crate::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, JobScheduleUpsert, job_schedule, sync_job_definitions,
    sync_job_schedules,
};
use crate::runtime::registry::{JobHandler, JobRegistry, RegistryError};

/// Why a catalog is invalid or could not be synced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// Two entries name the same job type.
    #[error("job type `{job_type}` is registered twice in the catalog")]
    DuplicateJobType {
        /// The job type.
        job_type: String,
    },
    /// `job(type, handler)` names a type different from the handler's own `job_type()`.
    #[error("catalog entry `{declared}` is given a handler for `{handler}`")]
    JobTypeMismatch {
        /// The type given to the catalog.
        declared: String,
        /// The handler's type.
        handler: String,
    },
    /// A job type is blank or too long.
    #[error("invalid catalog job type: {0}")]
    InvalidJobType(#[from] IdentifierError),
    /// A default or override is out of range.
    #[error("catalog value {field} for `{job_type}` must be positive")]
    InvalidDefinitionValue {
        /// The job type (or `*` for the catalog defaults).
        job_type: String,
        /// The field.
        field: &'static str,
    },
    /// A job type the catalog does not register was named: by definition overrides, or by a
    /// catalog-validated enqueue or step builder.
    #[error("job type `{job_type}` is not registered in the catalog")]
    UnknownJobType {
        /// The job type.
        job_type: String,
    },
    /// A catalog-validated enqueue or step builder named a job type whose effective
    /// definition (catalog defaults, then its overrides) is disabled.
    #[error("job type `{job_type}` is disabled in the catalog")]
    JobTypeDisabled {
        /// The job type.
        job_type: String,
    },
    /// An exact-sync scope is empty or names an invalid type.
    #[error("invalid catalog sync scope: {reason}")]
    InvalidScope {
        /// What is wrong.
        reason: String,
    },
    /// Exact sync would disable a definition that active schedules still use.
    #[error("job definition `{job_type}` still has active schedules and cannot be disabled")]
    ActiveScheduleExists {
        /// The job type.
        job_type: String,
    },
    /// A catalog schedule names a job type the catalog does not register.
    #[error("schedule `{name}` names job type `{job_type}`, which the catalog does not register")]
    ScheduleUnknownJobType {
        /// The schedule.
        name: String,
        /// Its job type.
        job_type: String,
    },
    /// Two catalog schedules share a name.
    #[error("schedule `{name}` is registered twice in the catalog")]
    DuplicateSchedule {
        /// The name.
        name: String,
    },
    /// Writing the definitions failed.
    #[error(transparent)]
    Persistence(Box<crate::postgres::Error>),
}

impl CatalogError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DuplicateJobType { .. } => "catalog.duplicate_job_type",
            Self::JobTypeMismatch { .. } => "catalog.job_type_mismatch",
            Self::InvalidJobType(err) => err.code(),
            Self::InvalidDefinitionValue { .. } => "catalog.invalid_definition_value",
            Self::UnknownJobType { .. } => "catalog.unknown_job_type",
            Self::JobTypeDisabled { .. } => "catalog.job_type_disabled",
            Self::InvalidScope { .. } => "catalog.invalid_scope",
            Self::ActiveScheduleExists { .. } => "job_definition.active_schedule_exists",
            Self::ScheduleUnknownJobType { .. } => "catalog.schedule_unknown_job_type",
            Self::DuplicateSchedule { .. } => "catalog.duplicate_schedule",
            Self::Persistence(err) => err.code(),
        }
    }
}

impl From<crate::postgres::Error> for CatalogError {
    fn from(err: crate::postgres::Error) -> Self {
        match err {
            crate::postgres::Error::ActiveScheduleExists { job_type } => {
                Self::ActiveScheduleExists { job_type }
            }
            other => Self::Persistence(Box::new(other)),
        }
    }
}

/// Definition values applied to every catalog job unless overridden (seed name of
/// [`JobDefaults`]; unset fields take the built-in defaults).
///
/// ```
/// use runledger_engine::runtime::catalog::{JobCatalog, JobCatalogDefaults};
///
/// let catalog = JobCatalog::new().with_defaults(JobCatalogDefaults::new().max_attempts(10));
/// ```
pub type JobCatalogDefaults = JobDefaults;

/// Per-job definition values that take precedence over the catalog's defaults for the fields
/// they set (seed name of [`JobDefaults`]).
///
/// ```
/// use runledger_engine::runtime::catalog::JobCatalogDefinitionOverrides;
///
/// let overrides = JobCatalogDefinitionOverrides::new().timeout_seconds(600).priority(20);
/// ```
pub type JobCatalogDefinitionOverrides = JobDefaults;

/// The job types an exact sync owns: enabled definitions in this set that the catalog lacks
/// are disabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCatalogSyncScope {
    job_types: Vec<String>,
}

impl JobCatalogSyncScope {
    /// A scope of explicit job types (not empty, each a valid job type).
    pub fn new<I, S>(job_types: I) -> Result<Self, CatalogError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let job_types: BTreeSet<String> = job_types.into_iter().map(Into::into).collect();
        if job_types.is_empty() {
            return Err(CatalogError::InvalidScope {
                reason: "a scope must name at least one job type".to_owned(),
            });
        }
        for job_type in &job_types {
            JobType::new(job_type).validate()?;
        }
        Ok(Self {
            job_types: job_types.into_iter().collect(),
        })
    }

    /// The owned job types, sorted.
    pub fn job_types(&self) -> &[String] {
        &self.job_types
    }
}

/// The schedule names an exact schedule sync owns: active schedules in this set that the
/// synced specs lack are deactivated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCatalogScheduleSyncScope {
    names: Vec<String>,
}

impl JobCatalogScheduleSyncScope {
    /// A scope of explicit schedule names (not empty, none blank).
    pub fn new<I, S>(names: I) -> Result<Self, CatalogError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: BTreeSet<String> = names.into_iter().map(Into::into).collect();
        if names.is_empty() || names.iter().any(|name| name.trim().is_empty()) {
            return Err(CatalogError::InvalidScope {
                reason: "a schedule scope must name at least one schedule, none blank".to_owned(),
            });
        }
        Ok(Self {
            names: names.into_iter().collect(),
        })
    }

    /// The owned schedule names, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// A schedule declared next to its handler in the catalog. The cron expression is evaluated
/// in UTC; declare it with [`JobCatalog::schedule_in`] for another time zone.
///
/// ```
/// use runledger_engine::runtime::catalog::CatalogJobScheduleSpec;
///
/// let spec = CatalogJobScheduleSpec {
///     name: "profiles.refresh.hourly",
///     job_type: "profiles.refresh",
///     cron_expr: "0 0 * * * *",
///     payload_template: &serde_json::json!({}),
///     is_active: true,
///     organization_id: None,
///     max_jitter_seconds: 0,
///     next_fire_at: None,
/// };
/// assert_eq!(spec.cron_expr, "0 0 * * * *");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CatalogJobScheduleSpec<'a> {
    /// Unique schedule name.
    pub name: &'a str,
    /// The job type each fire enqueues.
    pub job_type: &'a str,
    /// Cron expression: seconds field, 5-field, or an `@hourly`-style alias.
    pub cron_expr: &'a str,
    /// Payload template (each job also gets `schedule` and `scheduled_for`).
    pub payload_template: &'a Value,
    /// Applied on every sync.
    pub is_active: bool,
    /// Organization of the enqueued jobs.
    pub organization_id: Option<Uuid>,
    /// Upper bound of the deterministic per-fire delay.
    pub max_jitter_seconds: i32,
    /// First fire when the schedule is created or its cron changes; default: the next cron
    /// fire after now for a new schedule, now (a prompt fire) for a changed cron.
    pub next_fire_at: Option<DateTime<Utc>>,
}

impl<'a> CatalogJobScheduleSpec<'a> {
    fn upsert(&self) -> JobScheduleUpsert<'a> {
        let mut upsert = job_schedule(self.name, self.job_type, self.cron_expr)
            .payload_template(self.payload_template)
            .active(self.is_active)
            .max_jitter_seconds(self.max_jitter_seconds);
        upsert.organization_id = self.organization_id;
        upsert.next_fire_at = self.next_fire_at;
        upsert
    }
}

/// A schedule the catalog holds, as [`JobCatalog::schedules`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogSchedule {
    name: String,
    job_type: String,
    cron_expr: String,
    payload_template: Value,
    is_active: bool,
    organization_id: Option<Uuid>,
    max_jitter_seconds: i32,
    next_fire_at: Option<DateTime<Utc>>,
    time_zone: String,
}

impl CatalogSchedule {
    /// The unique schedule name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job type each fire enqueues.
    pub fn job_type(&self) -> &str {
        &self.job_type
    }

    /// The cron expression, as declared.
    pub fn cron_expr(&self) -> &str {
        &self.cron_expr
    }

    /// The IANA time zone the expression is evaluated in (`UTC` unless declared).
    pub fn time_zone(&self) -> &str {
        &self.time_zone
    }

    /// The payload template.
    pub fn payload_template(&self) -> &Value {
        &self.payload_template
    }

    /// Whether it fires (applied on every sync).
    pub fn is_active(&self) -> bool {
        self.is_active
    }

    /// The organization of the enqueued jobs.
    pub fn organization_id(&self) -> Option<Uuid> {
        self.organization_id
    }

    /// Upper bound of the deterministic per-fire delay, in seconds.
    pub fn max_jitter_seconds(&self) -> i32 {
        self.max_jitter_seconds
    }

    fn upsert(&self) -> JobScheduleUpsert<'_> {
        CatalogJobScheduleSpec {
            name: &self.name,
            job_type: &self.job_type,
            cron_expr: &self.cron_expr,
            payload_template: &self.payload_template,
            is_active: self.is_active,
            organization_id: self.organization_id,
            max_jitter_seconds: self.max_jitter_seconds,
            next_fire_at: self.next_fire_at,
        }
        .upsert()
        .time_zone(&self.time_zone)
    }
}

/// Why an entry was refused as it was added, kept until the catalog is validated.
#[derive(Debug, Clone)]
enum Refusal {
    InvalidJobType(IdentifierError),
    JobTypeMismatch { declared: String, handler: String },
    Registry(RegistryError),
}

impl From<Refusal> for CatalogError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::InvalidJobType(err)
            | Refusal::Registry(RegistryError::InvalidJobType(err)) => Self::InvalidJobType(err),
            Refusal::JobTypeMismatch { declared, handler } => {
                Self::JobTypeMismatch { declared, handler }
            }
            Refusal::Registry(RegistryError::DuplicateJobType { job_type }) => {
                Self::DuplicateJobType { job_type }
            }
        }
    }
}

/// A registered job type and its own definition overrides; its handler is in the catalog's
/// [`JobRegistry`].
struct CatalogEntry {
    job_type: String,
    overrides: JobDefaults,
}

/// Handlers and their definitions, declared once at startup: the one container of a worker
/// process's handlers, which `SupervisorBuilder::with_catalog` hands to the worker as they are.
///
/// Catalog building never fails at the call: mistakes (duplicates, a handler registered under
/// another type, non-positive values) are found as entries are added, and reported by
/// [`Self::validate`], by the sync calls and by `SupervisorBuilder::build`.
///
/// ```no_run
/// use runledger_engine::core::prelude::*;
/// use runledger_engine::runtime::catalog::{JobCatalog, JobCatalogDefinitionOverrides};
///
/// struct SendEmail;
///
/// #[async_trait]
/// impl JobHandler for SendEmail {
///     fn job_type(&self) -> JobType<'static> {
///         JobType::new("jobs.email.send")
///     }
///     async fn execute(&self, _: JobContext, _: serde_json::Value) -> Result<JobCompletion, JobFailure> {
///         Ok(JobCompletion::success())
///     }
/// }
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let catalog = JobCatalog::new().job_with_definition_overrides(
///     "jobs.email.send",
///     SendEmail,
///     JobCatalogDefinitionOverrides::new().max_attempts(8),
/// );
/// catalog.sync_definitions(&pool).await?;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct JobCatalog {
    defaults: JobDefaults,
    /// The job types in registration order, with their overrides.
    entries: Vec<CatalogEntry>,
    /// The handlers by job type.
    handlers: JobRegistry,
    /// The first entry refused.
    refused: Option<Refusal>,
    pending_overrides: Vec<(String, JobDefaults)>,
    schedules: Vec<CatalogSchedule>,
    /// Schedules declared before (or without) their job: found at `.schedule()`, reported by
    /// the sync calls.
    early_schedules: Vec<(String, String)>,
}

impl std::fmt::Debug for JobCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobCatalog")
            .field("defaults", &self.defaults)
            .field("job_types", &self.job_types())
            .finish()
    }
}

impl JobCatalog {
    /// An empty catalog with default definition values.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the catalog-wide definition defaults (unset fields take the built-in ones).
    pub fn with_defaults(mut self, defaults: JobDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Registers `handler` for `job_type` (which must equal the handler's own job type).
    pub fn job(self, job_type: &str, handler: impl JobHandler) -> Self {
        self.job_with_definition_overrides(job_type, handler, JobDefaults::new())
    }

    /// Registers `handler` under its own job type.
    pub fn handler(self, handler: impl JobHandler) -> Self {
        let job_type = handler.job_type().as_str().to_owned();
        self.job(&job_type, handler)
    }

    /// Registers `handler` for `job_type` with per-job definition overrides.
    pub fn job_with_definition_overrides(
        self,
        job_type: &str,
        handler: impl JobHandler,
        overrides: JobDefaults,
    ) -> Self {
        self.shared_job(job_type, Arc::new(handler), overrides)
    }

    /// Registers a handler that is already shared (an `Arc`, e.g. one the typed layer made
    /// for a `#[job]`) for `job_type` with per-job definition overrides, without wrapping it
    /// again.
    pub fn shared_job(
        mut self,
        job_type: &str,
        handler: Arc<dyn JobHandler>,
        overrides: JobDefaults,
    ) -> Self {
        match self.insert(job_type, handler) {
            Ok(()) => self.entries.push(CatalogEntry {
                job_type: job_type.to_owned(),
                overrides,
            }),
            Err(refusal) => {
                self.refused.get_or_insert(refusal);
            }
        }
        self
    }

    /// Adds `handler` to the registry under `job_type`, which must be valid and its own.
    fn insert(&mut self, job_type: &str, handler: Arc<dyn JobHandler>) -> Result<(), Refusal> {
        JobType::new(job_type)
            .validate()
            .map_err(Refusal::InvalidJobType)?;
        let handler_type = handler.job_type();
        if handler_type.as_str() != job_type {
            return Err(Refusal::JobTypeMismatch {
                declared: job_type.to_owned(),
                handler: handler_type.as_str().to_owned(),
            });
        }
        self.handlers
            .insert(job_type.to_owned(), handler)
            .map_err(Refusal::Registry)
    }

    /// Sets overrides for a job type registered (before or after) with [`Self::job`].
    pub fn definition_overrides(mut self, job_type: &str, overrides: JobDefaults) -> Self {
        self.pending_overrides
            .push((job_type.to_owned(), overrides));
        self
    }

    /// Declares a schedule for a job type registered earlier in the chain: the membership check
    /// happens at this call (a schedule declared before its `.job(...)` is a mistake), and the
    /// mistake is reported by the sync calls.
    pub fn schedule(self, spec: CatalogJobScheduleSpec<'_>) -> Self {
        self.schedule_in(spec, "UTC")
    }

    /// Like [`schedule`](Self::schedule), with the cron expression evaluated in the IANA time
    /// zone `time_zone` (`Europe/Berlin`): fires are wall-clock times there, computed across
    /// daylight-saving changes. An unknown name fails the sync with
    /// `job_schedule.invalid_time_zone`.
    pub fn schedule_in(mut self, spec: CatalogJobScheduleSpec<'_>, time_zone: &str) -> Self {
        if !self.entries.iter().any(|e| e.job_type == spec.job_type) {
            self.early_schedules
                .push((spec.name.to_owned(), spec.job_type.to_owned()));
        }
        self.schedules.push(CatalogSchedule {
            name: spec.name.to_owned(),
            job_type: spec.job_type.to_owned(),
            cron_expr: spec.cron_expr.to_owned(),
            payload_template: spec.payload_template.clone(),
            is_active: spec.is_active,
            organization_id: spec.organization_id,
            max_jitter_seconds: spec.max_jitter_seconds,
            next_fire_at: spec.next_fire_at,
            time_zone: time_zone.to_owned(),
        });
        self
    }

    fn validate_schedules(&self) -> Result<(), CatalogError> {
        if let Some((name, job_type)) = self.early_schedules.first() {
            return Err(CatalogError::ScheduleUnknownJobType {
                name: name.clone(),
                job_type: job_type.clone(),
            });
        }
        let mut names = BTreeSet::new();
        for schedule in &self.schedules {
            if !names.insert(schedule.name.as_str()) {
                return Err(CatalogError::DuplicateSchedule {
                    name: schedule.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The exact-sync scope made of this catalog's schedule names.
    pub fn schedule_sync_scope(&self) -> Result<JobCatalogScheduleSyncScope, CatalogError> {
        self.validate_schedules()?;
        JobCatalogScheduleSyncScope::new(self.schedules.iter().map(|s| s.name.clone()))
    }

    /// Syncs the catalog's schedules: creates missing ones, applies every spec's `is_active`
    /// (an admin pause is overwritten), and keeps each cursor while its cron is unchanged.
    pub async fn sync_schedules(&self, pool: &PgPool) -> Result<(), CatalogError> {
        self.validate_schedules()?;
        let upserts: Vec<JobScheduleUpsert<'_>> =
            self.schedules.iter().map(CatalogSchedule::upsert).collect();
        sync_job_schedules(pool, &upserts, None).await?;
        Ok(())
    }

    /// Syncs schedule specs assembled at startup (from config, flags, tenants) rather than
    /// declared in the catalog chain.
    pub async fn sync_schedules_with(
        pool: &PgPool,
        specs: &[CatalogJobScheduleSpec<'_>],
    ) -> Result<(), CatalogError> {
        let upserts: Vec<JobScheduleUpsert<'_>> =
            specs.iter().map(CatalogJobScheduleSpec::upsert).collect();
        sync_job_schedules(pool, &upserts, None).await?;
        Ok(())
    }

    /// Like [`Self::sync_schedules`], and deactivates active schedules of `scope` that the
    /// catalog lacks; returns their names.
    pub async fn sync_schedules_exact(
        &self,
        pool: &PgPool,
        scope: &JobCatalogScheduleSyncScope,
    ) -> Result<Vec<String>, CatalogError> {
        self.validate_schedules()?;
        let upserts: Vec<JobScheduleUpsert<'_>> =
            self.schedules.iter().map(CatalogSchedule::upsert).collect();
        Ok(sync_job_schedules(pool, &upserts, Some(scope.names())).await?)
    }

    /// Exact sync of an explicit spec list against an explicit scope.
    pub async fn sync_schedules_exact_with(
        pool: &PgPool,
        specs: &[CatalogJobScheduleSpec<'_>],
        scope: &JobCatalogScheduleSyncScope,
    ) -> Result<Vec<String>, CatalogError> {
        let upserts: Vec<JobScheduleUpsert<'_>> =
            specs.iter().map(CatalogJobScheduleSpec::upsert).collect();
        Ok(sync_job_schedules(pool, &upserts, Some(scope.names())).await?)
    }

    /// The registered job types, in registration order.
    pub fn job_types(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.job_type.clone()).collect()
    }

    /// The declared schedules, in declaration order.
    pub fn schedules(&self) -> &[CatalogSchedule] {
        &self.schedules
    }

    /// Reports the first mistake made while building the catalog.
    pub fn validate(&self) -> Result<(), CatalogError> {
        self.definitions().map(|_| ())
    }

    /// The handlers by job type: what a worker runs. Entries [`Self::validate`] refuses are
    /// not in it.
    pub fn handlers(&self) -> &JobRegistry {
        &self.handlers
    }

    /// The effective definition of every entry (defaults, then overrides), validated.
    pub fn definitions(&self) -> Result<Vec<JobDefinitionUpsert<'_>>, CatalogError> {
        if let Some(refused) = &self.refused {
            return Err(refused.clone().into());
        }
        check_positive("*", &self.defaults)?;
        for (job_type, _) in &self.pending_overrides {
            if !self.entries.iter().any(|e| &e.job_type == job_type) {
                return Err(CatalogError::UnknownJobType {
                    job_type: job_type.clone(),
                });
            }
        }
        let mut definitions = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let overrides = self.overrides_of(entry);
            check_positive(&entry.job_type, &overrides)?;
            let definition = JobDefinitionUpsert::new(entry.job_type.as_str())
                .values(overrides.or(self.defaults));
            definitions.push(definition);
        }
        Ok(definitions)
    }

    /// An entry's own overrides, with those given by [`Self::definition_overrides`] on top.
    fn overrides_of(&self, entry: &CatalogEntry) -> JobDefaults {
        self.pending_overrides
            .iter()
            .filter(|(job_type, _)| job_type == &entry.job_type)
            .fold(entry.overrides, |acc, (_, more)| more.or(acc))
    }

    /// Refuses a job type the catalog does not register or whose effective definition is
    /// disabled.
    fn check_enqueueable(&self, job_type: &str) -> Result<(), CatalogError> {
        let entry = self
            .entries
            .iter()
            .find(|entry| entry.job_type == job_type)
            .ok_or_else(|| CatalogError::UnknownJobType {
                job_type: job_type.to_owned(),
            })?;
        if self.overrides_of(entry).or(self.defaults).enabled == Some(false) {
            return Err(CatalogError::JobTypeDisabled {
                job_type: job_type.to_owned(),
            });
        }
        Ok(())
    }

    /// A catalog-validated enqueue request: refuses, before any SQL, a job type the catalog
    /// does not register (`catalog.unknown_job_type`) or whose effective definition is
    /// disabled (`catalog.job_type_disabled`). Hand the request to
    /// [`enqueue_job`](crate::postgres::jobs::enqueue_job) or
    /// [`record_job_enqueue_intent`](crate::postgres::jobs::record_job_enqueue_intent); a
    /// definition an operator disabled in the database is refused there.
    ///
    /// ```
    /// # use runledger_engine::core::prelude::*;
    /// # struct SendEmail;
    /// # #[async_trait]
    /// # impl JobHandler for SendEmail {
    /// #     fn job_type(&self) -> JobType<'static> { JobType::new("emails.send") }
    /// #     async fn execute(&self, _: JobContext, _: serde_json::Value) -> Result<JobCompletion, JobFailure> {
    /// #         Ok(JobCompletion::success())
    /// #     }
    /// # }
    /// use runledger_engine::runtime::catalog::JobCatalog;
    ///
    /// let catalog = JobCatalog::new().handler(SendEmail);
    /// let payload = serde_json::json!({"to": "ada@example.com"});
    /// let request = catalog.job_enqueue("emails.send", &payload).unwrap().priority(5);
    /// assert_eq!(request.priority, Some(5));
    ///
    /// let typo = catalog.job_enqueue("email.send", &payload).unwrap_err();
    /// assert_eq!(typo.code(), "catalog.unknown_job_type");
    /// ```
    pub fn job_enqueue<'a>(
        &self,
        job_type: &'a str,
        payload: &'a Value,
    ) -> Result<JobEnqueue<'a>, CatalogError> {
        self.check_enqueueable(job_type)?;
        Ok(JobEnqueue::new(job_type, payload))
    }

    /// A catalog-validated workflow job step: like [`Self::job_enqueue`], refuses an
    /// unregistered or disabled job type before any SQL, and returns the step builder to
    /// finish (dependencies, priority, …) and add to a
    /// [`WorkflowRunEnqueueBuilder`](crate::core::jobs::WorkflowRunEnqueueBuilder).
    pub fn workflow_step<'a>(
        &self,
        step_key: &'a str,
        job_type: &'a str,
        payload: &'a Value,
    ) -> Result<WorkflowStepEnqueueBuilder<'a>, CatalogError> {
        self.check_enqueueable(job_type)?;
        Ok(WorkflowStepEnqueueBuilder::new(
            StepKey::new(step_key),
            JobType::new(job_type),
            payload,
        ))
    }

    /// Additive sync: inserts missing definitions and restores the fields the catalog owns
    /// (version, attempts, timeout, priority, retention) on existing ones. A definition an operator
    /// disabled stays disabled; one the catalog disables is disabled. Rows the catalog does not
    /// mention are left alone. One statement.
    pub async fn sync_definitions(&self, pool: &PgPool) -> Result<(), CatalogError> {
        let definitions = self.definitions()?;
        sync_job_definitions(pool, &definitions, None).await?;
        Ok(())
    }

    /// Exact sync: like [`Self::sync_definitions`], but enabled state is restored from the
    /// catalog, and enabled definitions inside `scope` that the catalog lacks are disabled.
    /// Returns the job types it disabled. Refuses (changing nothing) to disable a definition
    /// that active schedules still use.
    pub async fn sync_definitions_exact(
        &self,
        pool: &PgPool,
        scope: &JobCatalogSyncScope,
    ) -> Result<Vec<String>, CatalogError> {
        let definitions = self.definitions()?;
        Ok(sync_job_definitions(pool, &definitions, Some(scope.job_types())).await?)
    }
}

fn check_positive(job_type: &str, values: &JobDefaults) -> Result<(), CatalogError> {
    match values.non_positive_field() {
        Some(field) => Err(CatalogError::InvalidDefinitionValue {
            job_type: job_type.to_owned(),
            field,
        }),
        None => Ok(()),
    }
}
