//! `sqlx` encoding for the core enums (stored as text) and id newtypes (stored as uuid), so
//! queries can name them directly: `status AS "status: JobStatus"`.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Encode, Postgres, Type};
use uuid::Uuid;

use crate::core::jobs::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobId, JobIntentId, JobIntentStatus,
    JobLogLevel, JobScheduleId, JobStage, JobStatus, WorkflowRunId, WorkflowRunStatus,
    WorkflowStepId, WorkflowStepStatus,
};

macro_rules! text_enum_sql {
    ($($name:ty),+ $(,)?) => {$(
        impl Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <str as Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <str as Type<Postgres>>::compatible(ty)
            }
        }

        impl<'r> Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                Ok(text.parse()?)
            }
        }

        impl Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }
    )+};
}

text_enum_sql!(
    JobStatus,
    JobStage,
    JobFailureKind,
    JobAttemptOutcome,
    JobEventType,
    JobLogLevel,
    JobIntentStatus,
    WorkflowRunStatus,
    WorkflowStepStatus,
);

macro_rules! uuid_newtype_sql {
    ($($name:ident),+ $(,)?) => {$(
        impl Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <Uuid as Type<Postgres>>::type_info()
            }
        }

        impl PgHasArrayType for $name {
            fn array_type_info() -> PgTypeInfo {
                <Uuid as PgHasArrayType>::array_type_info()
            }
        }

        impl<'r> Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(Self(<Uuid as Decode<Postgres>>::decode(value)?))
            }
        }

        impl Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <Uuid as Encode<Postgres>>::encode_by_ref(&self.0, buf)
            }
        }
    )+};
}

uuid_newtype_sql!(
    JobId,
    WorkflowRunId,
    WorkflowStepId,
    JobScheduleId,
    JobIntentId
);
