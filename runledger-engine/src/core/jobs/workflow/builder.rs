//! Builders that assemble a [`WorkflowRunEnqueue`].
//!
//! [`WorkflowDagBuilder`] is the short path: plain string identifiers, job steps only, and
//! dependency edges declared by name. [`WorkflowRunEnqueueBuilder`] together with
//! [`WorkflowStepEnqueueBuilder`] is the explicit path for per-step job settings, stages,
//! external steps and typed identifiers. Both end in [`WorkflowRunEnqueue::validate`], so a
//! request that builds successfully is a well-formed DAG.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;
use uuid::Uuid;

use super::model::{
    WorkflowDependencyCondition, WorkflowRunEnqueue, WorkflowStepDependency, WorkflowStepEnqueue,
    WorkflowValidationError,
};
use crate::core::jobs::{JobType, StepKey, WorkflowType};

/// A run request with no steps and every optional field unset.
fn empty_run<'a>(workflow_type: WorkflowType<'a>, metadata: &'a Value) -> WorkflowRunEnqueue<'a> {
    WorkflowRunEnqueue {
        workflow_type,
        organization_id: None,
        metadata: Cow::Borrowed(metadata),
        idempotency_key: None,
        result_step: None,
        created_by_user_id: None,
        run_first: false,
        steps: Vec::new(),
    }
}

/// Runs the full request validation and hands the request back when it passes.
fn validated(
    run: WorkflowRunEnqueue<'_>,
) -> Result<WorkflowRunEnqueue<'_>, WorkflowValidationError> {
    run.validate()?;
    Ok(run)
}

/// Assembles a workflow DAG of job steps from plain string identifiers.
///
/// Mistakes that are visible at the call site — a blank identifier, a step key used twice, an
/// edge on a step that was never added — are returned by the call that made them. Everything
/// that depends on the finished graph (unknown prerequisites, self-edges, repeated edges,
/// cycles, an empty run, a blank workflow type or idempotency key) is reported by
/// [`build`](Self::build).
///
/// Job types are not checked against registered definitions here; enqueueing does that.
///
/// ```
/// use runledger_engine::core::jobs::{WorkflowDagBuilder, WorkflowDependencyCondition};
///
/// fn demo() -> Result<(), Box<dyn std::error::Error>> {
///     let metadata = serde_json::json!({"source": "api"});
///     let crawl_payload = serde_json::json!({"profile_id": "p_123"});
///     let classify_payload = serde_json::json!({"profile_id": "p_123"});
///     let score_payload = serde_json::json!({"profile_id": "p_123"});
///     let persist_payload = serde_json::json!({"profile_id": "p_123"});
///
///     let run = WorkflowDagBuilder::new("profiles.research", &metadata)
///         .idempotency_key("profile:p_123:research")
///         .job("crawl", "profiles.crawl", &crawl_payload)?
///         .job("classify", "profiles.classify", &classify_payload)?
///         .after_success("classify", ["crawl"])?
///         .job("score", "profiles.score", &score_payload)?
///         .after_success("score", ["crawl"])?
///         .job("persist", "profiles.persist", &persist_payload)?
///         .after_success("persist", ["classify", "score"])?
///         .result_step("persist")?
///         .build()?;
///
///     assert_eq!(run.steps.len(), 4);
///     let persist = &run.steps[3];
///     assert_eq!(persist.dependencies.len(), 2);
///     assert_eq!(persist.dependencies[0].condition, WorkflowDependencyCondition::Success);
///     assert_eq!(run.result_step.as_ref().map(|k| k.as_str()), Some("persist"));
///     Ok(())
/// }
/// demo().unwrap();
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkflowDagBuilder<'a> {
    run: WorkflowRunEnqueue<'a>,
    /// Position of each step in `run.steps`, by key.
    index: BTreeMap<&'a str, usize>,
}

impl<'a> WorkflowDagBuilder<'a> {
    /// Starts a workflow of `workflow_type` with run-level `metadata`.
    ///
    /// Never fails: a blank or oversized workflow type is reported by [`build`](Self::build).
    /// Use [`try_new`](Self::try_new) to check it right away.
    pub fn new(workflow_type: &'a str, metadata: &'a Value) -> Self {
        Self::from_type(WorkflowType::new(workflow_type), metadata)
    }

    /// Like [`new`](Self::new), but rejects a blank or oversized workflow type immediately
    /// (code `workflow.invalid_workflow_type`).
    ///
    /// ```
    /// use runledger_engine::core::jobs::WorkflowDagBuilder;
    ///
    /// let metadata = serde_json::json!({});
    /// let err = WorkflowDagBuilder::try_new("   ", &metadata).unwrap_err();
    /// assert_eq!(err.code(), "workflow.invalid_workflow_type");
    /// ```
    pub fn try_new(
        workflow_type: &'a str,
        metadata: &'a Value,
    ) -> Result<Self, WorkflowValidationError> {
        Ok(Self::from_type(
            WorkflowType::try_new(workflow_type)?,
            metadata,
        ))
    }

    fn from_type(workflow_type: WorkflowType<'a>, metadata: &'a Value) -> Self {
        Self {
            run: empty_run(workflow_type, metadata),
            index: BTreeMap::new(),
        }
    }

    /// Adds a job step that runs `job_type` with `payload`.
    ///
    /// Fails right away when the step key or job type is blank or oversized, or when a step
    /// with the same key was already added (`workflow.duplicate_step_key`). Whether the job
    /// type has an enabled definition is only checked at enqueue time.
    pub fn job(
        mut self,
        step_key: &'a str,
        job_type: &'a str,
        payload: &'a Value,
    ) -> Result<Self, WorkflowValidationError> {
        let key = StepKey::try_new(step_key)?;
        let job_type = JobType::try_new(job_type)?;
        if self.index.contains_key(step_key) {
            return Err(WorkflowValidationError::DuplicateStepKey {
                step_key: step_key.to_owned(),
            });
        }
        self.index.insert(step_key, self.run.steps.len());
        let step = WorkflowStepEnqueue::job(key, job_type, Cow::Borrowed(payload));
        self.run.steps.push(step);
        Ok(self)
    }

    /// Makes `step` wait until every step in `prerequisites` has succeeded; if one of them
    /// ends any other way, `step` is canceled.
    ///
    /// `step` must already have been added with [`job`](Self::job) (`workflow.unknown_step`
    /// otherwise), and no key may be blank. The prerequisites themselves may be added later in
    /// the chain: missing prerequisites, self-edges, repeated edges and cycles are reported by
    /// [`build`](Self::build).
    pub fn after_success(
        self,
        step: &'a str,
        prerequisites: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, WorkflowValidationError> {
        self.after(step, prerequisites, WorkflowDependencyCondition::Success)
    }

    /// Makes `step` wait until every step in `prerequisites` has finished, whatever the
    /// outcome — useful for cleanup or reporting steps.
    ///
    /// Checked exactly like [`after_success`](Self::after_success).
    pub fn after_terminal(
        self,
        step: &'a str,
        prerequisites: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, WorkflowValidationError> {
        self.after(step, prerequisites, WorkflowDependencyCondition::Terminal)
    }

    fn after(
        mut self,
        step: &'a str,
        prerequisites: impl IntoIterator<Item = &'a str>,
        condition: WorkflowDependencyCondition,
    ) -> Result<Self, WorkflowValidationError> {
        StepKey::try_new(step)?;
        let edges = prerequisites
            .into_iter()
            .map(|key| {
                Ok(WorkflowStepDependency {
                    prerequisite: StepKey::try_new(key)?,
                    condition,
                })
            })
            .collect::<Result<Vec<_>, WorkflowValidationError>>()?;
        let target = self
            .index
            .get(step)
            .and_then(|&position| self.run.steps.get_mut(position))
            .ok_or_else(|| WorkflowValidationError::UnknownStep {
                step_key: step.to_owned(),
            })?;
        target.dependencies.extend(edges);
        Ok(self)
    }

    /// Sets the deduplication key: enqueueing the same request again with this key returns
    /// the original run instead of starting a new one.
    ///
    /// Never fails; a blank or oversized key is reported by [`build`](Self::build)
    /// (`workflow.invalid_idempotency_key`).
    pub fn idempotency_key(mut self, key: &'a str) -> Self {
        self.run.idempotency_key = Some(Cow::Borrowed(key));
        self
    }

    /// Declares `step` as the step whose output becomes the run's result.
    ///
    /// Fails right away when the key is blank or no step with that key has been added yet
    /// (`workflow.unknown_result_step`).
    pub fn result_step(mut self, step: &'a str) -> Result<Self, WorkflowValidationError> {
        let key = StepKey::try_new(step)?;
        if !self.index.contains_key(step) {
            return Err(WorkflowValidationError::UnknownResultStep {
                step_key: step.to_owned(),
            });
        }
        self.run.result_step = Some(key);
        Ok(self)
    }

    /// Sets the organization that owns the run; its job steps inherit it.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.run.organization_id = Some(organization_id);
        self
    }

    /// Records the user who asked for the run.
    pub fn created_by_user_id(mut self, user_id: Uuid) -> Self {
        self.run.created_by_user_id = Some(user_id);
        self
    }

    /// Finishes the request and runs the deferred checks of
    /// [`WorkflowRunEnqueue::validate`]: workflow type, idempotency key, at least one step,
    /// every prerequisite present, no self-edges or repeated edges, and no cycles.
    ///
    /// ```
    /// use runledger_engine::core::jobs::WorkflowDagBuilder;
    ///
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let metadata = serde_json::json!({});
    /// let payload = serde_json::json!({});
    /// let err = WorkflowDagBuilder::new("reports.build", &metadata)
    ///     .job("render", "reports.render", &payload)?
    ///     .after_success("render", ["fetch"])? // "fetch" is never added
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.code(), "workflow.unknown_prerequisite");
    /// # Ok(()) }
    /// # demo().unwrap();
    /// ```
    pub fn build(self) -> Result<WorkflowRunEnqueue<'a>, WorkflowValidationError> {
        validated(self.run)
    }

    /// Same as [`build`](Self::build); kept as an alias for callers that prefer the `try_`
    /// spelling for fallible finishers.
    pub fn try_build(self) -> Result<WorkflowRunEnqueue<'a>, WorkflowValidationError> {
        self.build()
    }
}

/// Describes one workflow step with typed identifiers and optional job settings.
///
/// Building a step never fails; the step is checked together with the rest of the run by
/// [`WorkflowRunEnqueueBuilder::build`]. Job settings given to an external step are kept so
/// that check can reject them with `workflow.external_step_job_settings`.
///
/// ```
/// use runledger_engine::core::jobs::{
///     JobType, StepKey, WorkflowStepEnqueueBuilder, WorkflowStepKind,
/// };
///
/// let payload = serde_json::json!({"invoice_id": 7});
/// let step = WorkflowStepEnqueueBuilder::new(
///     StepKey::new("charge"),
///     JobType::new("billing.charge"),
///     &payload,
/// )
/// .priority(10)
/// .max_attempts(5)
/// .timeout_seconds(120)
/// .stage("billing")
/// .depends_on_success(StepKey::new("approval"))
/// .build();
///
/// assert_eq!(step.kind, WorkflowStepKind::Job);
/// assert_eq!(step.max_attempts, Some(5));
/// assert_eq!(step.dependencies.len(), 1);
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkflowStepEnqueueBuilder<'a> {
    step: WorkflowStepEnqueue<'a>,
}

impl<'a> WorkflowStepEnqueueBuilder<'a> {
    /// A job step that runs `job_type` with `payload`.
    pub fn new(step_key: StepKey<'a>, job_type: JobType<'a>, payload: &'a Value) -> Self {
        Self {
            step: WorkflowStepEnqueue::job(step_key, job_type, Cow::Borrowed(payload)),
        }
    }

    /// An external step: it runs no job and waits until it is completed from outside with
    /// `complete_external_workflow_step`.
    pub fn new_external(step_key: StepKey<'a>) -> Self {
        Self {
            step: WorkflowStepEnqueue::external(step_key),
        }
    }

    /// A fan-out step: it runs no job; one of its prerequisites fills it with children at run
    /// time (`fill_fan_out`), and it finishes once they have.
    pub fn new_fan_out(step_key: StepKey<'a>) -> Self {
        Self {
            step: WorkflowStepEnqueue::fan_out(step_key),
        }
    }

    /// Overrides the job's priority (job steps only).
    pub fn priority(mut self, priority: i32) -> Self {
        self.step.priority = Some(priority);
        self
    }

    /// Overrides the job's maximum number of attempts; must be positive (job steps only).
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.step.max_attempts = Some(max_attempts);
        self
    }

    /// Overrides the job's timeout in seconds; must be positive (job steps only).
    pub fn timeout_seconds(mut self, timeout_seconds: i32) -> Self {
        self.step.timeout_seconds = Some(timeout_seconds);
        self
    }

    /// Names an execution resource the step's job holds while it runs (job steps only): at
    /// most one job holding `key` runs at a time across all workers; others wait `PENDING`,
    /// spending no attempt.
    pub fn resource_key(mut self, key: &'a str) -> Self {
        self.step.resource_key = Some(Cow::Borrowed(key));
        self
    }

    /// Labels the step with a free-form stage name used to group steps in views.
    pub fn stage(mut self, stage: &'a str) -> Self {
        self.step.stage = Some(Cow::Borrowed(stage));
        self
    }

    /// Lets the step's job end attempts with a continuation (`JobContinuation`): the step
    /// stays open, and its dependents wait, until a run of the job finishes. Without it a
    /// continuation fails the attempt with `workflow.continuation_not_allowed`.
    pub fn allow_continuation(mut self) -> Self {
        self.step.allow_continuation = true;
        self
    }

    /// Runs the step's job under this organization instead of the run's.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.step.organization_id = Some(organization_id);
        self
    }

    /// Attaches free-form metadata to the step.
    pub fn metadata(mut self, metadata: &'a Value) -> Self {
        self.step.metadata = Cow::Borrowed(metadata);
        self
    }

    /// Adds one edge: the step waits for `prerequisite` to succeed. Call again for more.
    pub fn depends_on_success(self, prerequisite: StepKey<'a>) -> Self {
        self.depends_on(prerequisite, WorkflowDependencyCondition::Success)
    }

    /// Adds one edge: the step waits for `prerequisite` to finish with any outcome. Call
    /// again for more.
    pub fn depends_on_terminal(self, prerequisite: StepKey<'a>) -> Self {
        self.depends_on(prerequisite, WorkflowDependencyCondition::Terminal)
    }

    fn depends_on(
        mut self,
        prerequisite: StepKey<'a>,
        condition: WorkflowDependencyCondition,
    ) -> Self {
        self.step.dependencies.push(WorkflowStepDependency {
            prerequisite,
            condition,
        });
        self
    }

    /// Returns the step. Nothing is checked here; pass it to
    /// [`WorkflowRunEnqueueBuilder::step`].
    pub fn build(self) -> WorkflowStepEnqueue<'a> {
        self.step
    }
}

/// Assembles a workflow run request from steps made with [`WorkflowStepEnqueueBuilder`].
///
/// ```
/// use runledger_engine::core::jobs::{
///     JobType, StepKey, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
/// };
///
/// fn demo() -> Result<(), Box<dyn std::error::Error>> {
///     let metadata = serde_json::json!({});
///     let payload = serde_json::json!({"document_id": "d_9"});
///
///     let approval = WorkflowStepEnqueueBuilder::new_external(StepKey::new("approval")).build();
///     let publish = WorkflowStepEnqueueBuilder::new(
///         StepKey::new("publish"),
///         JobType::new("documents.publish"),
///         &payload,
///     )
///     .depends_on_success(StepKey::new("approval"))
///     .build();
///
///     let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("documents.review"), &metadata)
///         .idempotency_key("document:d_9:review")
///         .step(approval)
///         .step(publish)
///         .result_step(StepKey::new("publish"))
///         .build()?;
///     assert_eq!(run.steps.len(), 2);
///     Ok(())
/// }
/// demo().unwrap();
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkflowRunEnqueueBuilder<'a> {
    run: WorkflowRunEnqueue<'a>,
}

impl<'a> WorkflowRunEnqueueBuilder<'a> {
    /// Starts a run of `workflow_type` with run-level `metadata`.
    pub fn new(workflow_type: WorkflowType<'a>, metadata: &'a Value) -> Self {
        Self {
            run: empty_run(workflow_type, metadata),
        }
    }

    /// Sets the organization that owns the run.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.run.organization_id = Some(organization_id);
        self
    }

    /// Records the user who asked for the run.
    pub fn created_by_user_id(mut self, user_id: Uuid) -> Self {
        self.run.created_by_user_id = Some(user_id);
        self
    }

    /// Sets the deduplication key for the run.
    pub fn idempotency_key(mut self, key: &'a str) -> Self {
        self.run.idempotency_key = Some(Cow::Borrowed(key));
        self
    }

    /// Declares the step whose output becomes the run's result.
    pub fn result_step(mut self, step_key: StepKey<'a>) -> Self {
        self.run.result_step = Some(step_key);
        self
    }

    /// Claims the run's steps in the order of the run's age: each step job is due from the
    /// moment the run was enqueued, so with few slots an older run's next step goes before the
    /// first step of a newer run (`A1 B1 C1 A2 B2 C2`, not `A1 A2 B1 B2 C1 C2`). A retry's
    /// backoff still delays a step as usual. The queue's oldest-ready age counts such a step
    /// from the run's start.
    ///
    /// ```
    /// use runledger_engine::core::jobs::{
    ///     JobType, StepKey, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
    /// };
    ///
    /// let (metadata, payload) = (serde_json::json!({}), serde_json::json!({}));
    /// let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("orders.fulfil"), &metadata)
    ///     .run_first()
    ///     .step(
    ///         WorkflowStepEnqueueBuilder::new(StepKey::new("pick"), JobType::new("orders.pick"), &payload)
    ///             .build(),
    ///     )
    ///     .build()
    ///     .unwrap();
    /// assert!(run.run_first);
    /// ```
    pub fn run_first(mut self) -> Self {
        self.run.run_first = true;
        self
    }

    /// Appends a step; steps keep the order in which they are added.
    pub fn step(mut self, step: WorkflowStepEnqueue<'a>) -> Self {
        self.run.steps.push(step);
        self
    }

    /// Finishes the request and checks all of it with [`WorkflowRunEnqueue::validate`].
    pub fn build(self) -> Result<WorkflowRunEnqueue<'a>, WorkflowValidationError> {
        validated(self.run)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::jobs::WorkflowStepKind;

    fn code<T>(result: Result<T, WorkflowValidationError>) -> &'static str {
        match result {
            Ok(_) => "ok",
            Err(err) => err.code(),
        }
    }

    fn step<'r, 'a>(run: &'r WorkflowRunEnqueue<'a>, key: &str) -> &'r WorkflowStepEnqueue<'a> {
        run.steps
            .iter()
            .find(|s| s.step_key.as_str() == key)
            .unwrap()
    }

    fn edges(step: &WorkflowStepEnqueue<'_>) -> Vec<(String, WorkflowDependencyCondition)> {
        step.dependencies
            .iter()
            .map(|d| (d.prerequisite.to_string(), d.condition))
            .collect()
    }

    #[test]
    fn new_never_fails_and_blank_type_is_reported_at_build() {
        let meta = json!({});
        let payload = json!({});
        let dag = WorkflowDagBuilder::new("  ", &meta)
            .job("a", "jobs.a", &payload)
            .unwrap();
        assert_eq!(code(dag.build()), "workflow.invalid_workflow_type");
    }

    #[test]
    fn try_new_fails_on_blank_or_oversized_type() {
        let meta = json!({});
        let long = "w".repeat(256);
        assert_eq!(
            code(WorkflowDagBuilder::try_new("", &meta)),
            "workflow.invalid_workflow_type"
        );
        assert_eq!(
            code(WorkflowDagBuilder::try_new(&long, &meta)),
            "workflow.invalid_workflow_type"
        );
        assert!(WorkflowDagBuilder::try_new("ok.type", &meta).is_ok());
    }

    #[test]
    fn job_fails_immediately_on_blank_identifiers_and_duplicates() {
        let meta = json!({});
        let payload = json!({});
        let dag = || WorkflowDagBuilder::new("wf", &meta);
        assert_eq!(
            code(dag().job(" ", "jobs.a", &payload)),
            "workflow.invalid_step_key"
        );
        assert_eq!(code(dag().job("a", "", &payload)), "job.invalid_job_type");
        let twice = dag()
            .job("a", "jobs.a", &payload)
            .and_then(|d| d.job("a", "jobs.b", &payload));
        assert_eq!(code(twice), "workflow.duplicate_step_key");
    }

    #[test]
    fn after_fails_immediately_on_blank_keys_and_unknown_target() {
        let meta = json!({});
        let payload = json!({});
        let dag = || {
            WorkflowDagBuilder::new("wf", &meta)
                .job("a", "jobs.a", &payload)
                .unwrap()
        };
        assert_eq!(
            code(dag().after_success("", ["a"])),
            "workflow.invalid_step_key"
        );
        assert_eq!(
            code(dag().after_terminal("a", ["  "])),
            "workflow.invalid_step_key"
        );
        assert_eq!(
            code(dag().after_success("missing", ["a"])),
            "workflow.unknown_step"
        );
        assert_eq!(
            code(dag().after_terminal("missing", ["a"])),
            "workflow.unknown_step"
        );
    }

    #[test]
    fn graph_errors_are_deferred_to_build() {
        let meta = json!({});
        let payload = json!({});
        let dag = || {
            WorkflowDagBuilder::new("wf", &meta)
                .job("a", "jobs.a", &payload)
                .unwrap()
                .job("b", "jobs.b", &payload)
                .unwrap()
        };
        let missing = dag().after_success("b", ["nope"]).unwrap();
        assert_eq!(code(missing.build()), "workflow.unknown_prerequisite");
        let own = dag().after_success("a", ["a"]).unwrap();
        assert_eq!(code(own.build()), "workflow.self_dependency");
        let repeated = dag()
            .after_success("b", ["a"])
            .unwrap()
            .after_terminal("b", ["a"])
            .unwrap();
        assert_eq!(code(repeated.build()), "workflow.duplicate_dependency");
        let cycle = dag()
            .after_success("b", ["a"])
            .unwrap()
            .after_terminal("a", ["b"])
            .unwrap();
        assert_eq!(code(cycle.try_build()), "workflow.cycle");
    }

    #[test]
    fn a_cycle_names_its_first_step_in_key_order_and_a_wide_fan_in_is_no_cycle() {
        let payload = json!({});
        let meta = json!({});
        // c -> b -> a -> c is a cycle; d waits behind it.
        let cycle = WorkflowDagBuilder::new("t", &meta)
            .job("d", "j", &payload)
            .unwrap()
            .job("c", "j", &payload)
            .unwrap()
            .job("b", "j", &payload)
            .unwrap()
            .job("a", "j", &payload)
            .unwrap()
            .after_success("d", ["c"])
            .unwrap()
            .after_success("c", ["b"])
            .unwrap()
            .after_success("b", ["a"])
            .unwrap()
            .after_success("a", ["c"])
            .unwrap();
        match cycle.try_build() {
            Err(WorkflowValidationError::Cycle { step_key }) => assert_eq!(step_key, "a"),
            other => panic!("expected a cycle, got {other:?}"),
        }
        let keys: Vec<String> = (0..2_000).map(|n| format!("mid-{n}")).collect();
        let mut wide = WorkflowDagBuilder::new("t", &meta)
            .job("start", "j", &payload)
            .unwrap()
            .job("end", "j", &payload)
            .unwrap();
        for key in &keys {
            wide = wide
                .job(key, "j", &payload)
                .unwrap()
                .after_success(key, ["start"])
                .unwrap();
        }
        let wide = wide
            .after_success("end", keys.iter().map(String::as_str))
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(step(&wide, "end").dependencies.len(), 2_000);
    }

    #[test]
    fn blank_idempotency_key_is_deferred_to_build() {
        let meta = json!({});
        let payload = json!({});
        let dag = WorkflowDagBuilder::new("wf", &meta)
            .idempotency_key(" ")
            .job("a", "jobs.a", &payload)
            .unwrap();
        assert_eq!(code(dag.build()), "workflow.invalid_idempotency_key");
    }

    #[test]
    fn empty_workflow_is_rejected_at_build() {
        let meta = json!({});
        let dag = WorkflowDagBuilder::try_new("wf", &meta).unwrap();
        assert_eq!(code(dag.build()), "workflow.empty");
        let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf"), &meta);
        assert_eq!(code(run.build()), "workflow.empty");
    }

    #[test]
    fn prerequisites_may_be_added_later_in_the_chain() {
        let meta = json!({});
        let payload = json!({});
        let run = WorkflowDagBuilder::new("wf", &meta)
            .job("report", "jobs.report", &payload)
            .unwrap()
            .after_terminal("report", ["fetch"])
            .unwrap()
            .job("fetch", "jobs.fetch", &payload)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            edges(step(&run, "report")),
            [("fetch".to_owned(), WorkflowDependencyCondition::Terminal)]
        );
    }

    #[test]
    fn result_step_must_name_an_added_step() {
        let meta = json!({});
        let payload = json!({});
        let dag = || {
            WorkflowDagBuilder::new("wf", &meta)
                .job("a", "jobs.a", &payload)
                .unwrap()
        };
        assert_eq!(
            code(dag().result_step("later")),
            "workflow.unknown_result_step"
        );
        assert_eq!(code(dag().result_step("")), "workflow.invalid_step_key");
        let run = dag().result_step("a").unwrap().build().unwrap();
        assert_eq!(run.result_step, Some(StepKey::new("a")));
    }

    #[test]
    fn built_run_carries_steps_edges_and_run_fields() {
        let meta = json!({"source": "test"});
        let payload = json!({"n": 1});
        let org = Uuid::from_u128(1);
        let user = Uuid::from_u128(2);
        let run = WorkflowDagBuilder::new("wf", &meta)
            .organization_id(org)
            .created_by_user_id(user)
            .idempotency_key("key-1")
            .job("a", "jobs.a", &payload)
            .unwrap()
            .job("b", "jobs.b", &payload)
            .unwrap()
            .job("c", "jobs.c", &payload)
            .unwrap()
            .after_success("c", ["a"])
            .unwrap()
            .after_terminal("c", ["b"])
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(run.organization_id, Some(org));
        assert_eq!(run.created_by_user_id, Some(user));
        assert_eq!(run.idempotency_key.as_deref(), Some("key-1"));
        assert_eq!(run.metadata.as_ref(), &meta);
        let keys: Vec<&str> = run.steps.iter().map(|s| s.step_key.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert!(edges(step(&run, "a")).is_empty());
        assert_eq!(
            edges(step(&run, "c")),
            [
                ("a".to_owned(), WorkflowDependencyCondition::Success),
                ("b".to_owned(), WorkflowDependencyCondition::Terminal),
            ]
        );
        let c = step(&run, "c");
        assert_eq!(c.kind, WorkflowStepKind::Job);
        assert_eq!(c.job_type, Some(JobType::new("jobs.c")));
        assert_eq!(c.payload.as_ref(), &payload);
    }

    #[test]
    fn step_builder_sets_every_field() {
        let payload = json!({"x": 1});
        let meta = json!({"m": true});
        let org = Uuid::from_u128(3);
        let step = WorkflowStepEnqueueBuilder::new(StepKey::new("s"), JobType::new("j"), &payload)
            .priority(-4)
            .max_attempts(3)
            .timeout_seconds(30)
            .stage("stage-1")
            .organization_id(org)
            .metadata(&meta)
            .depends_on_success(StepKey::new("p1"))
            .depends_on_terminal(StepKey::new("p2"))
            .depends_on_success(StepKey::new("p3"))
            .build();
        assert_eq!(step.kind, WorkflowStepKind::Job);
        assert_eq!(
            (step.priority, step.max_attempts, step.timeout_seconds),
            (Some(-4), Some(3), Some(30))
        );
        assert_eq!(step.stage.as_deref(), Some("stage-1"));
        assert_eq!(step.organization_id, Some(org));
        assert_eq!(step.metadata.as_ref(), &meta);
        assert_eq!(
            edges(&step),
            [
                ("p1".to_owned(), WorkflowDependencyCondition::Success),
                ("p2".to_owned(), WorkflowDependencyCondition::Terminal),
                ("p3".to_owned(), WorkflowDependencyCondition::Success),
            ]
        );
    }

    #[test]
    fn external_step_with_job_settings_is_rejected_at_run_build() {
        let meta = json!({});
        let settings: [fn(WorkflowStepEnqueueBuilder<'_>) -> WorkflowStepEnqueueBuilder<'_>; 3] = [
            |s| s.priority(1),
            |s| s.max_attempts(2),
            |s| s.timeout_seconds(3),
        ];
        for setting in settings {
            let gate = setting(WorkflowStepEnqueueBuilder::new_external(StepKey::new(
                "gate",
            )));
            let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf"), &meta)
                .step(gate.build())
                .build();
            assert_eq!(code(run), "workflow.external_step_job_settings");
        }
        let plain = WorkflowStepEnqueueBuilder::new_external(StepKey::new("gate"))
            .stage("approval")
            .build();
        assert_eq!(plain.kind, WorkflowStepKind::External);
        let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf"), &meta)
            .step(plain)
            .build();
        assert!(run.is_ok());
    }

    #[test]
    fn run_builder_validates_graph_and_result_step() {
        let meta = json!({});
        let payload = json!({});
        let job = |key: &'static str| {
            WorkflowStepEnqueueBuilder::new(StepKey::new(key), JobType::new("jobs.x"), &payload)
        };
        let base = || WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf"), &meta);
        let cycle = base()
            .step(job("a").depends_on_success(StepKey::new("b")).build())
            .step(job("b").depends_on_terminal(StepKey::new("a")).build())
            .build();
        assert_eq!(code(cycle), "workflow.cycle");
        let unknown = base()
            .step(job("a").build())
            .result_step(StepKey::new("z"))
            .build();
        assert_eq!(code(unknown), "workflow.unknown_result_step");
        let org = Uuid::from_u128(9);
        let run = base()
            .organization_id(org)
            .created_by_user_id(org)
            .idempotency_key("k")
            .step(job("a").build())
            .result_step(StepKey::new("a"))
            .build()
            .unwrap();
        assert_eq!(run.organization_id, Some(org));
        assert_eq!(run.created_by_user_id, Some(org));
        assert_eq!(run.idempotency_key.as_deref(), Some("k"));
    }

    #[test]
    fn canonical_snapshot_ignores_declaration_order() {
        let meta = json!({"source": "api"});
        let payload = json!({"id": 1});
        let first = WorkflowDagBuilder::new("wf", &meta)
            .job("a", "jobs.a", &payload)
            .unwrap()
            .job("b", "jobs.b", &payload)
            .unwrap()
            .job("c", "jobs.c", &payload)
            .unwrap()
            .after_success("c", ["a", "b"])
            .unwrap()
            .build()
            .unwrap();
        let second = WorkflowDagBuilder::new("wf", &meta)
            .job("c", "jobs.c", &payload)
            .unwrap()
            .after_success("c", ["b", "a"])
            .unwrap()
            .job("b", "jobs.b", &payload)
            .unwrap()
            .job("a", "jobs.a", &payload)
            .unwrap()
            .build()
            .unwrap();
        assert_ne!(first.steps, second.steps);
        assert_eq!(first.canonical_snapshot(), second.canonical_snapshot());
        let other = WorkflowDagBuilder::new("wf", &meta)
            .job("c", "jobs.c", &payload)
            .unwrap()
            .after_terminal("c", ["b", "a"])
            .unwrap()
            .job("b", "jobs.b", &payload)
            .unwrap()
            .job("a", "jobs.a", &payload)
            .unwrap()
            .build()
            .unwrap();
        assert_ne!(first.canonical_snapshot(), other.canonical_snapshot());
    }
}
