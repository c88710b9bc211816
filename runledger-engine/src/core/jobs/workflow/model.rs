//! The validated shape of a workflow run request: what the builders produce and what
//! `enqueue_workflow_run` persists.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Value, json};
use uuid::Uuid;

use crate::core::jobs::limits::{JsonProblem, check_json, is_storable_text};
use crate::core::jobs::{IdentifierError, JobType, StepKey, WorkflowType};

/// How a dependent step waits on one prerequisite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkflowDependencyCondition {
    /// Released only if the prerequisite succeeded; otherwise the dependent is canceled with
    /// `workflow.dependency_unsatisfied`.
    Success,
    /// Released once the prerequisite is terminal, whatever its outcome.
    Terminal,
}

impl WorkflowDependencyCondition {
    /// The value stored in `workflow_step_dependencies.condition`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "SUCCESS",
            Self::Terminal => "TERMINAL",
        }
    }
}

/// One dependency edge: this step waits on `prerequisite`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowStepDependency<'a> {
    /// The step that must finish first.
    pub prerequisite: StepKey<'a>,
    /// What its outcome must be.
    pub condition: WorkflowDependencyCondition,
}

/// What a step does (serialized as stored: `JOB`, `EXTERNAL`, `FAN_OUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkflowStepKind {
    /// Runs a job of `job_type` with `payload`.
    Job,
    /// Waits until completed from outside with `complete_external_workflow_step`.
    External,
    /// Runs no job: one of its prerequisites fills it with children (`fill_fan_out`), and it
    /// finishes once they and its other prerequisites have, with their outputs in order, or
    /// failed with `workflow.fan_out_failed` when a child did not succeed.
    FanOut,
}

impl WorkflowStepKind {
    /// The value stored in `workflow_steps.step_kind`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Job => "JOB",
            Self::External => "EXTERNAL",
            Self::FanOut => "FAN_OUT",
        }
    }

    /// The kind stored as `stored` (`None`: no kind is stored so).
    pub fn from_stored(stored: &str) -> Option<Self> {
        [Self::Job, Self::External, Self::FanOut]
            .into_iter()
            .find(|kind| kind.as_str() == stored)
    }
}

/// One step of a workflow run request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkflowStepEnqueue<'a> {
    /// Unique key of the step within the run.
    pub step_key: StepKey<'a>,
    /// Job or external gate.
    pub kind: WorkflowStepKind,
    /// The job type (job steps only).
    pub job_type: Option<JobType<'a>>,
    /// The job payload (job steps only; `{}` for external steps).
    pub payload: Cow<'a, Value>,
    /// Job priority override.
    pub priority: Option<i32>,
    /// Job attempts override (positive).
    pub max_attempts: Option<i32>,
    /// Job timeout override (positive).
    pub timeout_seconds: Option<i32>,
    /// Free-form stage label for grouping in views.
    pub stage: Option<Cow<'a, str>>,
    /// Organization of the step's job (defaults to the run's).
    pub organization_id: Option<Uuid>,
    /// Free-form step metadata.
    pub metadata: Cow<'a, Value>,
    /// An execution resource the step's job holds while it runs (job steps only): at most one
    /// job holding a given key runs at a time across all workers.
    pub resource_key: Option<Cow<'a, str>>,
    /// Prerequisites.
    pub dependencies: Vec<WorkflowStepDependency<'a>>,
    /// Whether the step's job may end an attempt with a continuation (job steps only); see
    /// `JobContinuation`. A continued step stays open and releases none of its dependents.
    pub allow_continuation: bool,
}

impl<'a> WorkflowStepEnqueue<'a> {
    /// A job step with no settings and no dependencies.
    pub fn job(step_key: StepKey<'a>, job_type: JobType<'a>, payload: Cow<'a, Value>) -> Self {
        Self {
            step_key,
            kind: WorkflowStepKind::Job,
            job_type: Some(job_type),
            payload,
            priority: None,
            max_attempts: None,
            timeout_seconds: None,
            stage: None,
            allow_continuation: false,
            organization_id: None,
            metadata: Cow::Owned(json!({})),
            resource_key: None,
            dependencies: Vec::new(),
        }
    }

    /// An external step with no dependencies.
    pub fn external(step_key: StepKey<'a>) -> Self {
        Self::without_job(step_key, WorkflowStepKind::External)
    }

    /// A fan-out step with no dependencies: declare the step that fills it
    /// (`fill_fan_out`) as its prerequisite.
    pub fn fan_out(step_key: StepKey<'a>) -> Self {
        Self::without_job(step_key, WorkflowStepKind::FanOut)
    }

    /// A step of a kind that runs no job, with no dependencies.
    fn without_job(step_key: StepKey<'a>, kind: WorkflowStepKind) -> Self {
        Self {
            step_key,
            kind,
            job_type: None,
            payload: Cow::Owned(json!({})),
            priority: None,
            max_attempts: None,
            timeout_seconds: None,
            stage: None,
            allow_continuation: false,
            organization_id: None,
            metadata: Cow::Owned(json!({})),
            resource_key: None,
            dependencies: Vec::new(),
        }
    }
}

/// A validated request to start one workflow run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkflowRunEnqueue<'a> {
    /// The workflow type.
    pub workflow_type: WorkflowType<'a>,
    /// Owning organization, if any.
    pub organization_id: Option<Uuid>,
    /// Free-form run metadata.
    pub metadata: Cow<'a, Value>,
    /// Deduplication key: a retry with the same request returns the original run.
    pub idempotency_key: Option<Cow<'a, str>>,
    /// The step whose output becomes the run's result.
    pub result_step: Option<StepKey<'a>>,
    /// Who asked for the run.
    pub created_by_user_id: Option<Uuid>,
    /// Whether its steps' jobs are claimed in the order of the run's age rather than of their
    /// release: each is due from the moment the run was enqueued, so a worker finishes an
    /// older run before it starts the steps of a newer one.
    pub run_first: bool,
    /// The steps, in declaration order.
    pub steps: Vec<WorkflowStepEnqueue<'a>>,
}

/// Why a workflow request is invalid. Each variant has a stable [`code`](Self::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowValidationError {
    /// An identifier is blank or too long.
    #[error(transparent)]
    InvalidIdentifier(#[from] IdentifierError),
    /// The run has no steps.
    #[error("a workflow needs at least one step")]
    EmptyWorkflow,
    /// Two steps share a key.
    #[error("step key `{step_key}` is used twice")]
    DuplicateStepKey {
        /// The key.
        step_key: String,
    },
    /// A dependency names a step that is not in the run.
    #[error("step `{step_key}` depends on unknown step `{prerequisite}`")]
    UnknownPrerequisite {
        /// The dependent step.
        step_key: String,
        /// The missing prerequisite.
        prerequisite: String,
    },
    /// An edge was declared on a step that is not in the run.
    #[error("unknown step `{step_key}`")]
    UnknownStep {
        /// The key.
        step_key: String,
    },
    /// A step depends on itself.
    #[error("step `{step_key}` depends on itself")]
    SelfDependency {
        /// The key.
        step_key: String,
    },
    /// The same edge is declared twice.
    #[error("step `{step_key}` depends on `{prerequisite}` more than once")]
    DuplicateDependency {
        /// The dependent step.
        step_key: String,
        /// The repeated prerequisite.
        prerequisite: String,
    },
    /// The dependencies form a cycle.
    #[error("the dependencies form a cycle through `{step_key}`")]
    Cycle {
        /// A step on the cycle.
        step_key: String,
    },
    /// An external or fan-out step carries job settings (type, payload, priority, attempts,
    /// timeout).
    #[error("step `{step_key}` runs no job and cannot carry job settings")]
    ExternalStepWithJobSettings {
        /// The key.
        step_key: String,
    },
    /// A job step has no job type.
    #[error("job step `{step_key}` has no job type")]
    MissingJobType {
        /// The key.
        step_key: String,
    },
    /// A job setting is out of range.
    #[error("step `{step_key}`: {field} must be positive")]
    InvalidJobSetting {
        /// The key.
        step_key: String,
        /// The field.
        field: &'static str,
    },
    /// The idempotency key is blank or too long.
    #[error("the idempotency key must be 1 to 255 characters and not blank")]
    InvalidIdempotencyKey,
    /// The declared result step is not in the run.
    #[error("result step `{step_key}` is not a step of the workflow")]
    UnknownResultStep {
        /// The key.
        step_key: String,
    },
    /// A job step's payload cannot be stored or would not decode.
    #[error("the payload of step `{step_key}` {problem}")]
    InvalidPayload {
        /// The key.
        step_key: String,
        /// What is wrong with it.
        problem: JsonProblem,
    },
    /// Run or step metadata cannot be stored or would not decode.
    #[error("the metadata of {owner} {problem}")]
    InvalidMetadata {
        /// Whose metadata: the run, or a step named by its key.
        owner: String,
        /// What is wrong with it.
        problem: JsonProblem,
    },
    /// A step's stage label contains a NUL character.
    #[error("the stage of step `{step_key}` must not contain the NUL character")]
    InvalidStage {
        /// The key.
        step_key: String,
    },
    /// A step's resource key is blank, longer than 255 characters or contains NUL.
    #[error(
        "the resource key of step `{step_key}` must be 1 to 255 characters, not blank, without NUL"
    )]
    InvalidResourceKey {
        /// The key.
        step_key: String,
    },
    /// A step names an organization other than its run's: a run's steps belong to the run's
    /// organization.
    #[error("step `{step_key}` belongs to another organization than its run")]
    StepOrganizationMismatch {
        /// The key.
        step_key: String,
    },
}

impl WorkflowValidationError {
    /// Stable error code, e.g. `workflow.cycle`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidIdentifier(err) => err.code(),
            Self::EmptyWorkflow => "workflow.empty",
            Self::DuplicateStepKey { .. } => "workflow.duplicate_step_key",
            Self::UnknownPrerequisite { .. } => "workflow.unknown_prerequisite",
            Self::UnknownStep { .. } => "workflow.unknown_step",
            Self::SelfDependency { .. } => "workflow.self_dependency",
            Self::DuplicateDependency { .. } => "workflow.duplicate_dependency",
            Self::Cycle { .. } => "workflow.cycle",
            Self::ExternalStepWithJobSettings { .. } => "workflow.external_step_job_settings",
            Self::MissingJobType { .. } => "workflow.missing_job_type",
            Self::InvalidJobSetting { .. } => "workflow.invalid_job_setting",
            Self::InvalidIdempotencyKey => "workflow.invalid_idempotency_key",
            Self::UnknownResultStep { .. } => "workflow.unknown_result_step",
            Self::InvalidPayload {
                problem: JsonProblem::TooDeep { .. },
                ..
            } => "job.payload_too_deep",
            Self::InvalidPayload { .. } => "job.invalid_payload",
            Self::InvalidMetadata { .. } => "workflow.invalid_metadata",
            Self::InvalidStage { .. } => "workflow.invalid_stage",
            Self::InvalidResourceKey { .. } => "job.invalid_resource_key",
            Self::StepOrganizationMismatch { .. } => "workflow.step_organization_mismatch",
        }
    }
}

impl WorkflowRunEnqueue<'_> {
    /// Checks the whole request: identifiers, step settings, edges, acyclicity, result step.
    pub fn validate(&self) -> Result<(), WorkflowValidationError> {
        self.workflow_type.validate()?;
        if let Some(key) = &self.idempotency_key
            && (key.trim().is_empty() || key.chars().count() > 255 || !is_storable_text(key))
        {
            return Err(WorkflowValidationError::InvalidIdempotencyKey);
        }
        check_json(&self.metadata).map_err(|problem| WorkflowValidationError::InvalidMetadata {
            owner: "the run".to_owned(),
            problem,
        })?;
        validate_steps(&BTreeSet::new(), &self.steps)?;
        check_step_organizations(self.organization_id, &self.steps)?;
        if let Some(result) = &self.result_step
            && !self
                .steps
                .iter()
                .any(|s| s.step_key.as_str() == result.as_str())
        {
            return Err(WorkflowValidationError::UnknownResultStep {
                step_key: result.to_string(),
            });
        }
        Ok(())
    }

    /// The canonical form stored for idempotency: steps sorted by key, dependencies sorted, so
    /// a reordered but otherwise identical request is the same request. An absent result step
    /// is omitted.
    pub fn canonical_snapshot(&self) -> Value {
        let steps = canonical_steps(&self.steps);
        let mut snapshot = json!({
            "workflow_type": self.workflow_type.as_str(),
            "organization_id": self.organization_id,
            "metadata": self.metadata.as_ref(),
            "created_by_user_id": self.created_by_user_id,
            "steps": steps,
        });
        if let Some(map) = snapshot.as_object_mut() {
            if let Some(result) = &self.result_step {
                map.insert("result_step".to_owned(), json!(result.as_str()));
            }
            if self.run_first {
                map.insert("run_first".to_owned(), json!(true));
            }
        }
        snapshot
    }
}

impl WorkflowStepEnqueue<'_> {
    /// Checks the step on its own: key, kind and job settings, payload, metadata and stage
    /// (edges are checked against the whole run by [`validate_steps`]).
    pub fn validate(&self) -> Result<(), WorkflowValidationError> {
        self.step_key.validate()?;
        let key = || self.step_key.to_string();
        match self.kind {
            WorkflowStepKind::External | WorkflowStepKind::FanOut => {
                let has_payload =
                    !matches!(self.payload.as_ref(), Value::Object(map) if map.is_empty());
                if self.job_type.is_some()
                    || has_payload
                    || self.priority.is_some()
                    || self.max_attempts.is_some()
                    || self.timeout_seconds.is_some()
                    || self.resource_key.is_some()
                {
                    return Err(WorkflowValidationError::ExternalStepWithJobSettings {
                        step_key: key(),
                    });
                }
            }
            WorkflowStepKind::Job => {
                let Some(job_type) = &self.job_type else {
                    return Err(WorkflowValidationError::MissingJobType { step_key: key() });
                };
                job_type.validate()?;
                for (field, value) in [
                    ("max_attempts", self.max_attempts),
                    ("timeout_seconds", self.timeout_seconds),
                ] {
                    if value.is_some_and(|v| v <= 0) {
                        return Err(WorkflowValidationError::InvalidJobSetting {
                            step_key: key(),
                            field,
                        });
                    }
                }
            }
        }
        for dependency in &self.dependencies {
            dependency.prerequisite.validate()?;
        }
        check_json(&self.payload).map_err(|problem| WorkflowValidationError::InvalidPayload {
            step_key: key(),
            problem,
        })?;
        check_json(&self.metadata).map_err(|problem| WorkflowValidationError::InvalidMetadata {
            owner: format!("step `{}`", self.step_key),
            problem,
        })?;
        if self
            .stage
            .as_deref()
            .is_some_and(|stage| !is_storable_text(stage))
        {
            return Err(WorkflowValidationError::InvalidStage { step_key: key() });
        }
        if self.resource_key.as_deref().is_some_and(|resource| {
            resource.trim().is_empty()
                || resource.chars().count() > 255
                || !is_storable_text(resource)
        }) {
            return Err(WorkflowValidationError::InvalidResourceKey { step_key: key() });
        }
        Ok(())
    }
}

/// Checks that every step either names no organization or the run's own: a step of another
/// organization would put that tenant's job inside this tenant's run.
///
/// ```
/// use std::borrow::Cow;
/// use runledger_engine::core::jobs::{check_step_organizations, JobType, StepKey, WorkflowStepEnqueue};
///
/// let payload = serde_json::json!({});
/// let mut step = WorkflowStepEnqueue::job(StepKey::new("a"), JobType::new("t"), Cow::Borrowed(&payload));
/// let org_a = uuid::Uuid::now_v7();
/// assert!(check_step_organizations(Some(org_a), std::slice::from_ref(&step)).is_ok());
/// step.organization_id = Some(uuid::Uuid::now_v7());
/// let err = check_step_organizations(Some(org_a), &[step]).unwrap_err();
/// assert_eq!(err.code(), "workflow.step_organization_mismatch");
/// ```
pub fn check_step_organizations(
    run_organization: Option<Uuid>,
    steps: &[WorkflowStepEnqueue<'_>],
) -> Result<(), WorkflowValidationError> {
    match steps.iter().find(|step| {
        step.organization_id
            .is_some_and(|org| Some(org) != run_organization)
    }) {
        Some(step) => Err(WorkflowValidationError::StepOrganizationMismatch {
            step_key: step.step_key.to_string(),
        }),
        None => Ok(()),
    }
}

/// The canonical JSON of a list of steps: sorted by key, dependencies sorted, so declaration
/// order does not matter. Used for idempotency snapshots of runs and appends.
pub fn canonical_steps(steps: &[WorkflowStepEnqueue<'_>]) -> Value {
    let mut steps: Vec<&WorkflowStepEnqueue<'_>> = steps.iter().collect();
    steps.sort_by(|a, b| a.step_key.cmp(&b.step_key));
    let steps: Vec<Value> = steps
        .into_iter()
        .map(|step| {
            let mut dependencies: Vec<(&str, &str)> = step
                .dependencies
                .iter()
                .map(|d| (d.prerequisite.as_str(), d.condition.as_str()))
                .collect();
            dependencies.sort_unstable();
            let mut snapshot = json!({
                "step_key": step.step_key.as_str(),
                "kind": step.kind.as_str(),
                "job_type": step.job_type.as_ref().map(JobType::as_str),
                "payload": step.payload.as_ref(),
                "priority": step.priority,
                "max_attempts": step.max_attempts,
                "timeout_seconds": step.timeout_seconds,
                "stage": step.stage.as_deref(),
                "organization_id": step.organization_id,
                "metadata": step.metadata.as_ref(),
                "dependencies": dependencies,
            });
            // Only when set, so that snapshots taken before these settings existed still match.
            if step.allow_continuation {
                snapshot["allow_continuation"] = Value::Bool(true);
            }
            if let (Some(key), Value::Object(fields)) = (&step.resource_key, &mut snapshot) {
                fields.insert("resource_key".to_owned(), Value::from(key.as_ref()));
            }
            snapshot
        })
        .collect();
    Value::Array(steps)
}

/// Validates `steps` as additions to a run whose steps are `existing` (empty for a new run):
/// step settings, unique keys, known prerequisites (new or existing), no self or duplicate
/// edges, and no cycle.
///
/// ```
/// use std::collections::BTreeSet;
/// use std::borrow::Cow;
/// use runledger_engine::core::jobs::{validate_steps, JobType, StepKey, WorkflowStepEnqueue};
///
/// let payload = serde_json::json!({});
/// let step = WorkflowStepEnqueue::job(StepKey::new("notify"), JobType::new("emails.send"), Cow::Borrowed(&payload));
/// let existing = BTreeSet::from(["approval"]);
/// assert!(validate_steps(&existing, &[step]).is_ok());
/// ```
pub fn validate_steps(
    existing: &BTreeSet<&str>,
    steps: &[WorkflowStepEnqueue<'_>],
) -> Result<(), WorkflowValidationError> {
    if steps.is_empty() {
        return Err(WorkflowValidationError::EmptyWorkflow);
    }
    // Each new step's position, by key: the edges below are checked and walked through it, so
    // that a fan-in of a thousand prerequisites costs a thousand hash lookups.
    let mut positions: HashMap<&str, usize> = HashMap::with_capacity(steps.len());
    for (position, step) in steps.iter().enumerate() {
        step.validate()?;
        let key = step.step_key.as_str();
        if existing.contains(key) || positions.insert(key, position).is_some() {
            return Err(WorkflowValidationError::DuplicateStepKey {
                step_key: key.to_owned(),
            });
        }
    }
    for step in steps {
        let mut seen = HashSet::new();
        for dependency in &step.dependencies {
            let prerequisite = dependency.prerequisite.as_str();
            if prerequisite == step.step_key.as_str() {
                return Err(WorkflowValidationError::SelfDependency {
                    step_key: step.step_key.to_string(),
                });
            }
            if !positions.contains_key(prerequisite) && !existing.contains(prerequisite) {
                return Err(WorkflowValidationError::UnknownPrerequisite {
                    step_key: step.step_key.to_string(),
                    prerequisite: prerequisite.to_owned(),
                });
            }
            if !seen.insert(prerequisite) {
                return Err(WorkflowValidationError::DuplicateDependency {
                    step_key: step.step_key.to_string(),
                    prerequisite: prerequisite.to_owned(),
                });
            }
        }
    }
    check_acyclic(&positions, steps)
}

/// Kahn's algorithm over the new steps, by position (`positions` maps each new key to it; edges
/// to existing steps cannot close a cycle); reports the first key, in key order, of the steps
/// left on or behind a cycle.
fn check_acyclic(
    positions: &HashMap<&str, usize>,
    steps: &[WorkflowStepEnqueue<'_>],
) -> Result<(), WorkflowValidationError> {
    let mut pending = vec![0_usize; steps.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (position, step) in steps.iter().enumerate() {
        for dependency in &step.dependencies {
            if let Some(&prerequisite) = positions.get(dependency.prerequisite.as_str()) {
                pending[position] += 1;
                dependents[prerequisite].push(position);
            }
        }
    }
    let mut ready: Vec<usize> = (0..steps.len())
        .filter(|&position| pending[position] == 0)
        .collect();
    let mut done = 0;
    while let Some(position) = ready.pop() {
        done += 1;
        for &dependent in &dependents[position] {
            pending[dependent] -= 1;
            if pending[dependent] == 0 {
                ready.push(dependent);
            }
        }
    }
    if done == steps.len() {
        return Ok(());
    }
    let on_cycle = steps
        .iter()
        .zip(&pending)
        .filter(|(_, count)| **count > 0)
        .map(|(step, _)| step.step_key.as_str())
        .min()
        .unwrap_or_default()
        .to_owned();
    Err(WorkflowValidationError::Cycle { step_key: on_cycle })
}
