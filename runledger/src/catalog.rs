//! What `#[job]`, `#[workflow]` and `#[schedule]` register through `inventory`, and the
//! engine [`JobCatalog`] a [`Worker`](crate::Worker) builds from it: the one container of its
//! handlers, in which each name is claimed once.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::context::Data;
use crate::engine::core::jobs::JobDefaults;
use crate::engine::runtime::catalog::{CatalogJobScheduleSpec, JobCatalog};
use crate::engine::runtime::registry::JobHandler;
use crate::error::Error;
use crate::job::Job;
use crate::workflow::Workflow;

/// Where a macro was used, for startup errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SourceLocation {
    file: &'static str,
    line: u32,
    column: u32,
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Makes a typed job's engine handler around a worker's shared state.
type HandlerFactory = fn(Arc<Data>) -> Arc<dyn JobHandler>;

/// A job type registered by `#[job]` (generated code only).
#[doc(hidden)]
pub struct JobRegistration {
    name: &'static str,
    defaults: JobDefaults,
    handler: HandlerFactory,
    location: SourceLocation,
}

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

/// A workflow type registered by `#[workflow]` (generated code only): workflows have no
/// handler, but two with one name would mix their runs.
#[doc(hidden)]
pub struct WorkflowRegistration {
    name: &'static str,
    location: SourceLocation,
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
    name: &'static str,
    cron: &'static str,
    time_zone: &'static str,
    jitter_seconds: i32,
    active: bool,
    payload: fn() -> Result<(&'static str, Value), String>,
    location: SourceLocation,
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

/// An engine handler given to [`WorkerBuilder::handler`](crate::WorkerBuilder::handler).
pub(crate) struct EngineHandler {
    pub(crate) name: String,
    pub(crate) handler: Arc<dyn JobHandler>,
    pub(crate) defaults: JobDefaults,
    pub(crate) rust_type: &'static str,
}

/// The names already taken in one namespace (job types, workflows, schedules), each with a
/// description of what took it, and the error a second claim is.
struct Names {
    taken: BTreeMap<String, String>,
    duplicate: fn(name: String, first: String, second: String) -> Error,
}

impl Names {
    fn new(duplicate: fn(String, String, String) -> Error) -> Self {
        Self {
            taken: BTreeMap::new(),
            duplicate,
        }
    }

    /// Takes `name` for `origin`; fails naming both when something took it first.
    fn claim(&mut self, name: &str, origin: String) -> Result<(), Error> {
        match self.taken.get(name) {
            Some(first) => Err((self.duplicate)(name.to_owned(), first.clone(), origin)),
            None => {
                self.taken.insert(name.to_owned(), origin);
                Ok(())
            }
        }
    }
}

/// Registrations sorted by name, then place, so that a duplicate is reported the same way
/// whatever order the linker chose.
fn sorted<T: inventory::Collect>(
    key: impl Fn(&T) -> (&'static str, SourceLocation),
) -> Vec<&'static T> {
    let mut all: Vec<&'static T> = inventory::iter::<T>().collect();
    all.sort_by_key(|registration| key(registration));
    all
}

/// The catalog of a worker: every `#[job]` (its handler sharing `data`), the `engine`
/// handlers, and every `#[schedule]`. Fails with
/// `worker.duplicate_job`, `worker.duplicate_workflow` or `worker.duplicate_schedule`, naming
/// both registrations, or with `worker.schedule_payload_invalid`.
pub(crate) fn build(data: &Arc<Data>, engine: Vec<EngineHandler>) -> Result<JobCatalog, Error> {
    let mut catalog = JobCatalog::new();
    let mut job_types = Names::new(|name, first, second| Error::DuplicateJob {
        name,
        first,
        second,
    });
    for job in sorted::<JobRegistration>(|r| (r.name, r.location)) {
        job_types.claim(job.name, format!("#[job] at {}", job.location))?;
        catalog = catalog.shared_job(job.name, (job.handler)(Arc::clone(data)), job.defaults);
    }
    for handler in engine {
        job_types.claim(
            &handler.name,
            format!("the engine handler `{}`", handler.rust_type),
        )?;
        catalog = catalog.shared_job(&handler.name, handler.handler, handler.defaults);
    }

    let mut workflows = Names::new(|name, first, second| Error::DuplicateWorkflow {
        name,
        first,
        second,
    });
    for workflow in sorted::<WorkflowRegistration>(|r| (r.name, r.location)) {
        workflows.claim(workflow.name, workflow.location.to_string())?;
    }

    let mut schedules = Names::new(|name, first, second| Error::DuplicateSchedule {
        name,
        first,
        second,
    });
    for schedule in sorted::<ScheduleRegistration>(|r| (r.name, r.location)) {
        schedules.claim(schedule.name, schedule.location.to_string())?;
        let (job_type, payload) =
            (schedule.payload)().map_err(|message| Error::SchedulePayload {
                name: schedule.name.to_owned(),
                location: schedule.location.to_string(),
                message,
            })?;
        let spec = CatalogJobScheduleSpec {
            name: schedule.name,
            job_type,
            cron_expr: schedule.cron,
            payload_template: &payload,
            is_active: schedule.active,
            organization_id: None,
            max_jitter_seconds: schedule.jitter_seconds,
            next_fire_at: None,
        };
        catalog = catalog.schedule_in(spec, schedule.time_zone);
    }
    Ok(catalog)
}
