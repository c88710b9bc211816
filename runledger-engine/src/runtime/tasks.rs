//! The task tree of a runtime component: one root cancellation token, one tracker that owns
//! every task the component starts, and a drop guard. Every task is spawned through the tree
//! and stops at its next await point once the root is cancelled, so dropping the owner (a
//! `Supervisor`, a running `WorkerLoop`) or finishing its shutdown leaves no task behind.
//! Graceful stages (stop claiming, drop handlers) are child tokens of the root.

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

/// Owns the tasks of one component; dropping it cancels them all.
pub(crate) struct TaskTree {
    spawner: TaskSpawner,
    _cancel_on_drop: DropGuard,
}

impl TaskTree {
    /// An empty tree with a fresh root.
    pub(crate) fn new() -> Self {
        let root = CancellationToken::new();
        Self {
            _cancel_on_drop: root.clone().drop_guard(),
            spawner: TaskSpawner {
                root,
                tracker: TaskTracker::new(),
            },
        }
    }

    /// A cloneable handle that spawns into this tree.
    pub(crate) fn spawner(&self) -> &TaskSpawner {
        &self.spawner
    }

    /// Cancels the root (and so every child token and task) and waits until every task of the
    /// tree has ended. Tasks end at their next await point, so this returns promptly.
    pub(crate) async fn stop(&self) {
        self.spawner.root.cancel();
        self.spawner.tracker.close();
        self.spawner.tracker.wait().await;
    }

    /// Tasks still running.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.spawner.tracker.len()
    }
}

/// Spawns tasks into a [`TaskTree`].
#[derive(Clone)]
pub(crate) struct TaskSpawner {
    root: CancellationToken,
    tracker: TaskTracker,
}

impl TaskSpawner {
    /// A token cancelled with the root, that can also be cancelled on its own (a shutdown
    /// stage).
    pub(crate) fn child_token(&self) -> CancellationToken {
        self.root.child_token()
    }

    /// Spawns `future` as a task of the tree; it is dropped (returning `None`) when the root is
    /// cancelled before it finishes.
    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(self.cancellable(future))
    }

    /// `future` tracked by the tree and dropped when the root is cancelled, for callers that
    /// spawn it themselves (into a `JoinSet`).
    pub(crate) fn cancellable<F>(
        &self,
        future: F,
    ) -> impl Future<Output = Option<F::Output>> + Send + use<F>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let root = self.root.clone();
        self.tracker.track_future(async move {
            tokio::select! {
                biased;
                () = root.cancelled() => None,
                output = future => Some(output),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn dropping_the_tree_ends_every_task() {
        let tree = TaskTree::new();
        let spawner = tree.spawner().clone();
        let stage = spawner.child_token();
        let forever = spawner.spawn(std::future::pending::<()>());
        let nested = spawner.clone();
        let parent = spawner.spawn(async move {
            nested.spawn(std::future::pending::<()>());
            std::future::pending::<()>().await;
        });
        while tree.len() < 3 {
            tokio::task::yield_now().await;
        }
        drop(tree);
        assert_eq!(forever.await.ok(), Some(None));
        assert_eq!(parent.await.ok(), Some(None));
        assert!(stage.is_cancelled());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !spawner.tracker.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "a task outlived its tree"
            );
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn stop_waits_for_the_tasks_and_finished_tasks_keep_their_output() {
        let tree = TaskTree::new();
        let done = tree.spawner().spawn(async { 7 });
        assert_eq!(done.await.ok(), Some(Some(7)));
        tree.spawner().spawn(std::future::pending::<()>());
        tree.stop().await;
        assert_eq!(tree.len(), 0);
    }
}
