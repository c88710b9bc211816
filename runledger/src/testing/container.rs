//! One PostgreSQL container shared by the test databases of a test binary that exist at the
//! same time (feature `testcontainers`).
//!
//! Statics are never dropped, so a container held in one would outlive the process. Instead
//! the container lives on a keeper thread, with a runtime of its own (tests each have theirs,
//! and the Docker client must not hop between runtimes), for as long as a test database holds
//! a reference; the last reference stops and removes it.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;

use sqlx::postgres::PgConnectOptions;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};

/// The image used unless `RUNLEDGER_TEST_PG_IMAGE` names another (`name:tag`).
pub(super) const DEFAULT_IMAGE: &str = "postgres:16-alpine";

const READY: &str = "database system is ready to accept connections";

static SHARED: Mutex<Weak<SharedContainer>> = Mutex::new(Weak::new());

/// A running container and the thread that owns it.
#[derive(Debug)]
pub(super) struct SharedContainer {
    image: String,
    options: PgConnectOptions,
    stop: Mutex<Option<mpsc::Sender<()>>>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl SharedContainer {
    /// The running container, started if none is.
    pub(super) async fn get() -> Result<Arc<Self>, String> {
        if let Some(running) = lock(&SHARED).upgrade() {
            return Ok(running);
        }
        let image = std::env::var("RUNLEDGER_TEST_PG_IMAGE")
            .ok()
            .filter(|image| !image.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
        // Starting takes seconds: do it off the caller's runtime.
        let started = tokio::task::spawn_blocking(move || Self::start(&image))
            .await
            .map_err(|err| format!("the container keeper failed: {err}"))??;
        let mut shared = lock(&SHARED);
        // Another test may have started one meanwhile; keep the first, stop ours.
        if let Some(running) = shared.upgrade() {
            return Ok(running);
        }
        let started = Arc::new(started);
        *shared = Arc::downgrade(&started);
        Ok(started)
    }

    /// Starts the container on a keeper thread and waits until PostgreSQL accepts connections.
    fn start(image: &str) -> Result<Self, String> {
        let (name, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
        let request = GenericImage::new(name, tag)
            .with_exposed_port(5432.tcp())
            // The image's first-start initialization runs a temporary server that logs the
            // same line on stdout; the real server logs it on stderr.
            .with_wait_for(WaitFor::message_on_stdout(READY))
            .with_wait_for(WaitFor::message_on_stderr(READY))
            .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust");
        let (ready_tx, ready_rx) = mpsc::channel::<Result<PgConnectOptions, String>>();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let keeper = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = ready_tx.send(Err(format!("no runtime for the container: {err}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let container = match request.start().await {
                    Ok(container) => container,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err.to_string()));
                        return;
                    }
                };
                let address = async {
                    let host = container.get_host().await?;
                    let port = container.get_host_port_ipv4(5432.tcp()).await?;
                    Ok::<_, testcontainers::TestcontainersError>((host.to_string(), port))
                };
                let options = address
                    .await
                    .map_err(|err| err.to_string())
                    .map(|(host, port)| {
                        PgConnectOptions::new()
                            .host(&host)
                            .port(port)
                            .username("postgres")
                            .database("postgres")
                    });
                let _ = ready_tx.send(options);
                // Hold the container until the last test database lets go.
                let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                if let Err(err) = container.rm().await {
                    tracing::warn!(error = %err, "the PostgreSQL test container was not removed");
                }
            });
        });
        let options = match ready_rx.recv() {
            Ok(Ok(options)) => options,
            Ok(Err(err)) => {
                let _ = keeper.join();
                return Err(err);
            }
            Err(_) => {
                let _ = keeper.join();
                return Err("the container keeper stopped before the container was ready".into());
            }
        };
        Ok(Self {
            image: image.to_owned(),
            options,
            stop: Mutex::new(Some(stop_tx)),
            keeper: Mutex::new(Some(keeper)),
        })
    }

    /// The image it runs, `name:tag`.
    pub(super) fn image(&self) -> &str {
        &self.image
    }

    /// Options reaching the container's `postgres` database as the superuser.
    pub(super) fn options(&self) -> &PgConnectOptions {
        &self.options
    }
}

impl Drop for SharedContainer {
    fn drop(&mut self) {
        drop(lock(&self.stop).take());
        if let Some(keeper) = lock(&self.keeper).take() {
            let _ = keeper.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
