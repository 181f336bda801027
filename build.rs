//! Decides, when the tests are built, whether the root-only tests are
//! reported as ignored. libtest cannot ignore a test at run time, so the
//! decision is made here: built by a user who is not root (and not in CI),
//! those tests carry `#[cfg_attr(root_tests_ignored, ignore = "needs root")]`
//! and the runner counts them as ignored instead of passing them silently.
//! Built by root (or with `CI=true`) they run, and a prerequisite missing at
//! run time (root, because another user runs the binary; mkfs.btrfs,
//! mkfs.ext4, lsattr, /dev/loop-control) fails them with the reason
//! (tests/it/common.rs `require_root`). The cfg is passed to every target of
//! the package: the integration tests and the library's unit tests
//! (`cargo test --lib`) alike.

use std::fs;

fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(root_tests_ignored)");
    println!("cargo::rerun-if-changed=build.rs");
    // A different user building in the same tree (sudo, su) changes these.
    for var in ["CI", "USER", "LOGNAME", "HOME", "SUDO_UID"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if effective_uid() != Some(0) && !in_ci() {
        println!("cargo::rustc-cfg=root_tests_ignored");
    }
}
