//! The findings of one filesystem, from its facts: pure code, so every rule
//! is tested on numbers without a filesystem. One module per seam:
//! [`devices`] (missing members, degraded mount, error counters), [`space`]
//! (metadata chunk room, fullness, the global reserve), [`layout`]
//! (balances, mixed profiles, redundancy), [`health`] (scrub, kernel). The
//! codes and every severity that depends on figures come from the catalog
//! ([`crate::model::finding`]).

mod audit;
mod devices;
mod health;
mod layout;
mod space;

use crate::model::finding::{Code, Finding, Severity, rank};
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::report::units::{UnitMode, pretty_size};
use crate::sys::tools::display_argv;

use super::facts::{DeviceFacts, FsFacts};

fn size(b: u64) -> String {
    pretty_size(b, UnitMode::default())
}

fn cmd(words: &[&str], mount: &str) -> String {
    let mut v: Vec<&str> = words.to_vec();
    v.push(mount);
    display_argv(&v)
}

fn redundant(p: Profile) -> bool {
    !matches!(p, Profile::Single | Profile::Raid0)
}

/// What every seam reads: the facts and what is derived from them once.
struct Cx<'a> {
    f: &'a FsFacts,
    /// The mount point, for the commands.
    m: String,
    present: Vec<&'a DeviceFacts>,
    /// Unallocated bytes of each present device.
    unalloc: Vec<u64>,
    data: Vec<Profile>,
    meta: Vec<Profile>,
    /// Data, metadata and system profiles in use.
    all_profiles: Vec<Profile>,
    /// The profiles in use without a second copy, sorted, once each.
    without_redundancy: Vec<Profile>,
    missing: u64,
}

impl<'a> Cx<'a> {
    fn new(f: &'a FsFacts) -> Self {
        let present: Vec<&DeviceFacts> = f.present().collect();
        let unalloc = present.iter().map(|d| d.unallocated_bytes()).collect();
        let data = f.profiles(BgType::Data);
        let meta = f.profiles(BgType::Metadata);
        let all_profiles: Vec<Profile> = data
            .iter()
            .chain(&meta)
            .chain(&f.profiles(BgType::System))
            .copied()
            .collect();
        let mut without_redundancy: Vec<Profile> = all_profiles
            .iter()
            .copied()
            .filter(|p| !redundant(*p))
            .collect();
        without_redundancy.sort();
        without_redundancy.dedup();
        Self {
            f,
            m: f.mount_point.display().to_string(),
            present,
            unalloc,
            data,
            meta,
            all_profiles,
            without_redundancy,
            missing: f.missing_count(),
        }
    }
}

/// Every finding about one filesystem, worst first. `now` is seconds since
/// the epoch.
pub(crate) fn analyse(f: &FsFacts, now: u64) -> Vec<Finding> {
    let cx = Cx::new(f);
    let mut out = Vec::new();
    devices::findings(&cx, now, &mut out);
    space::findings(&cx, &mut out);
    layout::findings(&cx, &mut out);
    health::findings(&cx, now, &mut out);
    audit::findings(&cx, &mut out);
    rank(&mut out);
    quiet_beside_missing(&mut out);
    out
}

/// The INFO findings still said when a member device is missing: those
/// about getting the array back (a replace or balance running, a boot that
/// waits for the device with no timeout).
const INFO_BESIDE_MISSING: [Code; 2] = [Code::BalanceRunning, Code::FstabNoDeviceTimeout];

/// When a member device is missing (`device-missing`, critical), the other
/// INFO findings are noise beside it: a scrub never run or interrupted,
/// data without redundancy, the oldest kernel, mount option audits, the
/// metadata room a missing device takes away, `--deep`'s probe and link
/// notes, ... are left out until the array is whole again; warnings and
/// critical findings stay, and so do [`INFO_BESIDE_MISSING`].
pub(crate) fn quiet_beside_missing(v: &mut Vec<Finding>) {
    if v.iter().any(|f| f.code == Code::DeviceMissing) {
        v.retain(|f| f.severity != Severity::Info || INFO_BESIDE_MISSING.contains(&f.code));
    }
}

#[cfg(test)]
pub(crate) mod tests;
