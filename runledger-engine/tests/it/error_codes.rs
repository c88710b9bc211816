//! Every error code the source can produce is documented in `docs/error-codes.md`.

use std::collections::BTreeSet;
use std::path::Path;

const PREFIXES: [&str; 15] = [
    "testing.",
    "connection.",
    "job.",
    "job_definition.",
    "job_schedule.",
    "workflow.",
    "schema.",
    "storage.",
    "catalog.",
    "config.",
    "registry.",
    "runtime.",
    "validation.",
    "worker.",
    "payload.",
];

/// Quoted `prefix.name` literals (double quotes in Rust, single quotes in SQL).
fn codes_in(text: &str, found: &mut BTreeSet<String>) {
    for quote in ['"', '\''] {
        for piece in text.split(quote).skip(1).step_by(2) {
            let is_code = PREFIXES.iter().any(|prefix| {
                piece.strip_prefix(prefix).is_some_and(|rest| {
                    !rest.is_empty() && rest.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                })
            });
            if is_code {
                found.insert(piece.to_owned());
            }
        }
    }
}

fn scan(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            scan(&path, found);
        } else if path
            .extension()
            .is_some_and(|ext| ext == "rs" || ext == "sql")
        {
            codes_in(&std::fs::read_to_string(&path).unwrap(), found);
        }
    }
}

#[test]
fn every_error_code_in_the_source_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut codes = BTreeSet::new();
    scan(&root.join("runledger-engine/src"), &mut codes);
    scan(&root.join("migrations"), &mut codes);
    scan(&root.join("runledger/src"), &mut codes);
    scan(&root.join("runledger-tui/src"), &mut codes);
    assert!(codes.len() > 50, "the scan found too few codes: {codes:?}");
    let doc = std::fs::read_to_string(root.join("docs/error-codes.md")).unwrap();
    let missing: Vec<&String> = codes
        .iter()
        .filter(|code| !doc.contains(&format!("`{code}`")))
        .collect();
    assert!(missing.is_empty(), "undocumented error codes: {missing:?}");
}
