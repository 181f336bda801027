//! The guard of the safe path layer (issue 48, docs/security.md): code
//! outside `src/sys/` does not read, open, resolve or rename paths itself
//! (`std::fs::read*`, `File::open`, `canonicalize`, `rename`/`renameat`)
//! nor builds a `/proc/PID/fd` path to open; it goes through
//! `src/sys/fs/` (`input::read_user_file`, `outfile::OutputDir`,
//! `beneath::HeldDir`, `SysRoot::read_*`). A new use fails this test until
//! it moves into the layer or is added to [`ALLOWED`] with its reason.
//! Unit-test modules (`#[cfg(test)] mod tests` to the end of a file, and
//! `tests.rs` files) are not scanned: they make their own fixtures.

use std::path::{Path, PathBuf};

/// What is looked for (a plain substring of a line that is not a comment).
const PATTERNS: &[&str] = &[
    "fs::read(",
    "fs::read_to_string(",
    "File::open(",
    "canonicalize(",
    "fs::rename(",
    "renameat",
    // /proc/{pid}/fd/{n}, /proc/{}/fd: another process's descriptors.
    "}/fd/",
    "}/fd\"",
    "join(\"fd\")",
];

/// (file, pattern, why): each justified place outside `src/sys/`.
const ALLOWED: &[(&str, &str, &str)] = &[
    // Fixed kernel or system paths: nothing a user names or places.
    (
        "src/sandbox/state.rs",
        "fs::read_to_string(",
        "/proc/self/sessionid, a fixed kernel file",
    ),
    (
        "src/readtest/mod.rs",
        "fs::read_to_string(",
        "/proc/self/smaps, a fixed kernel file",
    ),
    (
        "src/bench/buffers.rs",
        "fs::read_to_string(",
        "/proc/self/smaps and /sys/kernel/mm/transparent_hugepage/enabled, fixed kernel files",
    ),
    (
        "src/bench/history.rs",
        "fs::read_to_string(",
        "/etc/machine-id, a fixed root-owned file",
    ),
    (
        "src/doctor/leftovers.rs",
        "fs::read_to_string(",
        "/proc/PID/comm of a pid parsed as digits: a kernel file",
    ),
    // Device names resolved to be compared, never opened through.
    (
        "src/doctor/mod.rs",
        "canonicalize(",
        "a /dev name (by-id, by-uuid link) resolved to compare with sysfs; nothing opened through it",
    ),
    (
        "src/sandbox/report.rs",
        "canonicalize(",
        "sandbox paths btrfs-lab made, compared; nothing opened through them",
    ),
];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every (file, pattern, line) outside `src/sys/`.
fn uses() -> Vec<(String, &'static str, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rs_files(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if rel.starts_with("src/sys/") || rel.ends_with("/tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if t == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.trim().starts_with("mod tests"))
            {
                break;
            }
            if t.starts_with("//") {
                continue;
            }
            for p in PATTERNS {
                if t.contains(p) {
                    found.push((rel.clone(), *p, format!("{}: {t}", i + 1)));
                }
            }
        }
    }
    found
}

#[test]
fn paths_are_touched_through_the_safe_layer_only() {
    let found = uses();
    let bad: Vec<String> = found
        .iter()
        .filter(|(f, p, _)| !ALLOWED.iter().any(|(af, ap, _)| af == f && ap == p))
        .map(|(f, p, l)| format!("{f}:{l}  ({p})"))
        .collect();
    assert!(
        bad.is_empty(),
        "outside src/sys/, use the safe path layer (src/sys/fs/: input::read_user_file, \
         outfile::OutputDir, beneath::HeldDir, SysRoot::read_*) or add the place to ALLOWED \
         in tests/it/path_guard.rs with its reason:\n{}",
        bad.join("\n")
    );
    // The allowlist stays as short as it is honest: no stale entry.
    let stale: Vec<_> = ALLOWED
        .iter()
        .filter(|(af, ap, _)| !found.iter().any(|(f, p, _)| af == f && ap == p))
        .collect();
    assert!(
        stale.is_empty(),
        "allowed but no longer used, remove: {stale:?}"
    );
}

#[test]
fn the_guard_sees_a_new_use() {
    // Its patterns find what they are meant to.
    for (line, pat) in [
        (
            "let t = std::fs::read_to_string(&path)?;",
            "fs::read_to_string(",
        ),
        ("let b = fs::read(p)?;", "fs::read("),
        ("let f = File::open(p)?;", "File::open("),
        ("let r = std::fs::canonicalize(p)?;", "canonicalize("),
        ("std::fs::rename(a, b)?;", "fs::rename("),
        ("rfs::renameat(d, a, d, b)?;", "renameat"),
        ("let p = format!(\"/proc/{pid}/fd/{n}\");", "}/fd/"),
        ("read_dir(format!(\"/proc/{}/fd\", pid))", "}/fd\""),
    ] {
        assert!(
            PATTERNS.iter().any(|p| *p == pat && line.contains(p)),
            "{line}"
        );
    }
}
