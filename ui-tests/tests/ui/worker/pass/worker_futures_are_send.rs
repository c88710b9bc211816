// Every future of the worker API can be spawned on a multi-threaded runtime, so a worker can run
// beside a web server in the same process. The ones that need a database run against a closed
// port and must come back with the connection error; `shutdown` needs a started worker, so it is
// only spawned in a function the compiler checks.
use std::time::Duration;

use runledger::prelude::*;
use runledger::RunningWorker;

#[job(name = "send_check.noop")]
async fn noop() -> Result<(), JobError> {
    Ok(())
}

fn closed_port_worker() -> Worker {
    let pool = runledger::sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://app@127.0.0.1:1/app")
        .unwrap();
    Worker::builder(&pool)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn assert_refused(result: Result<Result<(), runledger::Error>, tokio::task::JoinError>) {
    let err = result.unwrap().unwrap_err();
    assert_eq!(err.code(), "connection.refused", "{err}");
}

#[allow(dead_code)]
fn spawn_shutdown(running: RunningWorker) -> tokio::task::JoinHandle<Result<(), runledger::Error>> {
    tokio::spawn(running.shutdown())
}

fn main() {
    let _ = Noop {};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let worker = closed_port_worker();
        assert_refused(tokio::spawn(async move { worker.prepare().await }).await);

        let started = tokio::spawn(closed_port_worker().start());
        assert_refused(started.await.map(|result| result.map(|_running| ())));

        let signal = async { tokio::time::sleep(Duration::from_secs(60)).await };
        assert_refused(tokio::spawn(closed_port_worker().run_until(signal)).await);

        assert_refused(tokio::spawn(closed_port_worker().run_until_ctrl_c()).await);

        // The pattern of a service that embeds its worker.
        let embedded = tokio::spawn(async {
            let worker = closed_port_worker();
            worker.run_until_ctrl_c().await
        });
        assert_refused(embedded.await);
    });
}
