//! Contexts for calling a handler directly, with the shared state and attempt a test chooses.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::JobContext;
use crate::context::Data;
use crate::engine::core::jobs::{JobContext as EngineContext, JobId, JobType};

/// Builds the [`JobContext`] a `#[job]` fn receives, so that a handler runs as a plain async
/// fn call, without a database: with the shared state a worker would give it
/// ([`with_data`](Self::with_data)), an attempt number, an organization, and a cancellation
/// token the test controls. Prerequisite outputs are the fn's `#[output(..)]` arguments: pass
/// them directly.
///
/// ```
/// use runledger::prelude::*;
/// use runledger::testing::TestContext;
///
/// struct Weights { title: usize }
///
/// #[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
/// #[job] async fn score(
///     ctx: JobContext,
///     #[output(Research::CRAWL)] page: String,
/// ) -> Result<usize, JobError> {
///     Ok(page.len() * ctx.data::<Weights>()?.title)
/// }
///
/// #[workflow(name = "research")]
/// struct Research {
///     crawl: Crawl,
///     #[after(crawl)]
///     #[result]
///     score: Score,
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ctx = TestContext::for_job::<Score>().with_data(Weights { title: 2 }).build();
/// assert_eq!(score(ctx, "<html>".to_owned()).await.unwrap(), 12);
///
/// // Without the state, the handler fails as under a worker that was not given it.
/// let err = score(TestContext::for_job::<Score>().build(), String::new()).await.unwrap_err();
/// assert_eq!(err.code(), "job.data_missing");
/// # });
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct TestContext {
    job_type: &'static str,
    attempt: i32,
    max_attempts: i32,
    organization_id: Option<uuid::Uuid>,
    data: Data,
    cancellation: CancellationToken,
}

impl Default for TestContext {
    fn default() -> Self {
        Self::new()
    }
}

impl TestContext {
    /// A context for job type `test`, attempt 1 of 1, no organization, no shared state.
    pub fn new() -> Self {
        Self {
            job_type: "test",
            attempt: 1,
            max_attempts: 1,
            organization_id: None,
            data: Data::default(),
            cancellation: CancellationToken::new(),
        }
    }

    /// A context for job `J` (its type name and its configured `max_attempts`).
    pub fn for_job<J: crate::Job>() -> Self {
        Self {
            job_type: J::NAME,
            max_attempts: J::DEFAULTS.max_attempts.unwrap_or(1),
            ..Self::new()
        }
    }

    /// Shares `value` with the handler, as [`WorkerBuilder::data`](crate::WorkerBuilder::data)
    /// does: `ctx.data::<T>()` returns it.
    pub fn with_data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Uses `token` as the attempt's cancellation token, so that the test can fire it (as a
    /// lost lease, a timeout or a shutdown would) and watch the handler stop.
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = token;
        self
    }

    /// Which attempt this is, and of how many (`ctx.attempt()`, `ctx.is_last_attempt()`).
    pub fn attempt(mut self, attempt: i32, max_attempts: i32) -> Self {
        self.attempt = attempt;
        self.max_attempts = max_attempts;
        self
    }

    /// The organization the job belongs to.
    pub fn organization(mut self, organization_id: uuid::Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// The context to pass to the handler.
    pub fn build(self) -> JobContext {
        let mut inner = EngineContext::new(
            JobId::new_v7(),
            JobType::new(self.job_type),
            self.attempt,
            self.max_attempts,
            "test",
        );
        inner.organization_id = self.organization_id;
        inner.cancellation = self.cancellation;
        JobContext::with_data(inner, Arc::new(self.data))
    }
}

impl From<TestContext> for JobContext {
    fn from(context: TestContext) -> Self {
        context.build()
    }
}
