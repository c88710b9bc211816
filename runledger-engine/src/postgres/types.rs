//! `sqlx` encoding for the core enums (stored as text), id newtypes (stored as uuid) and trace
//! contexts (stored as jsonb), so queries can name them directly: `status AS "status:
//! JobStatus"`.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::types::Json;
use sqlx::{Decode, Encode, Postgres, Type};
use uuid::Uuid;

use crate::core::jobs::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobId, JobIntentId, JobIntentStatus,
    JobLogLevel, JobScheduleId, JobStage, JobStatus, WorkflowRunId, WorkflowRunStatus,
    WorkflowStepId, WorkflowStepStatus,
};
use crate::core::trace::TraceContext;

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

impl Type<Postgres> for TraceContext {
    fn type_info() -> PgTypeInfo {
        <Json<serde_json::Value> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Json<serde_json::Value> as Type<Postgres>>::compatible(ty)
    }
}

/// Lenient: a stored value that is not an object of strings decodes to the fields it has that
/// are, so it never fails the claim of the job carrying it.
impl<'r> Decode<'r, Postgres> for TraceContext {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let Json(value) = <Json<serde_json::Value> as Decode<Postgres>>::decode(value)?;
        Ok(Self::from_json(&value))
    }
}

impl Encode<'_, Postgres> for TraceContext {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <Json<&Self> as Encode<Postgres>>::encode(Json(self), buf)
    }
}
