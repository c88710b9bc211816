//! Command-line flags (hand-parsed: five flags do not need an argument-parser dependency).

use std::time::Duration;

use uuid::Uuid;

/// Default pause between refreshes.
pub(crate) const DEFAULT_REFRESH_MS: u64 = 2_000;
/// Default rows per list page.
pub(crate) const DEFAULT_LIMIT: i64 = 200;

pub(crate) const USAGE: &str = "\
runledger-tui: read-only operator dashboard for Runledger

USAGE:
    runledger-tui [OPTIONS]

OPTIONS:
    --database-url <URL>   PostgreSQL URL (default: $DATABASE_URL)
    --org <UUID>           start scoped to one organization (default: all)
    --refresh-ms <MS>      auto-refresh interval, 200..=600000 (default: 2000)
    --limit <N>            rows per list page, 1..=1000 (default: 200)
    --skip-schema-check    do not validate the Runledger schema at startup
    -h, --help             print this help
    -V, --version          print the version

Press ? inside the UI for the keys.";

/// Parsed flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Args {
    pub(crate) database_url: String,
    pub(crate) organization: Option<Uuid>,
    pub(crate) refresh: Duration,
    pub(crate) limit: i64,
    pub(crate) skip_schema_check: bool,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed {
    Run(Args),
    Help,
    Version,
}

/// Parses `args` (without the program name); `env_url` is `$DATABASE_URL`.
pub(crate) fn parse(
    args: impl IntoIterator<Item = String>,
    env_url: Option<String>,
) -> Result<Parsed, String> {
    let mut database_url = None;
    let mut organization = None;
    let mut refresh_ms = DEFAULT_REFRESH_MS;
    let mut limit = DEFAULT_LIMIT;
    let mut skip_schema_check = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "--database-url" => database_url = Some(value("--database-url")?),
            "--org" => {
                let text = value("--org")?;
                organization =
                    Some(Uuid::parse_str(&text).map_err(|_| format!("--org: not a UUID: {text}"))?);
            }
            "--refresh-ms" => {
                let text = value("--refresh-ms")?;
                refresh_ms = text
                    .parse()
                    .ok()
                    .filter(|ms| (200..=600_000).contains(ms))
                    .ok_or_else(|| format!("--refresh-ms: expected 200..=600000, got {text}"))?;
            }
            "--limit" => {
                let text = value("--limit")?;
                limit = text
                    .parse()
                    .ok()
                    .filter(|n| (1..=1_000).contains(n))
                    .ok_or_else(|| format!("--limit: expected 1..=1000, got {text}"))?;
            }
            "--skip-schema-check" => skip_schema_check = true,
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    let database_url = database_url
        .or(env_url)
        .filter(|url| !url.trim().is_empty())
        .ok_or("no database: pass --database-url or set DATABASE_URL")?;
    Ok(Parsed::Run(Args {
        database_url,
        organization,
        refresh: Duration::from_millis(refresh_ms),
        limit,
        skip_schema_check,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: Option<&str>) -> Result<Parsed, String> {
        parse(args.iter().map(|a| (*a).to_owned()), env.map(str::to_owned))
    }

    #[test]
    fn defaults_come_from_the_environment() {
        let Parsed::Run(args) = run(&[], Some("postgres://x/db")).unwrap() else {
            panic!("expected run");
        };
        assert_eq!(args.database_url, "postgres://x/db");
        assert_eq!(args.refresh, Duration::from_millis(DEFAULT_REFRESH_MS));
        assert_eq!(args.limit, DEFAULT_LIMIT);
        assert_eq!(args.organization, None);
        assert!(!args.skip_schema_check);
    }

    #[test]
    fn every_flag_is_parsed_in_both_spellings() {
        let org = "00000000-0000-0000-0000-000000000001";
        let Parsed::Run(args) = run(
            &[
                "--database-url",
                "postgres://flag/db",
                &format!("--org={org}"),
                "--refresh-ms",
                "500",
                "--limit=50",
                "--skip-schema-check",
            ],
            Some("postgres://env/db"),
        )
        .unwrap() else {
            panic!("expected run");
        };
        assert_eq!(args.database_url, "postgres://flag/db");
        assert_eq!(args.organization, Some(Uuid::parse_str(org).unwrap()));
        assert_eq!(args.refresh, Duration::from_millis(500));
        assert_eq!(args.limit, 50);
        assert!(args.skip_schema_check);
    }

    #[test]
    fn bad_input_is_refused_with_a_message() {
        assert!(run(&[], None).unwrap_err().contains("DATABASE_URL"));
        assert!(
            run(&["--org", "nope"], Some("u"))
                .unwrap_err()
                .contains("UUID")
        );
        assert!(
            run(&["--limit", "0"], Some("u"))
                .unwrap_err()
                .contains("--limit")
        );
        assert!(
            run(&["--refresh-ms", "10"], Some("u"))
                .unwrap_err()
                .contains("--refresh-ms")
        );
        assert!(
            run(&["--limit"], Some("u"))
                .unwrap_err()
                .contains("needs a value")
        );
        assert!(
            run(&["--bogus"], Some("u"))
                .unwrap_err()
                .contains("unknown")
        );
        assert_eq!(run(&["--help"], None).unwrap(), Parsed::Help);
        assert_eq!(run(&["-V"], None).unwrap(), Parsed::Version);
    }
}
