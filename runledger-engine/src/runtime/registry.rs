//! Handlers by job type.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::core::jobs::IdentifierError;
pub use crate::core::jobs::JobHandler;

/// Why a handler could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two handlers claim the same job type.
    #[error("a handler for job type `{job_type}` is already registered")]
    DuplicateJobType {
        /// The contested job type.
        job_type: String,
    },
    /// The handler's job type is blank or too long.
    #[error("invalid handler job type: {0}")]
    InvalidJobType(#[from] IdentifierError),
}

impl RegistryError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DuplicateJobType { .. } => "registry.duplicate_job_type",
            Self::InvalidJobType(err) => err.code(),
        }
    }
}

/// Handlers keyed by the job type they run. The worker claims only the types registered here.
///
/// Prefer [`JobCatalog`](crate::runtime::catalog::JobCatalog), which also keeps job
/// definitions in step; use a bare registry when definitions are managed elsewhere.
///
/// ```
/// use runledger_engine::core::prelude::*;
/// use runledger_engine::runtime::registry::JobRegistry;
///
/// struct Noop;
///
/// #[async_trait]
/// impl JobHandler for Noop {
///     fn job_type(&self) -> JobType<'static> {
///         JobType::new("noop")
///     }
///     async fn execute(&self, _: JobContext, _: serde_json::Value) -> Result<JobCompletion, JobFailure> {
///         Ok(JobCompletion::success())
///     }
/// }
///
/// let mut registry = JobRegistry::new();
/// registry.register(Noop).unwrap();
/// assert_eq!(registry.register(Noop).unwrap_err().code(), "registry.duplicate_job_type");
/// assert_eq!(registry.job_types(), vec!["noop".to_owned()]);
/// ```
#[derive(Clone, Default)]
pub struct JobRegistry {
    handlers: BTreeMap<String, Arc<dyn JobHandler>>,
}

impl std::fmt::Debug for JobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRegistry")
            .field("job_types", &self.handlers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl JobRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a handler under its own [`JobHandler::job_type`].
    pub fn register(&mut self, handler: impl JobHandler) -> Result<(), RegistryError> {
        self.register_arc(Arc::new(handler))
    }

    /// Registers a shared handler under its own job type.
    pub fn register_arc(&mut self, handler: Arc<dyn JobHandler>) -> Result<(), RegistryError> {
        let job_type = handler.job_type();
        job_type.validate()?;
        self.insert(job_type.as_str().to_owned(), handler)
    }

    pub(crate) fn insert(
        &mut self,
        job_type: String,
        handler: Arc<dyn JobHandler>,
    ) -> Result<(), RegistryError> {
        if self.handlers.contains_key(&job_type) {
            return Err(RegistryError::DuplicateJobType { job_type });
        }
        self.handlers.insert(job_type, handler);
        Ok(())
    }

    /// The handler for `job_type`.
    pub fn get(&self, job_type: &str) -> Option<&Arc<dyn JobHandler>> {
        self.handlers.get(job_type)
    }

    /// Registered job types, sorted.
    pub fn job_types(&self) -> Vec<String> {
        self.handlers.keys().cloned().collect()
    }

    /// Number of handlers.
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether no handler is registered.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }
}
