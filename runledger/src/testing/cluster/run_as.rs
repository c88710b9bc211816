//! Who runs the cluster's commands: this process's user, or, under root (which `initdb`
//! refuses), the `postgres` system user that PostgreSQL's packages create.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The system user a cluster runs as under root.
const SYSTEM_USER: &str = "postgres";

/// How to start the cluster's shell script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunAs {
    /// Directly.
    CurrentUser,
    /// As the `postgres` system user, through `runuser`, `setpriv` or `su`.
    SystemUser {
        /// Its user id, which must own the cluster's directory.
        uid: u32,
        /// Its group id.
        gid: u32,
        /// The program that switches to it.
        switch: Switch,
    },
}

/// A program that runs a command as another user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Switch {
    /// `runuser -u postgres -- sh -c ..` (util-linux).
    Runuser(PathBuf),
    /// `setpriv --reuid .. --regid .. --clear-groups sh -c ..` (util-linux).
    Setpriv(PathBuf),
    /// `su -s /bin/sh -c .. postgres`.
    Su(PathBuf),
}

impl RunAs {
    /// What this process needs: itself, unless it runs as root.
    pub(crate) fn for_this_process() -> Result<Self, String> {
        if !running_as_root() {
            return Ok(Self::CurrentUser);
        }
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let (uid, gid) = passwd_ids(&passwd, SYSTEM_USER)
            .or_else(|| Some((id_number("-u")?, id_number("-g")?)))
            .ok_or_else(|| {
                format!(
                    "running as root, which initdb refuses, and there is no `{SYSTEM_USER}` \
                     system user to run it as"
                )
            })?;
        let switch = find_program("runuser")
            .map(Switch::Runuser)
            .or_else(|| find_program("setpriv").map(Switch::Setpriv))
            .or_else(|| find_program("su").map(Switch::Su))
            .ok_or("running as root and none of runuser, setpriv or su is installed")?;
        Ok(Self::SystemUser { uid, gid, switch })
    }

    /// Hands `dir` to the user the commands run as.
    pub(crate) fn take_ownership(&self, dir: &Path) -> Result<(), String> {
        match self {
            Self::CurrentUser => Ok(()),
            Self::SystemUser { uid, gid, .. } => {
                std::os::unix::fs::chown(dir, Some(*uid), Some(*gid)).map_err(|err| {
                    format!("could not give {} to `{SYSTEM_USER}`: {err}", dir.display())
                })
            }
        }
    }

    /// A command running the shell `script` as that user.
    pub(crate) fn shell(&self, script: &str) -> Command {
        let mut command;
        match self {
            Self::CurrentUser => {
                command = Command::new("sh");
            }
            Self::SystemUser {
                switch: Switch::Runuser(runuser),
                ..
            } => {
                command = Command::new(runuser);
                command.args(["-u", SYSTEM_USER, "--", "sh"]);
            }
            Self::SystemUser {
                uid,
                gid,
                switch: Switch::Setpriv(setpriv),
            } => {
                command = Command::new(setpriv);
                command
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .args(["--clear-groups", "sh"]);
            }
            Self::SystemUser {
                switch: Switch::Su(su),
                ..
            } => {
                command = Command::new(su);
                command.args(["-s", "/bin/sh", "-c", script, SYSTEM_USER]);
                return command;
            }
        }
        command.args([OsStr::new("-c"), OsStr::new(script)]);
        command
    }
}

/// Whether this process runs as root: the owner of `/proc/self`, else what `id -u` says.
fn running_as_root() -> bool {
    match std::fs::metadata("/proc/self") {
        Ok(metadata) => metadata.uid() == 0,
        Err(_) => id_number_of("-u", None) == Some(0),
    }
}

/// `user`'s user and group ids in the text of `/etc/passwd`.
pub(crate) fn passwd_ids(passwd: &str, user: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != user {
            return None;
        }
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

fn id_number(flag: &str) -> Option<u32> {
    id_number_of(flag, Some(SYSTEM_USER))
}

/// `id <flag> [user]`.
fn id_number_of(flag: &str, user: Option<&str>) -> Option<u32> {
    let output = Command::new("id").arg(flag).args(user).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()?.trim().parse().ok()
}

/// `name` in `PATH` or in the system directories root's `PATH` usually has.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|program| program.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_users_ids_are_read_from_etc_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      postgresql:x:7:7::/:/bin/false\n\
                      postgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(passwd_ids(passwd, "postgres"), Some((101, 104)));
        assert_eq!(passwd_ids(passwd, "nobody"), None);
        assert_eq!(passwd_ids("postgres:x:abc:1:::", "postgres"), None);
    }

    #[test]
    fn under_root_the_script_runs_through_runuser_setpriv_or_su() {
        let args = |run_as: RunAs| -> Vec<String> {
            let command = run_as.shell("echo hi");
            std::iter::once(command.get_program())
                .chain(command.get_args())
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect()
        };
        let as_postgres = |switch| RunAs::SystemUser {
            uid: 101,
            gid: 104,
            switch,
        };
        assert_eq!(args(RunAs::CurrentUser), ["sh", "-c", "echo hi"]);
        assert_eq!(
            args(as_postgres(Switch::Runuser("/sbin/runuser".into()))),
            [
                "/sbin/runuser",
                "-u",
                "postgres",
                "--",
                "sh",
                "-c",
                "echo hi"
            ]
        );
        assert_eq!(
            args(as_postgres(Switch::Setpriv("/bin/setpriv".into()))),
            [
                "/bin/setpriv",
                "--reuid=101",
                "--regid=104",
                "--clear-groups",
                "sh",
                "-c",
                "echo hi"
            ]
        );
        assert_eq!(
            args(as_postgres(Switch::Su("/bin/su".into()))),
            ["/bin/su", "-s", "/bin/sh", "-c", "echo hi", "postgres"]
        );
    }
}
