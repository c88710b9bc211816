//! A pseudo-terminal driver for the dashboard's tests: starts the binary on a 40×160 terminal in
//! a session of its own, types keys, and reads the screen as a user would see it (through a
//! VT100 model, not the raw byte stream). Every wait has a deadline; a failed wait shows the
//! screen.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::num::NonZeroU16;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, Signal, kill_process};
use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};

const ROWS: NonZeroU16 = NonZeroU16::new(40).unwrap();
const COLS: NonZeroU16 = NonZeroU16::new(160).unwrap();
const DEADLINE: Duration = Duration::from_secs(20);

/// The binary running on a pseudo-terminal.
pub struct Terminal {
    /// The terminal's master side; `None` once hung up.
    master: Option<OwnedFd>,
    child: Child,
    screen: vt100::Parser,
    /// Everything the program wrote, to check how it left the terminal.
    raw: Vec<u8>,
}

impl Terminal {
    /// Starts `binary` with `args` (through `setsid`, so it has a session of its own and never
    /// reaches the terminal the tests run in).
    pub fn start(binary: &str, args: &[&str]) -> Self {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .expect("a pseudo-terminal");
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave: File = OpenOptions::new()
            .read(true)
            .write(true)
            .open(OsStr::new(name.to_str().unwrap()))
            .unwrap();
        let size = Winsize {
            ws_row: ROWS.get(),
            ws_col: COLS.get(),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        tcsetwinsize(&slave, size).unwrap();
        let child = Command::new("setsid")
            .arg(binary)
            .args(args)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("setsid and the binary start");
        Self {
            master: Some(master),
            child,
            screen: vt100::Parser::new(ROWS, COLS, 0),
            raw: Vec::new(),
        }
    }

    /// The screen's text, one line per row.
    pub fn text(&self) -> String {
        self.screen.screen().contents()
    }

    /// Reads what the program wrote for up to `timeout`; `false` when the terminal is closed.
    fn pump(&mut self, timeout: Duration) -> bool {
        let Some(master) = &self.master else {
            std::thread::sleep(timeout);
            return false;
        };
        let wait = Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [PollFd::new(master, PollFlags::IN)];
        match poll(&mut fds, Some(&wait)) {
            Ok(0) => true,
            Ok(_) => {
                let mut buf = [0_u8; 65_536];
                match rustix::io::read(master, &mut buf) {
                    Ok(0) | Err(_) => false,
                    Ok(n) => {
                        self.screen.process(&buf[..n]);
                        self.raw.extend_from_slice(&buf[..n]);
                        true
                    }
                }
            }
            Err(_) => false,
        }
    }

    fn fail(&mut self, message: &str) -> ! {
        let _ = self.child.kill();
        panic!("{message}\n----- screen -----\n{}", self.text());
    }

    /// Waits until `text` is on the screen.
    pub fn wait_for(&mut self, text: &str) -> &mut Self {
        let deadline = Instant::now() + DEADLINE;
        while !self.text().contains(text) {
            if Instant::now() > deadline {
                self.fail(&format!("timed out waiting for {text:?}"));
            }
            if !self.pump(Duration::from_millis(100))
                && let Ok(Some(status)) = self.child.try_wait()
            {
                self.fail(&format!(
                    "the program exited ({status}) while waiting for {text:?}"
                ));
            }
        }
        self
    }

    /// Types `keys`.
    pub fn keys(&mut self, keys: &str) -> &mut Self {
        let master = self.master.as_ref().expect("the terminal is open");
        let mut bytes = keys.as_bytes();
        while !bytes.is_empty() {
            let written = rustix::io::write(master, bytes).unwrap();
            bytes = &bytes[written..];
        }
        self
    }

    /// Waits for the program to exit, reading what it writes on the way out.
    fn wait_exit(&mut self, after: &str) -> ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while self.pump(Duration::from_millis(50)) {}
                return status;
            }
            if Instant::now() > deadline {
                self.fail(&format!("did not exit after {after}"));
            }
            self.pump(Duration::from_millis(100));
        }
    }

    /// Presses `q` and waits for the exit.
    pub fn quit(&mut self) -> ExitStatus {
        self.keys("q");
        self.wait_exit("q")
    }

    /// Sends `signal` and waits for the exit.
    pub fn signal(&mut self, signal: Signal) -> ExitStatus {
        kill_process(Pid::from_child(&self.child), signal).unwrap();
        self.wait_exit("the signal")
    }

    /// Closes the terminal as a closed window or a killed tmux session does, and waits for the
    /// exit.
    pub fn hang_up(&mut self) -> ExitStatus {
        self.master = None;
        self.wait_exit("the terminal hung up")
    }

    /// Whether the program left the alternate screen and showed the cursor again.
    pub fn restored(&self) -> bool {
        let raw = String::from_utf8_lossy(&self.raw);
        raw.contains("\x1b[?1049l") && raw.contains("\x1b[?25h")
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
