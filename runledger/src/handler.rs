//! The engine handler that runs a typed job: decodes the payload, calls the job, encodes its
//! output.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::context::{Data, JobContext};
use crate::engine::core::jobs::{JobCompletion, JobContext as EngineContext, JobFailure, JobType};
use crate::engine::core::prelude::async_trait;
use crate::engine::runtime::registry::JobHandler;
use crate::job::Job;

/// Runs a typed job with the worker's shared state. A payload that does not decode
/// dead-letters the job with `job.payload_invalid`; every output is stored, `()` and `None` as
/// JSON `null`, so that a workflow whose result step returns them has a result.
pub(crate) struct TypedHandler<J> {
    data: Arc<Data>,
    _job: PhantomData<fn() -> J>,
}

impl<J> TypedHandler<J> {
    pub(crate) fn new(data: Arc<Data>) -> Self {
        Self {
            data,
            _job: PhantomData,
        }
    }
}

#[async_trait]
impl<J: Job> JobHandler for TypedHandler<J>
where
    J::Output: Serialize,
{
    fn job_type(&self) -> JobType<'static> {
        JobType::new(J::NAME)
    }

    async fn execute(
        &self,
        context: EngineContext,
        payload: Value,
    ) -> Result<JobCompletion, JobFailure> {
        let job: J = serde_json::from_value(payload).map_err(|e| {
            JobFailure::terminal(
                "job.payload_invalid",
                format!("the payload does not match job `{}`: {e}", J::NAME),
            )
        })?;
        let output = match job
            .run(JobContext::with_data(context, Arc::clone(&self.data)))
            .await
        {
            Ok(output) => output,
            // A continuation leaves through the error channel and carries no output.
            Err(exit) => return exit.into_outcome(),
        };
        let output = serde_json::to_value(output).map_err(|e| {
            JobFailure::terminal(
                "job.output_invalid",
                format!(
                    "the output of job `{}` could not be serialized: {e}",
                    J::NAME
                ),
            )
        })?;
        Ok(JobCompletion::with_output(output))
    }
}

/// Stands in for the handler of a job whose output type `#[job]` refused at compile time;
/// no compiled program contains one.
pub(crate) struct UnrunnableHandler(pub(crate) &'static str);

#[async_trait]
impl JobHandler for UnrunnableHandler {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(self.0)
    }

    async fn execute(&self, _: EngineContext, _: Value) -> Result<JobCompletion, JobFailure> {
        Err(JobFailure::terminal(
            "job.output_invalid",
            format!("the output of job `{}` cannot be stored", self.0),
        ))
    }
}
