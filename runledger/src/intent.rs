//! Typed durable enqueue intents: [`Job::record_intent`] and the [`IntentHandle`] it returns.

use std::marker::PhantomData;

use serde_json::Value;
use sqlx::{Acquire, Postgres};
use uuid::Uuid;

use crate::engine::core::jobs::{JobIntentId, JobIntentStatus};
use crate::engine::postgres::jobs::{
    JobEnqueue, JobIntentRecord, TenantScope, get_job_enqueue_intent, record_job_enqueue_intent,
};
use crate::error::Error;
use crate::job::{EnqueueOptions, Job, JobHandle};

/// Records an intent for `payload` of `J` with `options` (which must carry the key).
pub(crate) async fn record<'c, J: Job, A>(
    executor: A,
    payload: &Value,
    options: &EnqueueOptions,
) -> Result<IntentHandle<J>, Error>
where
    A: Acquire<'c, Database = Postgres> + Send,
{
    let request = options.apply(JobEnqueue::new(J::NAME, payload));
    let recorded = record_job_enqueue_intent(executor, &request).await?;
    Ok(IntentHandle {
        id: recorded.id,
        organization_id: request.organization_id,
        created: recorded.created,
        _job: PhantomData,
    })
}

/// A typed reference to a durable enqueue intent, made by [`Job::record_intent`]; seen in the
/// scope of its organization, like a [`JobHandle`].
pub struct IntentHandle<J> {
    id: JobIntentId,
    organization_id: Option<Uuid>,
    created: bool,
    _job: PhantomData<fn() -> J>,
}

impl<J> Clone for IntentHandle<J> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<J> Copy for IntentHandle<J> {}

impl<J> std::fmt::Debug for IntentHandle<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntentHandle")
            .field("id", &self.id)
            .field("organization_id", &self.organization_id)
            .field("created", &self.created)
            .finish()
    }
}

impl<J: Job> IntentHandle<J> {
    /// The intent's id.
    pub fn id(&self) -> JobIntentId {
        self.id
    }

    /// `false` when the key matched an intent recorded earlier with the same request.
    pub fn was_created(&self) -> bool {
        self.created
    }

    /// Where the intent is: pending, promoted into a job, or conflicted (a job with its key
    /// but another request exists). `job.intent_not_found` when it does not exist in the
    /// handle's organization (for instance, it was recorded in a transaction that rolled
    /// back).
    pub async fn status<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<JobIntentStatus, Error> {
        Ok(self.record(executor).await?.status)
    }

    /// The job the intent became, once a promoter promoted it; `None` while it is pending or
    /// after a conflict.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn confirm_order(order_id: u64) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let mut tx = pool.begin().await?;
    /// let intent = ConfirmOrder { order_id: 42 }.record_intent(&mut *tx, "order:42:confirm").await?;
    /// tx.commit().await?;
    /// // ... later, once a worker that runs `confirm_order` promoted it:
    /// if let Some(job) = intent.job(&pool).await? {
    ///     println!("job {} is {:?}", job.id(), job.status(&pool).await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn job<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<Option<JobHandle<J>>, Error> {
        let record = self.record(executor).await?;
        Ok(record
            .job_id
            .map(|job_id| JobHandle::from_id(job_id, self.organization_id)))
    }

    async fn record<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<JobIntentRecord, Error> {
        let scope = TenantScope::from_organization(self.organization_id);
        get_job_enqueue_intent(executor, self.id, scope)
            .await?
            .ok_or(Error::Database(
                crate::engine::postgres::Error::IntentNotFound { intent_id: self.id },
            ))
    }
}
