//! Compile-time checks of the macros' input types, by autoref specialization: the generated
//! code calls a method on `&&…&Probe::<T>::new()` and the compiler picks the impl of the most
//! specific trait that applies to `T`. A wrong type selects a method whose `where` clause
//! names a marker trait without impls, so the compiler reports exactly one error, with the
//! marker's message, on the user's token; the rest of the generated code still type-checks
//! (the fallbacks return placeholders that no compiled program ever runs).

use std::error::Error as StdError;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::ser::{Error as _, Serialize, Serializer};

use crate::context::Data;
use crate::engine::runtime::registry::JobHandler;
use crate::error::{Error, JobError};
use crate::fan_out::FanOut;
use crate::handler::{TypedHandler, UnrunnableHandler};
use crate::job::Job;
use crate::step::External;
use crate::workflow::StepSpec;

/// What the generated code probes: a type, carried without a value.
pub struct Probe<T: ?Sized>(PhantomData<fn() -> Box<T>>);

impl<T: ?Sized> Default for Probe<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: ?Sized> Probe<T> {
    /// The probe of `T`.
    pub const fn new() -> Self {
        Self(PhantomData)
    }

    /// The probe of a value's type.
    pub const fn of(_: &T) -> Self {
        Self(PhantomData)
    }
}

macro_rules! marker {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        pub trait $name {}
    };
}

// ---- job arguments -------------------------------------------------------------------------

marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job argument: it implements neither `Serialize` nor `Deserialize`",
        label = "not a serde type",
        note = "job arguments are stored as JSON: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`, or pass a type that has them"
    )]
    SerdeArgument
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job argument: it implements `Serialize` but not `Deserialize`",
        label = "not deserializable",
        note = "job arguments are stored as JSON and read back by the worker: derive `serde::Deserialize` for `{Self}`"
    )]
    DeserializeArgument
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job argument: it implements `Deserialize` but not `Serialize`",
        label = "not serializable",
        note = "job arguments are stored as JSON when the job is enqueued: derive `serde::Serialize` for `{Self}`"
    )]
    SerializeArgument
);

/// A job argument whose type is a serde type.
pub trait ArgumentOk {
    /// Passes.
    fn check_argument(&self) {}
}
impl<T: Serialize + DeserializeOwned> ArgumentOk for &&&Probe<T> {}
/// A job argument that cannot be read back.
pub trait ArgumentNotDeserialize<T> {
    /// Fails to compile.
    fn check_argument(&self)
    where
        T: DeserializeArgument,
    {
    }
}
impl<T: Serialize> ArgumentNotDeserialize<T> for &&Probe<T> {}
/// A job argument that cannot be stored.
pub trait ArgumentNotSerialize<T> {
    /// Fails to compile.
    fn check_argument(&self)
    where
        T: SerializeArgument,
    {
    }
}
impl<T: DeserializeOwned> ArgumentNotSerialize<T> for &Probe<T> {}
/// A job argument that is not a serde type at all.
pub trait ArgumentNotSerde<T> {
    /// Fails to compile.
    fn check_argument(&self)
    where
        T: SerdeArgument,
    {
    }
}
impl<T> ArgumentNotSerde<T> for Probe<T> {}

/// Serializes a payload field of a serde type.
pub trait FieldSerialize<T> {
    /// Serializes `value`.
    fn serialize_field<S: Serializer>(&self, value: &T, serializer: S) -> Result<S::Ok, S::Error>;
}
impl<T: Serialize> FieldSerialize<T> for &Probe<T> {
    fn serialize_field<S: Serializer>(&self, value: &T, serializer: S) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }
}
/// The placeholder for a field whose type `check_argument` refuses.
pub trait FieldNotSerialize<T> {
    /// Fails at run time; never compiled into a program (the argument check fails first).
    fn serialize_field<S: Serializer>(&self, _: &T, _: S) -> Result<S::Ok, S::Error> {
        Err(S::Error::custom("the argument type is not serializable"))
    }
}
impl<T> FieldNotSerialize<T> for Probe<T> {}

/// Deserializes a payload field of a serde type.
pub trait FieldDeserialize<T> {
    /// Deserializes a value.
    fn deserialize_field<'de, D: Deserializer<'de>>(&self, deserializer: D) -> Result<T, D::Error>;
}
impl<T: DeserializeOwned> FieldDeserialize<T> for &Probe<T> {
    fn deserialize_field<'de, D: Deserializer<'de>>(&self, deserializer: D) -> Result<T, D::Error> {
        T::deserialize(deserializer)
    }
}
/// The placeholder for a field whose type `check_argument` refuses.
pub trait FieldNotDeserialize<T> {
    /// Fails at run time; never compiled into a program (the argument check fails first).
    fn deserialize_field<'de, D: Deserializer<'de>>(&self, _: D) -> Result<T, D::Error> {
        Err(D::Error::custom("the argument type is not deserializable"))
    }
}
impl<T> FieldNotDeserialize<T> for Probe<T> {}

// ---- job outputs ---------------------------------------------------------------------------

marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job output: it implements neither `Serialize` nor `Deserialize`",
        label = "not a serde type",
        note = "a job's output is stored as JSON and read back typed: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`, or return a type that has them"
    )]
    SerdeOutput
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job output: it implements `Serialize` but not `Deserialize`",
        label = "not deserializable",
        note = "a job's output is read back typed (handles, workflow results, dependent steps): derive `serde::Deserialize` for `{Self}`"
    )]
    DeserializeOutput
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job output: it implements `Deserialize` but not `Serialize`",
        label = "not serializable",
        note = "a job's output is stored as JSON: derive `serde::Serialize` for `{Self}`"
    )]
    SerializeOutput
);

/// A job output whose type is a serde type.
pub trait OutputOk {
    /// Passes.
    fn check_output(&self) {}
}
impl<T: Serialize + DeserializeOwned> OutputOk for &&&Probe<T> {}
/// A job output that cannot be read back.
pub trait OutputNotDeserialize<T> {
    /// Fails to compile.
    fn check_output(&self)
    where
        T: DeserializeOutput,
    {
    }
}
impl<T: Serialize> OutputNotDeserialize<T> for &&Probe<T> {}
/// A job output that cannot be stored.
pub trait OutputNotSerialize<T> {
    /// Fails to compile.
    fn check_output(&self)
    where
        T: SerializeOutput,
    {
    }
}
impl<T: DeserializeOwned> OutputNotSerialize<T> for &Probe<T> {}
/// A job output that is not a serde type at all.
pub trait OutputNotSerde<T> {
    /// Fails to compile.
    fn check_output(&self)
    where
        T: SerdeOutput,
    {
    }
}
impl<T> OutputNotSerde<T> for Probe<T> {}

/// The worker's handler of a job whose output can be stored, with the worker's shared state.
pub trait HandlerOk {
    /// The handler.
    fn job_handler(&self, data: Arc<Data>) -> Arc<dyn JobHandler>;
}
impl<J: Job> HandlerOk for &Probe<J>
where
    J::Output: Serialize,
{
    fn job_handler(&self, data: Arc<Data>) -> Arc<dyn JobHandler> {
        Arc::new(TypedHandler::<J>::new(data))
    }
}
/// The placeholder handler of a job whose output `check_output` refuses.
pub trait HandlerUnrunnable {
    /// Never compiled into a program (the output check fails first).
    fn job_handler(&self, data: Arc<Data>) -> Arc<dyn JobHandler>;
}
impl<J: Job> HandlerUnrunnable for Probe<J> {
    fn job_handler(&self, _: Arc<Data>) -> Arc<dyn JobHandler> {
        Arc::new(UnrunnableHandler(J::NAME))
    }
}

// ---- job errors ----------------------------------------------------------------------------

marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a job error",
        label = "returned here",
        note = "a #[job] fn returns `Result<T, E>` where `E` is `runledger::JobError`, any `std::error::Error + Send + Sync + 'static`, `Box<dyn std::error::Error + Send + Sync>`, `String` or `&'static str` (or `anyhow::Error` with runledger's `anyhow` feature)"
    )]
    JobErrorType
);

/// Errors that convert into [`JobError`] (it, and every `std::error::Error + Send + Sync`).
pub trait ErrorInto<E> {
    /// Converts.
    fn job_error(&self, error: E) -> JobError;
}
impl<E: Into<JobError>> ErrorInto<E> for &&&Probe<E> {
    fn job_error(&self, error: E) -> JobError {
        error.into()
    }
}
/// Errors users return that are not `std::error::Error` themselves: boxed errors and text.
/// Each becomes a retryable failure with the error's text.
pub trait ErrorText<E> {
    /// Converts.
    fn job_error(&self, error: E) -> JobError;
}
impl ErrorText<Box<dyn StdError + Send + Sync>> for &&Probe<Box<dyn StdError + Send + Sync>> {
    fn job_error(&self, error: Box<dyn StdError + Send + Sync>) -> JobError {
        JobError::retryable(crate::error::chain_message(&*error))
    }
}
impl ErrorText<Box<dyn StdError + Send>> for &&Probe<Box<dyn StdError + Send>> {
    fn job_error(&self, error: Box<dyn StdError + Send>) -> JobError {
        JobError::retryable(crate::error::chain_message(&*error))
    }
}
impl ErrorText<Box<dyn StdError>> for &&Probe<Box<dyn StdError>> {
    fn job_error(&self, error: Box<dyn StdError>) -> JobError {
        JobError::retryable(crate::error::chain_message(&*error))
    }
}
impl ErrorText<String> for &&Probe<String> {
    fn job_error(&self, error: String) -> JobError {
        JobError::retryable(error)
    }
}
impl ErrorText<&'static str> for &&Probe<&'static str> {
    fn job_error(&self, error: &'static str) -> JobError {
        JobError::retryable(error)
    }
}
#[cfg(feature = "anyhow")]
impl ErrorText<anyhow::Error> for &&Probe<anyhow::Error> {
    fn job_error(&self, error: anyhow::Error) -> JobError {
        JobError::retryable(format!("{error:#}"))
    }
}
/// Any other error type.
pub trait ErrorUnsupported<E> {
    /// Fails to compile.
    fn job_error(&self, _: E) -> JobError
    where
        E: JobErrorType,
    {
        JobError::terminal("unsupported error type")
    }
}
impl<E> ErrorUnsupported<E> for &Probe<E> {}

// ---- workflow steps ------------------------------------------------------------------------

marker!(
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is a workflow: a workflow cannot be a step of another workflow",
        label = "a nested workflow",
        note = "declare its steps as fields of this workflow, or enqueue `{Self}` from one of its job steps with `.enqueue(..)`"
    )]
    NestedWorkflow
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "a step is one job: `Vec<{Self}>` cannot be a workflow step",
        label = "a list of jobs",
        note = "declare one field per job, or let a job step enqueue the jobs it needs with `runledger::enqueue_batch`"
    )]
    StepList
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "a step always runs: `Option<{Self}>` cannot be a workflow step",
        label = "an optional job",
        note = "declare the job itself and let it return early when it has nothing to do (its arguments can be `Option`s)"
    )]
    OptionalStep
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "the gate's output `{Self}` implements neither `Serialize` nor `Deserialize`",
        label = "a gate whose output is not a serde type",
        note = "a gate is completed with a `{Self}` stored as JSON and read by its dependents: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
    )]
    SerdeGateOutput
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "the gate's output `{Self}` implements `Serialize` but not `Deserialize`",
        label = "a gate whose output is not deserializable",
        note = "the dependents of a gate read its output back: derive `serde::Deserialize` for `{Self}`"
    )]
    DeserializeGateOutput
);
marker!(
    #[diagnostic::on_unimplemented(
        message = "the gate's output `{Self}` implements `Deserialize` but not `Serialize`",
        label = "a gate whose output is not serializable",
        note = "a gate's output is stored as JSON when it is completed: derive `serde::Serialize` for `{Self}`"
    )]
    SerializeGateOutput
);

/// Builds the step of a `#[workflow]` field (a job or a gate whose output is a serde type).
pub trait StepOk<S> {
    /// The step, keyed `key`.
    fn step_spec(&self, step: &S, key: &'static str) -> Result<StepSpec, Error>;
}
impl<J: Job> StepOk<J> for &&&&Probe<J> {
    fn step_spec(&self, step: &J, key: &'static str) -> Result<StepSpec, Error> {
        StepSpec::job(step, key)
    }
}
impl<T: Serialize + DeserializeOwned> StepOk<External<T>> for &&&&Probe<External<T>> {
    fn step_spec(&self, _: &External<T>, key: &'static str) -> Result<StepSpec, Error> {
        Ok(StepSpec::gate(key))
    }
}
impl<J: Job> StepOk<FanOut<J>> for &&&&Probe<FanOut<J>> {
    fn step_spec(&self, _: &FanOut<J>, key: &'static str) -> Result<StepSpec, Error> {
        Ok(StepSpec::fan_out(key))
    }
}

/// A gate whose output cannot be read back.
pub trait GateNotDeserialize<T> {
    /// Fails to compile.
    fn step_spec(&self, _: &External<T>, key: &'static str) -> Result<StepSpec, Error>
    where
        T: DeserializeGateOutput,
    {
        Ok(StepSpec::gate(key))
    }
}
impl<T: Serialize> GateNotDeserialize<T> for &&&Probe<External<T>> {}

/// A gate whose output cannot be stored.
pub trait GateNotSerialize<T> {
    /// Fails to compile.
    fn step_spec(&self, _: &External<T>, key: &'static str) -> Result<StepSpec, Error>
    where
        T: SerializeGateOutput,
    {
        Ok(StepSpec::gate(key))
    }
}
impl<T: DeserializeOwned> GateNotSerialize<T> for &&Probe<External<T>> {}

/// A gate whose output is not a serde type.
pub trait GateNotSerde<T> {
    /// Fails to compile.
    fn step_spec(&self, _: &External<T>, key: &'static str) -> Result<StepSpec, Error>
    where
        T: SerdeGateOutput,
    {
        Ok(StepSpec::gate(key))
    }
}
impl<T> GateNotSerde<T> for &Probe<External<T>> {}

/// A workflow used as a step.
pub trait StepIsWorkflow<W> {
    /// Fails to compile.
    fn step_spec(&self, _: &W, key: &'static str) -> Result<StepSpec, Error>
    where
        W: NestedWorkflow,
    {
        Ok(StepSpec::gate(key))
    }
}
impl<W: crate::Workflow> StepIsWorkflow<W> for &Probe<W> {}

/// A list of jobs used as a step.
pub trait StepIsList<J> {
    /// Fails to compile.
    fn step_spec(&self, _: &Vec<J>, key: &'static str) -> Result<StepSpec, Error>
    where
        J: StepList,
    {
        Ok(StepSpec::gate(key))
    }
}
impl<J: Job> StepIsList<J> for &Probe<Vec<J>> {}

/// An optional job used as a step.
pub trait StepIsOptional<J> {
    /// Fails to compile.
    fn step_spec(&self, _: &Option<J>, key: &'static str) -> Result<StepSpec, Error>
    where
        J: OptionalStep,
    {
        Ok(StepSpec::gate(key))
    }
}
impl<J: Job> StepIsOptional<J> for &Probe<Option<J>> {}

/// Anything else: not a step. The mistake is reported once, by the read check's `StepReads`
/// bound (see `crate::reads`), so this placeholder has no bound of its own.
pub trait StepNotAJob<S> {
    /// Never compiled into a program.
    fn step_spec(&self, _: &S, key: &'static str) -> Result<StepSpec, Error> {
        Ok(StepSpec::gate(key))
    }
}
impl<S> StepNotAJob<S> for Probe<S> {}

marker!(
    #[diagnostic::on_unimplemented(
        message = "a gate runs no job: `#[step(priority, max_attempts, timeout, continuation)]` apply to job steps only",
        label = "an option of the step's job",
        note = "remove the option, or make the step a `#[job]` payload"
    )]
    GateStepOption
);

/// `#[step(priority, max_attempts, timeout, continuation)]` on a gate.
pub trait StepOptionOnGate<T> {
    /// Fails to compile.
    fn check_step_option(&self)
    where
        External<T>: GateStepOption,
    {
    }
}
impl<T> StepOptionOnGate<T> for &Probe<External<T>> {}

marker!(
    #[diagnostic::on_unimplemented(
        message = "`#[step(priority, max_attempts, timeout, continuation)]` do not apply to a fan-out: its children are jobs with their own definition values",
        label = "an option of a fan-out",
        note = "remove the option, and set the children's values on their `#[job(..)]`"
    )]
    FanOutStepOption
);

/// `#[step(priority, max_attempts, timeout, continuation)]` on a fan-out.
pub trait StepOptionOnFanOut<J> {
    /// Fails to compile.
    fn check_step_option(&self)
    where
        FanOut<J>: FanOutStepOption,
    {
    }
}
impl<J> StepOptionOnFanOut<J> for &Probe<FanOut<J>> {}
/// `#[step(priority, max_attempts, timeout, continuation)]` on anything else (a job step, or a type the
/// step check refuses).
pub trait StepOptionOk {
    /// Passes.
    fn check_step_option(&self) {}
}
impl<S> StepOptionOk for Probe<S> {}
