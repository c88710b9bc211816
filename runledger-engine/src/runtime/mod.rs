//! The worker runtime: handler registry and catalog, configuration, the worker, intent
//! promoter, scheduler, reaper, pruner and queue depth loops, lifecycle observers and the
//! [`Supervisor`] that runs them.

pub mod catalog;
pub mod config;
pub mod error;
pub mod intent_promoter;
mod metrics;
pub mod observer;
mod presence;
pub mod pruner;
pub mod queue_depth;
pub mod queues;
pub mod reaper;
pub mod registry;
pub mod scheduler;
pub mod supervisor;
mod tasks;
pub mod worker;

pub use error::{
    Error, IntentPromoterError, ReaperError, Result, RuntimeError, RuntimeLoopExit, SchedulerError,
    WorkerError,
};
pub use observer::{
    JobCompletionPersistFailedEvent, JobCompletionPersistenceOperation, JobContinuedEvent,
    JobFailedEvent, JobFailureDisposition, JobLeaseLostEvent, JobLeaseReapedDisposition,
    JobLeaseReapedEvent, JobLifecycleObserver, JobLifecycleObservers, JobRunningEvent,
    JobSucceededEvent, ObservedJob,
};
pub use supervisor::{Supervisor, SupervisorBuilder, SupervisorShutdown};

/// Common imports for worker processes: the Supervisor, catalog, registry and config.
///
/// ```
/// use runledger_engine::runtime::prelude::*;
///
/// let catalog = JobCatalog::new();
/// assert!(catalog.job_types().is_empty());
/// ```
pub mod prelude {
    pub use super::catalog::{
        CatalogJobScheduleSpec, JobCatalog, JobCatalogDefaults, JobCatalogDefinitionOverrides,
        JobCatalogScheduleSyncScope, JobCatalogSyncScope,
    };
    pub use super::config::JobsConfig;
    pub use super::registry::{JobHandler, JobRegistry};
    pub use super::{JobLifecycleObserver, RuntimeError, Supervisor, SupervisorBuilder};
}
