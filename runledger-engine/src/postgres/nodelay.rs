//! `TCP_NODELAY` on the process's database connections.
//!
//! sqlx 0.9.0 opens TCP connections with Nagle's algorithm on (sqlx issue 4335), and offers no
//! hook on its sockets. A statement larger than one TCP segment then holds its last segment
//! until the server acknowledges the others, which a Linux server delays by 40 ms: a 1,000-job
//! batch enqueue over loopback took 55 ms instead of 14, and over a network (segments of about
//! 1,460 bytes) any statement past that size can pay the same delay. libpq turns the algorithm
//! off on every connection; this module does the same for sqlx's connections.
//!
//! [`use_tcp_nodelay`] registers a pool's port; from then on the process's TCP sockets connected
//! to a registered port get `TCP_NODELAY`, found by listing `/proc/self/fd`. Runledger registers
//! the pools it is given (workers, supervisors, connection checks) and looks again, at most
//! every 200 ms, when it enqueues, claims or completes, so connections a pool opens
//! later are covered within moments. Before a statement that is sure to span several segments
//! (a batch of jobs, a workflow's steps and edges) it looks at once, on the connection it is
//! about to use: a connection opened since the last look would otherwise make that statement
//! wait for the delayed acknowledgements (a 1 -> 1,000 -> 1 workflow's enqueue, its steps and
//! edges about 150 KB, took 90 to 95 ms instead of 40 on a connection the pool had opened since
//! the last look). Linux only; elsewhere these calls do nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// The least time between two looks at the process's sockets from the hot paths.
const SWEEP_INTERVAL: Duration = Duration::from_millis(200);

/// Ports of registered pools (the server side of the connection).
static PORTS: Mutex<Vec<u16>> = Mutex::new(Vec::new());
/// When the last look ended, in milliseconds since [`epoch`] (0: never).
static LAST_SWEEP_MS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Turns Nagle's algorithm off on `pool`'s TCP connections: those open now, and those it opens
/// later as Runledger meets them. Workers and supervisors call this for the pool they are given;
/// call it yourself for a pool that only enqueues, in a process that never builds a worker.
/// Does nothing for a Unix-socket pool, or on an operating system other than Linux.
///
/// ```no_run
/// # fn demo(pool: sqlx::PgPool) {
/// runledger_engine::postgres::use_tcp_nodelay(&pool);
/// # }
/// ```
pub fn use_tcp_nodelay(pool: &PgPool) {
    let options = pool.connect_options();
    if options.get_socket().is_some() {
        return;
    }
    let port = options.get_port();
    let Ok(mut ports) = PORTS.lock() else {
        return;
    };
    if !ports.contains(&port) {
        ports.push(port);
    }
    drop(ports);
    sweep_now();
}

/// Looks for new connections to the registered ports, unless a look happened within
/// [`SWEEP_INTERVAL`]. Cheap enough for every statement of a hot path.
pub(crate) fn refresh() {
    let last = LAST_SWEEP_MS.load(Ordering::Relaxed);
    if last == 0 {
        return; // nothing registered
    }
    let now = elapsed_ms();
    if now.saturating_sub(last) < SWEEP_INTERVAL.as_millis() as u64 {
        return;
    }
    if LAST_SWEEP_MS
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return; // another task is looking
    }
    sweep_registered();
}

/// Looks for new connections to the registered ports now, whatever the interval: before a
/// statement large enough to span several TCP segments, on a connection already acquired.
pub(crate) fn refresh_now() {
    if LAST_SWEEP_MS.load(Ordering::Relaxed) == 0 {
        return; // nothing registered
    }
    sweep_now();
}

/// Runs `opening` (a future that opens connections), looking for new connections every
/// millisecond meanwhile and once more at its end.
///
/// sqlx's TLS handshake writes each TLS record on its own, so with Nagle's algorithm still on
/// the client's last handshake records wait for the server's delayed acknowledgement, twice:
/// about 90 ms per connection instead of a few. A connection's handshake starts a few
/// milliseconds after its socket, once the server has started a backend for it, so a look every
/// millisecond turns the algorithm off before it can hold anything back.
pub(crate) async fn sweeping<F: std::future::Future>(opening: F) -> F::Output {
    if LAST_SWEEP_MS.load(Ordering::Relaxed) == 0 {
        return opening.await; // nothing registered
    }
    let mut opening = std::pin::pin!(opening);
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let output = loop {
        tokio::select! {
            output = &mut opening => break output,
            _ = ticks.tick() => sweep_now(),
        }
    };
    sweep_now();
    output
}

/// Looks now and records when.
fn sweep_now() {
    sweep_registered();
    LAST_SWEEP_MS.store(elapsed_ms(), Ordering::Relaxed);
}

fn sweep_registered() {
    let ports = match PORTS.lock() {
        Ok(ports) => ports.clone(),
        Err(_) => return,
    };
    sweep(&ports);
}

/// Milliseconds since [`epoch`], at least 1 so that 0 keeps meaning "never".
fn elapsed_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(target_os = "linux")]
fn sweep(ports: &[u16]) {
    use std::os::unix::ffi::OsStrExt;

    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str().as_bytes().starts_with(b"socket:"));
        if is_socket && peer_port(fd).is_some_and(|port| ports.contains(&port)) {
            set_nodelay(fd);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn sweep(_ports: &[u16]) {}

/// The remote port of a connected IPv4 or IPv6 socket.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn peer_port(fd: i32) -> Option<u16> {
    // SAFETY: getpeername writes at most `len` bytes into `storage`, a zeroed
    // sockaddr_storage that outlives the call; the cast reads the family-specific struct
    // only after checking the family the kernel wrote. `fd` is only a number: if another
    // thread closed it meanwhile the call fails with EBADF, or names whatever socket now
    // holds the number, which is then judged by its own peer port.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let address = std::ptr::addr_of_mut!(storage).cast::<libc::sockaddr>();
        if libc::getpeername(fd, address, &mut len) != 0 {
            return None;
        }
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                let v4 = &*std::ptr::addr_of!(storage).cast::<libc::sockaddr_in>();
                Some(u16::from_be(v4.sin_port))
            }
            libc::AF_INET6 => {
                let v6 = &*std::ptr::addr_of!(storage).cast::<libc::sockaddr_in6>();
                Some(u16::from_be(v6.sin6_port))
            }
            _ => None,
        }
    }
}

/// Sets `TCP_NODELAY`; a failure (not a TCP socket, closed meanwhile) changes nothing.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn set_nodelay(fd: i32) {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `on`, which outlives the call.
    // Turning Nagle's algorithm off changes only when data leaves, never what is sent.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            std::ptr::addr_of!(on).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn nodelay(fd: i32) -> bool {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `value`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                std::ptr::addr_of_mut!(value).cast::<libc::c_void>(),
                &mut len,
            )
        };
        rc == 0 && value != 0
    }

    #[test]
    fn sweep_sets_nodelay_only_on_sockets_to_the_given_port() {
        use std::os::fd::AsRawFd;

        let database = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to_database = std::net::TcpStream::connect(database.local_addr().unwrap()).unwrap();
        let to_other = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!nodelay(to_database.as_raw_fd()));

        sweep(&[database.local_addr().unwrap().port()]);

        assert!(nodelay(to_database.as_raw_fd()));
        assert!(!nodelay(to_other.as_raw_fd()));
    }

    #[test]
    fn a_connection_opened_just_after_a_look_is_covered_by_the_next_look_now_only() {
        use std::os::fd::AsRawFd;

        let database = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        if let Ok(mut ports) = PORTS.lock() {
            ports.push(database.local_addr().unwrap().port());
        }
        LAST_SWEEP_MS.store(elapsed_ms(), Ordering::Relaxed);
        let fresh = std::net::TcpStream::connect(database.local_addr().unwrap()).unwrap();

        refresh();
        assert!(
            !nodelay(fresh.as_raw_fd()),
            "the hot paths' look waits for its interval"
        );
        refresh_now();
        assert!(nodelay(fresh.as_raw_fd()));
    }

    #[tokio::test]
    async fn a_socket_opened_while_connections_open_gets_nodelay_before_they_are_open() {
        use std::os::fd::AsRawFd;

        let database = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        if let Ok(mut ports) = PORTS.lock() {
            ports.push(database.local_addr().unwrap().port());
        }
        LAST_SWEEP_MS.store(elapsed_ms(), Ordering::Relaxed);

        // Stands for a connection whose handshake is still under way: its socket is open and
        // the future opening it has not finished.
        let covered_while_opening = sweeping(async {
            let socket = std::net::TcpStream::connect(database.local_addr().unwrap()).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            nodelay(socket.as_raw_fd())
        })
        .await;

        assert!(covered_while_opening);
    }
}
