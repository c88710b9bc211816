//! Reads of prerequisite outputs, checked by the compiler.
//!
//! A `#[job]` fn receives the outputs it needs as arguments marked `#[output(Workflow::STEP)]`.
//! `#[job]` checks each argument's type against the step's output type (`Option<T>` reads a
//! step that may have failed) and records the reads in [`Job::READS`](crate::Job); each
//! `#[workflow]` that uses the job then checks, in a constant evaluated by the compiler, that
//! every read names one of that step's prerequisites in that workflow, and that an
//! `#[after_terminal]` prerequisite is read as an `Option`.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::JobContext;
use crate::error::JobError;
use crate::fan_out::{Chunks, FanOut};
use crate::job::{Job, ReadDecl};
use crate::output;
use crate::step::{External, Step, WorkflowStep};
use crate::workflow::Workflow;

/// Declares an `#[output(..)]` argument of type `T` that reads `step`; the compiler checks
/// here that `T` can hold the step's output (generated code only).
#[doc(hidden)]
pub const fn declare_read<W, S, T>(step: Step<W, S>, _: PhantomData<T>) -> ReadDecl
where
    W: Workflow,
    S: WorkflowStep,
    T: StepOutput<S::Output>,
{
    ReadDecl {
        workflow: W::NAME,
        key: step.key(),
        optional: T::OPTIONAL,
        paged: T::PAGED,
    }
}

/// The type an `#[output(..)]` argument can have for a step whose output is `O`: `O` itself;
/// `Option<O>`, which reads `None` when the step stored no output (it did not succeed); or, for
/// a [`FanOut`]'s `Vec<T>`, [`Chunks<T>`], which reads the children's outputs a page at a time.
#[diagnostic::on_unimplemented(
    message = "an `#[output(..)]` argument of type `{Self}` cannot hold this step's output, `{O}`",
    label = "the step produces `{O}`",
    note = "declare the argument as `{O}`, or as `Option<{O}>` for an #[after_terminal] prerequisite that may have failed"
)]
pub trait StepOutput<O>: Sized {
    /// Whether a missing output reads as `None`.
    const OPTIONAL: bool;

    /// Whether the argument reads its pages itself, so nothing is fetched for it before the fn
    /// runs.
    const PAGED: bool = false;

    /// The argument for step `key`, from the outputs fetched before the fn runs.
    fn read(key: &'static str, outputs: &mut ReadOutputs) -> Result<Self, JobError>;
}

impl<O: DeserializeOwned> StepOutput<O> for O {
    const OPTIONAL: bool = false;

    fn read(key: &'static str, outputs: &mut ReadOutputs) -> Result<Self, JobError> {
        decode(key, outputs.take(key))
    }
}

impl<O: DeserializeOwned> StepOutput<O> for Option<O> {
    const OPTIONAL: bool = true;

    fn read(key: &'static str, outputs: &mut ReadOutputs) -> Result<Self, JobError> {
        outputs
            .take(key)
            .map(|stored| decode(key, Some(stored)))
            .transpose()
    }
}

impl<T: DeserializeOwned> StepOutput<Vec<T>> for Chunks<T> {
    const OPTIONAL: bool = false;
    const PAGED: bool = true;

    fn read(key: &'static str, outputs: &mut ReadOutputs) -> Result<Self, JobError> {
        Ok(Chunks::new(outputs.ctx.clone(), key))
    }
}

/// Decodes the stored output of step `key` (`None`: it stored none); one that does not fit
/// fails terminally with `job.output_invalid`.
pub(crate) fn decode<O: DeserializeOwned>(key: &str, stored: Option<Value>) -> Result<O, JobError> {
    output::decode(key, stored).map_err(|e| JobError::coded_terminal("job.output_invalid", e))
}

/// The stored outputs of a job's `#[output(..)]` reads, fetched together before the fn runs,
/// one entry per read in the order of `Job::READS` (paged reads have none: they read their
/// pages themselves), and the context paged reads read with (generated code only). Each read
/// takes its entry, so no output is held twice or kept while the fn runs.
#[doc(hidden)]
pub struct ReadOutputs {
    ctx: JobContext,
    fetched: Vec<(&'static str, Option<Option<Value>>)>,
}

impl ReadOutputs {
    /// Reads the outputs of every step in `reads` that is not paged, with one statement.
    pub async fn fetch(ctx: &JobContext, reads: &[ReadDecl]) -> Result<Self, JobError> {
        let keys: Vec<&'static str> = reads
            .iter()
            .filter(|read| !read.paged)
            .map(|read| read.key)
            .collect();
        let stored = if keys.is_empty() {
            Vec::new()
        } else {
            let owned: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
            ctx.prerequisite_outputs(&owned).await?
        };
        Ok(Self {
            ctx: ctx.clone(),
            fetched: keys
                .into_iter()
                .zip(stored)
                .map(|(key, output)| (key, Some(output)))
                .collect(),
        })
    }

    /// Takes the first entry of step `key` not taken yet (`None`: the step stored no output).
    fn take(&mut self, key: &str) -> Option<Value> {
        self.fetched
            .iter_mut()
            .find(|(fetched, entry)| *fetched == key && entry.is_some())
            .and_then(|(_, entry)| entry.take())
            .flatten()
    }
}

/// One `#[output(..)]` argument to read: `step`, into a `T`. The generated code reads it
/// through [`ReadOk`] when `T` fits the step's output; otherwise the read declaration in
/// `Job::READS` reports the mistake, once, and [`ReadUnreadable`] keeps the rest of the
/// generated code compiling (generated code only).
#[doc(hidden)]
pub struct ReadProbe<W, S, T> {
    step: Step<W, S>,
    _into: PhantomData<fn() -> T>,
}

impl<W, S, T> ReadProbe<W, S, T> {
    /// The read of `step` into a `T`.
    pub const fn new(step: Step<W, S>, _: PhantomData<T>) -> Self {
        Self {
            step,
            _into: PhantomData,
        }
    }
}

/// Reads an argument whose type fits the step's output.
#[doc(hidden)]
pub trait ReadOk<T> {
    /// The stored output, decoded.
    fn read_output(&self, outputs: &mut ReadOutputs) -> Result<T, JobError>;
}

impl<W, S, T> ReadOk<T> for &ReadProbe<W, S, T>
where
    S: WorkflowStep,
    T: StepOutput<S::Output>,
{
    fn read_output(&self, outputs: &mut ReadOutputs) -> Result<T, JobError> {
        T::read(self.step.key(), outputs)
    }
}

/// The placeholder for an argument whose type does not fit; never compiled into a program.
#[doc(hidden)]
pub trait ReadUnreadable<T> {
    /// Fails.
    fn read_output(&self, _: &mut ReadOutputs) -> Result<T, JobError> {
        Err(JobError::terminal(
            "the argument cannot hold the step's output",
        ))
    }
}

impl<W, S, T> ReadUnreadable<T> for ReadProbe<W, S, T> {}

/// The reads of a `#[workflow]` field's type: a job's `#[output(..)]` arguments; none for a
/// gate, and none for a workflow (which `#[workflow]` refuses as a step with its own message).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a workflow step",
    label = "not a job",
    note = "a step's type is a payload struct generated by `#[job]` or a gate, `runledger::External<T>`"
)]
pub trait StepReads {
    /// The prerequisite outputs read.
    const READS: &'static [ReadDecl];
}

impl<J: Job> StepReads for J {
    const READS: &'static [ReadDecl] = J::READS;
}

impl<T> StepReads for External<T> {
    const READS: &'static [ReadDecl] = &[];
}

impl<J> StepReads for FanOut<J> {
    const READS: &'static [ReadDecl] = &[];
}

/// A step's edge to one prerequisite, as `#[workflow]` declares it (generated code only).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Edge {
    key: &'static str,
    terminal: bool,
}

impl Edge {
    /// `#[after(key)]`.
    pub const fn after(key: &'static str) -> Self {
        Self {
            key,
            terminal: false,
        }
    }

    /// `#[after_terminal(key)]`.
    pub const fn after_terminal(key: &'static str) -> Self {
        Self {
            key,
            terminal: true,
        }
    }
}

/// Longest message a failed check can report.
const MESSAGE_CAPACITY: usize = 512;

/// Why a step's reads do not fit its edges, built at compile time.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct ReadProblem {
    bytes: [u8; MESSAGE_CAPACITY],
    len: usize,
}

impl ReadProblem {
    const fn new(parts: &[&str]) -> Self {
        let mut problem = Self {
            bytes: [0; MESSAGE_CAPACITY],
            len: 0,
        };
        let mut part = 0;
        while part < parts.len() {
            let bytes = parts[part].as_bytes();
            let mut i = 0;
            while i < bytes.len() && problem.len < MESSAGE_CAPACITY {
                problem.bytes[problem.len] = bytes[i];
                problem.len += 1;
                i += 1;
            }
            part += 1;
        }
        problem
    }

    /// The message.
    pub const fn message(&self) -> &str {
        let (text, _) = self.bytes.split_at(self.len);
        match std::str::from_utf8(text) {
            Ok(text) => text,
            // Only whole names are copied, unless a message is cut at the capacity.
            Err(_) => "a step reads an output it cannot read",
        }
    }
}

/// Checks the reads of step `step` (of type `S`) of workflow `workflow` against its `edges`:
/// each read names a step of this workflow, that step is a prerequisite, and an
/// `#[after_terminal]` prerequisite is read as an `Option`. Evaluated by the compiler in a
/// constant that `#[workflow]` generates (generated code only).
#[doc(hidden)]
pub const fn check<S: StepReads>(
    workflow: &'static str,
    step: &'static str,
    edges: &[Edge],
) -> Option<ReadProblem> {
    let reads = S::READS;
    let mut i = 0;
    while i < reads.len() {
        let read = reads[i];
        if !str_eq(read.workflow, workflow) {
            return Some(ReadProblem::new(&[
                "step `",
                step,
                "` of workflow `",
                workflow,
                "` reads step `",
                read.key,
                "` of workflow `",
                read.workflow,
                "`, another workflow; a step reads only prerequisites of its own workflow",
            ]));
        }
        let mut edge = None;
        let mut j = 0;
        while j < edges.len() {
            if str_eq(edges[j].key, read.key) {
                edge = Some(edges[j]);
            }
            j += 1;
        }
        match edge {
            None => {
                return Some(ReadProblem::new(&[
                    "step `",
                    step,
                    "` reads the output of step `",
                    read.key,
                    "`, which is not one of its prerequisites; add `",
                    read.key,
                    "` to its #[after(..)] or #[after_terminal(..)]",
                ]));
            }
            Some(edge) if edge.terminal && !read.optional => {
                return Some(ReadProblem::new(&[
                    "step `",
                    step,
                    "` runs #[after_terminal(",
                    read.key,
                    ")], so `",
                    read.key,
                    "` may have failed and stored no output; declare the #[output(..)] argument as an `Option`",
                ]));
            }
            Some(_) => {}
        }
        i += 1;
    }
    None
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::ReadOutputs;
    use crate::context::JobContext;

    #[test]
    fn each_read_takes_its_own_entry_in_order() {
        let mut outputs = ReadOutputs {
            ctx: JobContext::for_tests("tests.read"),
            fetched: vec![
                ("a", Some(Some(json!(1)))),
                ("b", Some(None)),
                ("a", Some(Some(json!(2)))),
            ],
        };
        assert_eq!(outputs.take("a"), Some(json!(1)));
        assert_eq!(outputs.take("b"), None);
        assert_eq!(
            outputs.take("a"),
            Some(json!(2)),
            "a second read of a step gets its output too"
        );
        assert_eq!(outputs.take("a"), None);
        assert!(
            outputs.fetched.iter().all(|(_, entry)| entry.is_none()),
            "nothing is kept once read"
        );
    }
}
