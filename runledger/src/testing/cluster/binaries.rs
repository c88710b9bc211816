//! Finding the PostgreSQL server binaries (`initdb` and `postgres`, 14 or newer) installed on
//! the machine.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest major version Runledger's schema runs on.
pub(crate) const MIN_MAJOR: u32 = 14;

/// Where the search looks, named in the message when nothing is found.
const LOOKED_IN: &str = "PATH, `pg_config --bindir`, /usr/lib/postgresql/*/bin, \
                         /opt/homebrew/opt/postgresql@*/bin, /usr/local/opt/postgresql@*/bin \
                         and /usr/local/pgsql/bin";

/// A directory holding `initdb` and `postgres` of one PostgreSQL version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binaries {
    /// The directory, symbolic links resolved.
    pub(crate) dir: PathBuf,
    /// The major version `postgres --version` reports.
    pub(crate) major: u32,
}

impl fmt::Display for Binaries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgreSQL {} ({})", self.major, self.dir.display())
    }
}

/// The places to look, in order: the directories of `PATH`, the directory `pg_config --bindir`
/// names, then the usual install locations under `root` (`/` outside tests), the highest
/// version first.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    pub(crate) path: Vec<PathBuf>,
    pub(crate) pg_config_bindir: Option<PathBuf>,
    pub(crate) root: PathBuf,
}

impl Search {
    /// The search on this machine.
    pub(crate) fn on_this_machine() -> Self {
        let path: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect())
            .unwrap_or_default();
        let pg_config_bindir = path
            .iter()
            .map(|dir| dir.join("pg_config"))
            .find(|pg_config| pg_config.is_file())
            .and_then(|pg_config| Command::new(pg_config).arg("--bindir").output().ok())
            .filter(|output| output.status.success())
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .map(|bindir| PathBuf::from(bindir.trim()))
            .filter(|bindir| !bindir.as_os_str().is_empty());
        Self {
            path,
            pg_config_bindir,
            root: PathBuf::from("/"),
        }
    }

    /// The candidate directories, in the order they are tried.
    pub(crate) fn directories(&self) -> Vec<PathBuf> {
        let mut directories = self.path.clone();
        directories.extend(self.pg_config_bindir.clone());
        directories.extend(versioned(&self.root.join("usr/lib/postgresql"), "", "bin"));
        for homebrew in ["opt/homebrew/opt", "usr/local/opt"] {
            directories.extend(versioned(&self.root.join(homebrew), "postgresql@", "bin"));
        }
        directories.push(self.root.join("usr/local/pgsql/bin"));
        directories
    }

    /// The first directory with both binaries of version 14 or newer; otherwise why none
    /// would do, in one line.
    pub(crate) fn find(&self) -> Result<Binaries, String> {
        let mut too_old = Vec::new();
        let mut seen = Vec::new();
        for directory in self.directories() {
            let Some(dir) = server_directory(&directory) else {
                continue;
            };
            if seen.contains(&dir) {
                continue;
            }
            seen.push(dir.clone());
            match version_of(&dir.join("postgres")) {
                Some(major) if major >= MIN_MAJOR => return Ok(Binaries { dir, major }),
                Some(major) => too_old.push(format!("PostgreSQL {major} in {}", dir.display())),
                None => too_old.push(format!("an unknown version in {}", dir.display())),
            }
        }
        let mut reason =
            format!("no PostgreSQL {MIN_MAJOR}+ server binaries (initdb, postgres) in {LOOKED_IN}");
        if !too_old.is_empty() {
            reason.push_str(&format!(" (found only {})", too_old.join(", ")));
        }
        Err(reason)
    }
}

/// The subdirectory `leaf` of each entry of `parent` named `prefix` + a version, the highest
/// version first.
fn versioned(parent: &Path, prefix: &str, leaf: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let version = name.to_str()?.strip_prefix(prefix)?;
            Some((leading_number(version)?, entry.path().join(leaf)))
        })
        .collect();
    found.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    found.into_iter().map(|(_, dir)| dir).collect()
}

/// The directory `initdb` really lives in (symbolic links resolved), when `postgres` is there
/// too.
fn server_directory(directory: &Path) -> Option<PathBuf> {
    let initdb = directory.join("initdb");
    if !initdb.is_file() {
        return None;
    }
    let dir = std::fs::canonicalize(&initdb).ok()?.parent()?.to_path_buf();
    dir.join("postgres").is_file().then_some(dir)
}

/// The major version `postgres --version` prints.
fn version_of(postgres: &Path) -> Option<u32> {
    let output = Command::new(postgres).arg("--version").output().ok()?;
    parse_major(&String::from_utf8_lossy(&output.stdout))
}

/// The major version in `postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)`.
pub(crate) fn parse_major(version: &str) -> Option<u32> {
    let (_, after) = version.split_once("(PostgreSQL)")?;
    leading_number(after.trim_start())
}

fn leading_number(text: &str) -> Option<u32> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A directory tree that disappears with the value.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir()
                .join(format!("runledger-binaries-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            Self(root)
        }

        /// `initdb` and a `postgres` that reports `version`, in `dir` under the tree.
        fn install(&self, dir: &str, version: &str) -> PathBuf {
            let dir = self.0.join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            let postgres = format!("#!/bin/sh\necho 'postgres (PostgreSQL) {version}'\n");
            for (name, script) in [("initdb", "#!/bin/sh\n"), ("postgres", postgres.as_str())] {
                let file = dir.join(name);
                std::fs::write(&file, script).unwrap();
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            std::fs::canonicalize(dir).unwrap()
        }

        fn search(&self, path: &[&str]) -> Search {
            Search {
                path: path.iter().map(|dir| self.0.join(dir)).collect(),
                pg_config_bindir: None,
                root: self.0.clone(),
            }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_major_version_is_read_from_postgres_version() {
        let debian = "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)\n";
        assert_eq!(parse_major(debian), Some(15));
        assert_eq!(parse_major("postgres (PostgreSQL) 17devel"), Some(17));
        assert_eq!(parse_major("postgres (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(parse_major("initdb: command not found"), None);
    }

    #[test]
    fn debian_directories_are_tried_highest_version_first() {
        let tree = Tree::new("debian");
        tree.install("usr/lib/postgresql/14/bin", "14.1");
        let sixteen = tree.install("usr/lib/postgresql/16/bin", "16.4");
        tree.install("usr/lib/postgresql/9.6/bin", "9.6.24");
        assert_eq!(
            tree.search(&[]).find(),
            Ok(Binaries {
                dir: sixteen,
                major: 16
            })
        );
    }

    #[test]
    fn path_comes_first_and_a_version_older_than_14_is_passed_over() {
        let tree = Tree::new("path");
        tree.install("old/bin", "13.9");
        let new = tree.install("new/bin", "15.2");
        tree.install("usr/lib/postgresql/17/bin", "17.0");
        let found = tree.search(&["old/bin", "new/bin"]).find().unwrap();
        assert_eq!(found.dir, new);
        assert_eq!(
            found.to_string(),
            format!("PostgreSQL 15 ({})", new.display())
        );
    }

    #[test]
    fn pg_config_homebrew_and_usr_local_pgsql_are_searched_in_that_order() {
        let tree = Tree::new("order");
        let search = Search {
            pg_config_bindir: Some(PathBuf::from("/from/pg_config")),
            ..tree.search(&["on/path"])
        };
        std::fs::create_dir_all(tree.0.join("opt/homebrew/opt/postgresql@14")).unwrap();
        std::fs::create_dir_all(tree.0.join("opt/homebrew/opt/postgresql@16")).unwrap();
        std::fs::create_dir_all(tree.0.join("usr/local/opt/postgresql@15")).unwrap();
        std::fs::create_dir_all(tree.0.join("usr/lib/postgresql/15")).unwrap();
        let expected: Vec<PathBuf> = [
            "on/path",
            "usr/lib/postgresql/15/bin",
            "opt/homebrew/opt/postgresql@16/bin",
            "opt/homebrew/opt/postgresql@14/bin",
            "usr/local/opt/postgresql@15/bin",
            "usr/local/pgsql/bin",
        ]
        .iter()
        .map(|dir| tree.0.join(dir))
        .collect();
        let mut directories = search.directories();
        assert_eq!(directories.remove(1), PathBuf::from("/from/pg_config"));
        assert_eq!(directories, expected);
    }

    #[test]
    fn a_symbolic_link_on_path_resolves_to_the_real_directory() {
        let tree = Tree::new("link");
        let real = tree.install("usr/lib/postgresql/15/bin", "15.20");
        let links = tree.0.join("usr/local/bin");
        std::fs::create_dir_all(&links).unwrap();
        for name in ["initdb", "postgres"] {
            std::os::unix::fs::symlink(real.join(name), links.join(name)).unwrap();
        }
        assert_eq!(tree.search(&["usr/local/bin"]).find().unwrap().dir, real);
    }

    #[test]
    fn nothing_found_says_where_it_looked_and_what_was_too_old() {
        let tree = Tree::new("none");
        let old = tree.install("usr/lib/postgresql/12/bin", "12.18");
        let reason = tree.search(&[]).find().unwrap_err();
        assert!(
            reason.starts_with("no PostgreSQL 14+ server binaries"),
            "{reason}"
        );
        assert!(reason.contains("/usr/lib/postgresql/*/bin"), "{reason}");
        assert!(
            reason.contains(&format!("found only PostgreSQL 12 in {}", old.display())),
            "{reason}"
        );
    }
}
