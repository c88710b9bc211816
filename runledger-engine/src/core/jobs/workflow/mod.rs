//! Workflow DAG requests: the model, its validation, and the builders that produce it.

mod builder;
mod model;

pub use builder::{WorkflowDagBuilder, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder};
pub use model::{
    WorkflowDependencyCondition, WorkflowRunEnqueue, WorkflowStepDependency, WorkflowStepEnqueue,
    WorkflowStepKind, WorkflowValidationError, canonical_steps, check_step_organizations,
    validate_steps,
};
