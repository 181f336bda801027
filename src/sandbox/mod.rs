//! Throwaway filesystems on loop devices (with direct I/O on), for tests,
//! the demo, and rehearsing a conversion before doing it on real disks.

pub mod exec;
pub mod plan;
pub mod report;
pub mod state;

use std::path::PathBuf;

pub use exec::{DownOutcome, DownRequest, Sandbox, down, forget_leaves, status, teardown};
pub use plan::{FsKind, SandboxPlan, SandboxRequest, plan_up};
pub use report::{DownReport, SandboxState, SandboxStatus};
pub use state::{STATE_DIR_ENV, SandboxRecord, StateStore};

/// Environment variable overriding where sandboxes are created by default
/// (ignored as root: use `--sandbox-root`).
pub(crate) const SANDBOX_ROOT_ENV: &str = "BTRFS_LAB_SANDBOX_ROOT";
/// Default parent of sandbox directories: on disk (not tmpfs, which cannot
/// back a loop device with direct I/O), and cleaned by the system eventually.
pub(crate) const DEFAULT_SANDBOX_ROOT: &str = "/var/tmp/btrfs-lab";

/// Where records are kept and sandboxes made, and notes for stderr about
/// environment variables that were ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locations {
    /// The record store.
    pub store: StateStore,
    /// The default parent of sandbox directories.
    pub sandbox_root: PathBuf,
    /// One line each: an environment override ignored, and what to use.
    pub notes: Vec<String>,
}

/// Picks the state directory and sandbox root: the command-line flag; else,
/// when not running as root, the environment variable; else the default.
/// As root the environment variables are ignored (an environment another
/// user prepared, e.g. through sudo's env_keep, must not choose what root
/// deletes), with a note saying to use the flag.
pub fn resolve_locations(
    state_flag: Option<PathBuf>,
    root_flag: Option<PathBuf>,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
    as_root: bool,
) -> Locations {
    let mut notes = Vec::new();
    // Made absolute as given (a relative sandbox root would be recorded
    // relative to wherever `up` ran: `list` skipped it, `down` refused it).
    let abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    let mut pick = |flag: Option<PathBuf>, var: &str, option: &str, default: &str| {
        if let Some(f) = flag {
            return abs(f);
        }
        match env(var).filter(|v| !v.is_empty()) {
            Some(v) if as_root => {
                notes.push(format!(
                    "ignoring {var}={} as root; use {option} DIR instead",
                    PathBuf::from(v).display()
                ));
                PathBuf::from(default)
            }
            Some(v) => abs(PathBuf::from(v)),
            None => PathBuf::from(default),
        }
    };
    let state = pick(
        state_flag,
        STATE_DIR_ENV,
        "--state-dir",
        state::DEFAULT_STATE_DIR,
    );
    let root = pick(
        root_flag,
        SANDBOX_ROOT_ENV,
        "--sandbox-root",
        DEFAULT_SANDBOX_ROOT,
    );
    Locations {
        store: StateStore::new(state),
        sandbox_root: root,
        notes,
    }
}

/// A fresh name like `sbx-3f9a1c`.
pub fn random_name() -> String {
    format!("sbx-{}", crate::sys::fs::nonce::nonce())
}

/// Creates a sandbox from a request, under `sandbox_root` unless the
/// request names a directory.
pub fn up(
    request: &SandboxRequest,
    store: &StateStore,
    sandbox_root: &std::path::Path,
) -> crate::error::Result<Sandbox> {
    let plan = plan_up(request, sandbox_root, &random_name())?;
    Sandbox::up(&plan, store)
}

/// `sandbox up` after its plan: makes the sandbox, reads back the profiles
/// mkfs gave it, and keeps it (a signal before that removes it: the caller
/// installed the handlers). The report names its state file.
pub fn bring_up(plan: &SandboxPlan, store: &StateStore) -> crate::error::Result<report::UpReport> {
    let sandbox = Sandbox::up(plan, store)?;
    let (data, metadata) = match plan.fs {
        FsKind::Btrfs => {
            let p = crate::sys::kernel::btrfs::block_group_profiles(sandbox.mount_point())?;
            (p.data, p.metadata)
        }
        FsKind::Ext4 => (Vec::new(), Vec::new()),
    };
    // A signal that came while the profiles were read: the sandbox is
    // dropped here, which removes it.
    crate::sys::kernel::signals::check()?;
    let record = sandbox.keep();
    let state_file = store.dir().join(format!("{}.json", record.name));
    Ok(report::UpReport::new(&record, state_file, data, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn environment_is_ignored_as_root_and_flags_win() {
        let env = |v: &str| Some(OsString::from(format!("/planted/{v}")));
        let l = resolve_locations(None, None, env, true);
        assert_eq!(
            l.store.dir(),
            std::path::Path::new(state::DEFAULT_STATE_DIR)
        );
        assert_eq!(l.sandbox_root, PathBuf::from(DEFAULT_SANDBOX_ROOT));
        assert_eq!(
            l.notes,
            vec![
                "ignoring BTRFS_LAB_STATE_DIR=/planted/BTRFS_LAB_STATE_DIR as root; use --state-dir DIR instead",
                "ignoring BTRFS_LAB_SANDBOX_ROOT=/planted/BTRFS_LAB_SANDBOX_ROOT as root; use --sandbox-root DIR instead",
            ]
        );
        let l = resolve_locations(Some("/s".into()), Some("/r".into()), env, true);
        assert_eq!(l.store.dir(), std::path::Path::new("/s"));
        assert_eq!(l.sandbox_root, PathBuf::from("/r"));
        assert!(l.notes.is_empty());
        let l = resolve_locations(None, None, env, false);
        assert_eq!(
            l.store.dir(),
            std::path::Path::new("/planted/BTRFS_LAB_STATE_DIR")
        );
        assert!(l.notes.is_empty());
    }

    #[test]
    fn relative_locations_are_made_absolute() {
        let l = resolve_locations(Some("s".into()), Some("r/x".into()), |_| None, true);
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(l.store.dir(), cwd.join("s"));
        assert_eq!(l.sandbox_root, cwd.join("r/x"));
        let l = resolve_locations(None, None, |_| Some(OsString::from("rel")), false);
        assert_eq!(l.sandbox_root, cwd.join("rel"));
    }
}
