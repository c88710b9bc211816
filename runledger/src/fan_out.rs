//! Dynamic fan-out: a [`FanOut<J>`] step of a workflow is filled at run time by another step
//! with any number of `J` jobs ([`JobContext::fan_out`]); its output, which later steps read, is
//! the `Vec` of their outputs.
//!
//! Over the engine: a `FanOut` field is a fan-out step of the run (it runs no job). `fan_out`
//! fills it, in one idempotent `fill_fan_out`, with the children (`{key}/0`, `{key}/1`, ...),
//! which start once the calling step succeeds. Once every child has finished, the release
//! finishes the fan-out in the same transaction as the last child: with the children's outputs
//! in order, or failed with `workflow.fan_out_failed` when a child did not succeed (so
//! `#[after]` dependents are canceled and `#[after_terminal]` ones run).

use std::fmt;
use std::marker::PhantomData;

use crate::context::{JobContext, context_error};
use crate::error::JobError;
use crate::job::Job;
use crate::step::{Step, StepKind, WorkflowStep};

/// A workflow step filled at run time with any number of `J` jobs, chosen by another step of the
/// run with [`JobContext::fan_out`]; its output is the `Vec` of their outputs, in the order they
/// were given, which later steps read as `#[output(W::FIELD)] outputs: Vec<J::Output>`, or a
/// page at a time as [`Chunks<J::Output>`](Chunks).
///
/// The step that fans out must be one of the `FanOut`'s `#[after(..)]` prerequisites: the
/// children start once it succeeds, and if it fails the `FanOut` is canceled with it. If it
/// succeeds without filling the `FanOut`, the `FanOut` is empty. When a child fails for good,
/// the `FanOut` fails with `workflow.fan_out_failed`.
///
/// ```
/// use runledger::prelude::*;
///
/// #[job] async fn fetch(url: String) -> Result<usize, JobError> { Ok(url.len()) }
///
/// #[job]
/// async fn list(ctx: JobContext, site: String) -> Result<usize, JobError> {
///     let pages: Vec<Fetch> = (0..3).map(|n| Fetch { url: format!("{site}/{n}") }).collect();
///     ctx.fan_out(Crawl::PAGES, pages).await
/// }
///
/// #[job]
/// async fn total(#[output(Crawl::PAGES)] sizes: Vec<usize>) -> Result<usize, JobError> {
///     Ok(sizes.iter().sum())
/// }
///
/// #[workflow(name = "docs.crawl")]
/// struct Crawl {
///     list: List,
///     #[after(list)]
///     pages: FanOut<Fetch>,
///     #[after(pages)]
///     #[result]
///     total: Total,
/// }
/// # let _ = Crawl { list: List { site: String::new() }, pages: FanOut::new(), total: Total {} };
/// ```
pub struct FanOut<J> {
    _children: PhantomData<fn() -> J>,
}

impl<J> FanOut<J> {
    /// A fan-out, empty until a step of the run fills it.
    pub const fn new() -> Self {
        Self {
            _children: PhantomData,
        }
    }
}

impl<J> Default for FanOut<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J> Clone for FanOut<J> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<J> fmt::Debug for FanOut<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FanOut")
    }
}

/// Kind marker of a [`Step`] that is a [`FanOut`]: neither completed from outside nor run as
/// one job.
#[derive(Debug)]
pub enum FanOutStep {}

impl crate::step::sealed::Sealed for FanOutStep {}
impl StepKind for FanOutStep {}

impl<J: Job> WorkflowStep for FanOut<J> {
    type Output = Vec<J::Output>;
    type Kind = FanOutStep;
}

impl JobContext {
    /// Fills the [`FanOut`] step `step` of this step's workflow run with `children`: each runs
    /// as its own step once this step succeeds, and the `FanOut`'s output is the `Vec` of their
    /// outputs, in this order. Returns how many children were added. This step must be one of
    /// the `FanOut`'s `#[after(..)]` prerequisites (otherwise
    /// `workflow.fan_out_filler_not_prerequisite`).
    ///
    /// The children are taken from the iterator 5,000 at a time and written as they come, in
    /// one transaction that holds the run's row: any number fits in bounded memory, and the
    /// iterator should produce them without waiting on anything slow.
    ///
    /// Idempotent for a retried attempt: the same children again are accepted (nothing is added
    /// twice); other children fail with `workflow.append_conflicting_retry`, as does filling a
    /// `FanOut` twice. Fails with `workflow.not_a_workflow_step` outside a workflow step,
    /// `workflow.append_run_finished` once the run has finished, and `payload.serialize_failed`
    /// when a child cannot be serialized.
    pub async fn fan_out<W, J, I>(
        &self,
        step: Step<W, FanOut<J>>,
        children: I,
    ) -> Result<usize, JobError>
    where
        J: Job,
        I: IntoIterator<Item = J>,
        I::IntoIter: Send,
    {
        if self.step_key().is_none() {
            return Err(JobError::terminal("fan_out is called by a workflow step")
                .with_code("workflow.not_a_workflow_step"));
        }
        let key = step.key();
        let mut count = 0;
        let mut children = children.into_iter().map(|child| {
            count += 1;
            serde_json::to_value(&child).map_err(|e| {
                format!(
                    "child {} of `{key}` could not be serialized: {e}",
                    count - 1
                )
            })
        });
        self.engine()
            .fill_fan_out(key, J::NAME, &mut children)
            .await
            .map_err(|e| context_error(&e))?;
        drop(children);
        Ok(count)
    }
}

/// The outputs of a [`FanOut`]'s children read a page at a time, for a join whose fan-out is
/// too large to hold at once: declare the argument as `#[output(W::FIELD)] outputs: Chunks<T>`
/// where `W::FIELD` is a `FanOut<J>` and `T` is `J::Output`. Each [`next`](Self::next) reads
/// one page (1,000 outputs unless [`page_size`](Self::page_size) says otherwise) with one
/// query; nothing is read before the first call.
///
/// ```
/// use runledger::prelude::*;
///
/// #[job] async fn measure(n: u64) -> Result<u64, JobError> { Ok(n * 2) }
///
/// #[job]
/// async fn plan(ctx: JobContext, count: u64) -> Result<usize, JobError> {
///     ctx.fan_out(Survey::SAMPLES, (0..count).map(|n| Measure { n })).await
/// }
///
/// #[job]
/// async fn sum(#[output(Survey::SAMPLES)] mut samples: Chunks<u64>) -> Result<u64, JobError> {
///     let mut total = 0;
///     while let Some(page) = samples.next().await? {
///         total += page.iter().sum::<u64>();
///     }
///     Ok(total)
/// }
///
/// #[workflow(name = "docs.survey")]
/// struct Survey {
///     plan: Plan,
///     #[after(plan)]
///     samples: FanOut<Measure>,
///     #[after(samples)]
///     #[result]
///     sum: Sum,
/// }
/// # let _ = Survey { plan: Plan { count: 3 }, samples: FanOut::new(), sum: Sum {} };
/// ```
pub struct Chunks<T> {
    ctx: JobContext,
    key: &'static str,
    next: u64,
    page: u64,
    _outputs: PhantomData<fn() -> T>,
}

/// Children's outputs read per page by [`Chunks`], unless [`Chunks::page_size`] says otherwise.
const CHUNK: u64 = 1_000;

impl<T: serde::de::DeserializeOwned> Chunks<T> {
    pub(crate) fn new(ctx: JobContext, key: &'static str) -> Self {
        Self {
            ctx,
            key,
            next: 0,
            page: CHUNK,
            _outputs: PhantomData,
        }
    }

    /// Reads `size` outputs per page from now on (at least one).
    #[must_use]
    pub fn page_size(mut self, size: u64) -> Self {
        self.page = size.max(1);
        self
    }

    /// The next page of outputs, in the children's order; `None` once every child's output
    /// has been read. A page that cannot be read (the database) fails retryably, an output
    /// that does not decode into `T` terminally with `job.output_invalid`.
    pub async fn next(&mut self) -> Result<Option<Vec<T>>, JobError> {
        let page = self
            .ctx
            .fan_out_outputs(self.key, self.next, self.page)
            .await?;
        if page.outputs.is_empty() {
            return Ok(None);
        }
        self.next += page.outputs.len() as u64;
        page.outputs
            .into_iter()
            .map(|stored| crate::reads::decode(self.key, stored))
            .collect::<Result<Vec<T>, JobError>>()
            .map(Some)
    }
}

impl<T> fmt::Debug for Chunks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunks")
            .field("fan_out", &self.key)
            .field("next", &self.next)
            .field("page", &self.page)
            .finish()
    }
}
