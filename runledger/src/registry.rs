//! What `#[job]`, `#[workflow]` and `#[schedule]` register through `inventory`, and how a
//! worker collects it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::context::Data;
use crate::engine::core::jobs::JobDefaults;
use crate::engine::runtime::registry::JobHandler;
use crate::error::Error;
use crate::job::Job;
use crate::workflow::Workflow;

/// Where a macro was used, for startup errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SourceLocation {
    /// The source file.
    pub file: &'static str,
    /// The line.
    pub line: u32,
    /// The column.
    pub column: u32,
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A job type registered by `#[job]` (generated code only).
#[doc(hidden)]
pub struct JobRegistration {
    pub(crate) name: &'static str,
    pub(crate) defaults: JobDefaults,
    pub(crate) handler: HandlerFactory,
    pub(crate) location: SourceLocation,
}

/// Makes a typed job's engine handler around a worker's shared state.
type HandlerFactory = fn(Arc<Data>) -> Arc<dyn JobHandler>;

impl JobRegistration {
    #[doc(hidden)]
    pub const fn new<J: Job>(
        handler: HandlerFactory,
        file: &'static str,
        line: u32,
        column: u32,
    ) -> Self {
        Self {
            name: J::NAME,
            defaults: J::DEFAULTS,
            handler,
            location: SourceLocation { file, line, column },
        }
    }
}

inventory::collect!(JobRegistration);

/// A workflow type registered by `#[workflow]` (generated code only).
#[doc(hidden)]
pub struct WorkflowRegistration {
    pub(crate) name: &'static str,
    pub(crate) location: SourceLocation,
}

impl WorkflowRegistration {
    #[doc(hidden)]
    pub const fn new<W: Workflow>(file: &'static str, line: u32, column: u32) -> Self {
        Self {
            name: W::NAME,
            location: SourceLocation { file, line, column },
        }
    }
}

inventory::collect!(WorkflowRegistration);

/// A schedule registered by `#[schedule]` (generated code only).
#[doc(hidden)]
pub struct ScheduleRegistration {
    pub(crate) name: &'static str,
    pub(crate) cron: &'static str,
    pub(crate) time_zone: &'static str,
    pub(crate) jitter_seconds: i32,
    pub(crate) active: bool,
    pub(crate) payload: fn() -> Result<(&'static str, Value), String>,
    pub(crate) location: SourceLocation,
}

impl ScheduleRegistration {
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        name: &'static str,
        cron: &'static str,
        time_zone: &'static str,
        jitter_seconds: i32,
        active: bool,
        payload: fn() -> Result<(&'static str, Value), String>,
        file: &'static str,
        line: u32,
        column: u32,
    ) -> Self {
        Self {
            name,
            cron,
            time_zone,
            jitter_seconds,
            active,
            payload,
            location: SourceLocation { file, line, column },
        }
    }
}

inventory::collect!(ScheduleRegistration);

/// One registered job type, as [`registered_jobs`] lists it, with the engine handler that
/// runs it.
#[derive(Clone)]
#[non_exhaustive]
pub struct RegisteredJob {
    /// The job type.
    pub name: &'static str,
    /// Its definition values.
    pub defaults: JobDefaults,
    /// Where `#[job]` was used.
    pub location: SourceLocation,
    make_handler: HandlerFactory,
}

impl RegisteredJob {
    /// The engine handler that runs this job: decodes the payload, calls the `#[job]` fn and
    /// stores its output. Hand it to an engine `JobCatalog` or `JobRegistry` to run typed jobs
    /// under your own `Supervisor`. Its handler has no shared state: `ctx.data::<T>()` fails
    /// with `job.data_missing` (a [`Worker`](crate::Worker) passes its
    /// [`data`](crate::WorkerBuilder::data)).
    pub fn handler(&self) -> Arc<dyn JobHandler> {
        (self.make_handler)(Arc::default())
    }

    /// The handler with a worker's shared state.
    pub(crate) fn handler_with(&self, data: &Arc<Data>) -> Arc<dyn JobHandler> {
        (self.make_handler)(Arc::clone(data))
    }
}

impl fmt::Debug for RegisteredJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredJob")
            .field("name", &self.name)
            .field("defaults", &self.defaults)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// One registered workflow type, as [`registered_workflows`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegisteredWorkflow {
    /// The workflow type.
    pub name: &'static str,
    /// Where `#[workflow]` was used.
    pub location: SourceLocation,
}

/// One registered schedule, as [`registered_schedules`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegisteredSchedule {
    /// The schedule name.
    pub name: &'static str,
    /// The job type each fire enqueues.
    pub job_name: &'static str,
    /// The cron expression.
    pub cron: &'static str,
    /// The IANA time zone it is evaluated in (`UTC` unless `tz = ".."` says otherwise).
    pub time_zone: &'static str,
    /// Jitter bound in seconds.
    pub jitter_seconds: i32,
    /// Whether it is active.
    pub active: bool,
    /// The payload template.
    pub payload: Value,
    /// Where `#[schedule]` was used.
    pub location: SourceLocation,
}

/// Every `#[job]` linked into this binary, sorted by name; fails with
/// `worker.duplicate_job` (naming both source locations) when two share a name.
///
/// ```standalone_crate
/// use runledger::prelude::*;
///
/// #[job(name = "docs.registered")]
/// async fn registered() -> Result<(), JobError> { Ok(()) }
///
/// let jobs = runledger::registered_jobs().unwrap();
/// assert!(jobs.iter().any(|job| job.name == "docs.registered"));
/// ```
pub fn registered_jobs() -> Result<Vec<RegisteredJob>, Error> {
    let mut jobs: BTreeMap<&'static str, RegisteredJob> = BTreeMap::new();
    let mut all: Vec<&JobRegistration> = inventory::iter::<JobRegistration>().collect();
    all.sort_by_key(|r| (r.name, r.location));
    for registration in all {
        if let Some(first) = jobs.get(registration.name) {
            return Err(Error::DuplicateJob {
                name: registration.name.to_owned(),
                first: format!("#[job] at {}", first.location),
                second: format!("#[job] at {}", registration.location),
            });
        }
        jobs.insert(
            registration.name,
            RegisteredJob {
                name: registration.name,
                defaults: registration.defaults,
                location: registration.location,
                make_handler: registration.handler,
            },
        );
    }
    Ok(jobs.into_values().collect())
}

/// Every `#[workflow]` linked into this binary, sorted by name; fails with
/// `worker.duplicate_workflow` (naming both source locations) when two share a name.
pub fn registered_workflows() -> Result<Vec<RegisteredWorkflow>, Error> {
    let mut all: Vec<&WorkflowRegistration> = inventory::iter::<WorkflowRegistration>().collect();
    all.sort_by_key(|r| (r.name, r.location));
    let mut workflows: Vec<RegisteredWorkflow> = Vec::with_capacity(all.len());
    for registration in all {
        if let Some(first) = workflows.last().filter(|w| w.name == registration.name) {
            return Err(Error::DuplicateWorkflow {
                name: registration.name.to_owned(),
                first: first.location.to_string(),
                second: registration.location.to_string(),
            });
        }
        workflows.push(RegisteredWorkflow {
            name: registration.name,
            location: registration.location,
        });
    }
    Ok(workflows)
}

/// Every `#[schedule]` linked into this binary, sorted by name, with its payload built; fails
/// with `worker.duplicate_schedule` or `worker.schedule_payload_invalid`.
pub fn registered_schedules() -> Result<Vec<RegisteredSchedule>, Error> {
    let mut all: Vec<&ScheduleRegistration> = inventory::iter::<ScheduleRegistration>().collect();
    all.sort_by_key(|r| (r.name, r.location));
    let mut schedules: Vec<RegisteredSchedule> = Vec::with_capacity(all.len());
    for registration in all {
        if let Some(first) = schedules.last().filter(|s| s.name == registration.name) {
            return Err(Error::DuplicateSchedule {
                name: registration.name.to_owned(),
                first: first.location.to_string(),
                second: registration.location.to_string(),
            });
        }
        let (job_name, payload) =
            (registration.payload)().map_err(|message| Error::SchedulePayload {
                name: registration.name.to_owned(),
                location: registration.location.to_string(),
                message,
            })?;
        schedules.push(RegisteredSchedule {
            name: registration.name,
            job_name,
            cron: registration.cron,
            time_zone: registration.time_zone,
            jitter_seconds: registration.jitter_seconds,
            active: registration.active,
            payload,
            location: registration.location,
        });
    }
    Ok(schedules)
}
