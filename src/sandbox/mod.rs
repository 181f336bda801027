//! Throwaway filesystems on loop devices (with direct I/O on), for tests,
//! the demo, and rehearsing a conversion before doing it on real disks.

pub mod exec;
pub mod plan;
pub mod state;

use std::path::PathBuf;

pub use exec::{DownReport, Sandbox, SandboxStatus, status, teardown};
pub use plan::{FsKind, SandboxPlan, SandboxRequest, plan_up};
pub use state::{SandboxRecord, StateStore};

/// Environment variable overriding where sandboxes are created by default.
pub const SANDBOX_ROOT_ENV: &str = "BTRFS_LAB_SANDBOX_ROOT";
/// Default parent of sandbox directories: on disk (not tmpfs, which cannot
/// back a loop device with direct I/O), and cleaned by the system eventually.
pub const DEFAULT_SANDBOX_ROOT: &str = "/var/tmp/btrfs-lab";

/// `$BTRFS_LAB_SANDBOX_ROOT`, else the default.
pub fn sandbox_root() -> PathBuf {
    match std::env::var_os(SANDBOX_ROOT_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_SANDBOX_ROOT),
    }
}

/// A fresh name like `sbx-3f9a1c`.
pub fn random_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("sbx-{:06x}", h.finish() & 0xff_ffff)
}

/// Creates a sandbox from a request with the default locations.
pub fn up(request: &SandboxRequest, store: &StateStore) -> crate::error::Result<Sandbox> {
    let plan = plan_up(request, &sandbox_root(), &random_name())?;
    Sandbox::up(&plan, store)
}
