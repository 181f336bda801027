//! The `demo` report: the O_DIRECT trap shown on a sandbox btrfs, a
//! checksummed directory and a NOCOW one probed side by side. The two probe
//! reports are read back as [`ProbeReport`]s, not as untyped JSON.

pub mod run;

pub use run::{DemoOptions, run};

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;
use crate::probe::report::ProbeReport;
use crate::probe::verdict::Verdict;

/// `demo --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DemoReport {
    /// Kernel release.
    pub kernel: String,
    /// The sandbox the probes ran on.
    pub sandbox: DemoSandbox,
    /// probe-dio on the checksummed directory.
    pub checksummed: ProbeReport,
    /// probe-dio on the NOCOW directory.
    pub nocow: ProbeReport,
}

/// The demo's sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DemoSandbox {
    /// Its name.
    pub name: String,
    /// Loop devices.
    pub devices: usize,
    /// Size of each.
    pub size_bytes: u64,
    /// Data profiles read from the kernel.
    pub data_profiles: Vec<Profile>,
    /// Metadata profiles read from the kernel.
    pub metadata_profiles: Vec<Profile>,
    /// Removed again at the end.
    pub removed: bool,
}

impl DemoReport {
    /// True when the probes showed what the demo is about: the checksummed
    /// directory falls back to buffered writes, the NOCOW one stays direct.
    pub fn shows_the_trap(&self) -> bool {
        self.checksummed.verdict == Verdict::BufferedFallback
            && self.nocow.verdict == Verdict::Direct
    }
}
