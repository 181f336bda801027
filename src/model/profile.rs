//! btrfs block-group profiles and their geometry: one table, modelled on
//! `btrfs_raid_array` (the kernel's fs/btrfs/volumes.c, btrfs-progs'
//! kernel-shared/volumes.c), that every planner, finding and parser reads:
//! copies, stripes, device minimums and maximums, parity, tolerated
//! failures, and the kernel versions the minimums depend on. The chunk-size
//! rule and the allocator that uses this table are in [`super::alloc`].
//!
//! Where the kernel's history matters:
//! - RAID0 needs 1 device and RAID10 2 since Linux 5.15 (kernel commit
//!   b2f78e88052b "btrfs: allow degenerate raid0/raid10"; btrfs-progs 5.14,
//!   commit a177ef7dd444, lets mkfs make them); before, 2 and 4.
//! - RAID1C3 and RAID1C4 exist since Linux 5.5 (the `raid1c34` incompat
//!   feature): an older kernel refuses to mount such a filesystem.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::model::kernel::{DEGENERATE_RAID, KernelVersion, RAID1C34};

/// A btrfs block-group profile (how chunks are spread over devices).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// One copy on one device.
    Single,
    /// Two copies on the same device.
    Dup,
    /// Striped over devices, no redundancy.
    Raid0,
    /// Two copies on two devices.
    Raid1,
    /// Three copies on three devices.
    Raid1c3,
    /// Four copies on four devices.
    Raid1c4,
    /// Striped mirrors.
    Raid10,
    /// Striped with one parity.
    Raid5,
    /// Striped with two parities.
    Raid6,
}

/// A profile's geometry: its row of btrfs' `btrfs_raid_array` (the kernel's
/// fs/btrfs/volumes.c and btrfs-progs' kernel-shared/volumes.c hold the same
/// table), as the allocator and every planner read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Stripes that mirror each other inside a stripe set (RAID10: 2).
    pub sub_stripes: u32,
    /// Stripes a chunk puts on each device it uses (DUP: 2).
    pub dev_stripes: u32,
    /// Most devices a chunk spans; 0: as many as have room.
    pub(crate) devs_max: u32,
    /// Fewest devices a chunk needs (current kernels: 5.15 and later).
    pub(crate) devs_min: u32,
    /// Devices that may fail without losing data.
    pub(crate) tolerated_failures: u32,
    /// A chunk uses a multiple of this many devices.
    pub(crate) devs_increment: u32,
    /// Copies of each byte.
    pub(crate) ncopies: u32,
    /// Parity stripes per stripe set (RAID5: 1, RAID6: 2).
    pub(crate) nparity: u32,
}

/// A row in `btrfs_raid_array`'s field order: sub_stripes, dev_stripes,
/// devs_max, devs_min, tolerated_failures, devs_increment, ncopies, nparity.
const fn row(v: [u32; 8]) -> Geometry {
    Geometry {
        sub_stripes: v[0],
        dev_stripes: v[1],
        devs_max: v[2],
        devs_min: v[3],
        tolerated_failures: v[4],
        devs_increment: v[5],
        ncopies: v[6],
        nparity: v[7],
    }
}

impl Profile {
    /// Every profile, in the order btrfs-progs lists them.
    pub const ALL: [Profile; 9] = [
        Profile::Single,
        Profile::Dup,
        Profile::Raid0,
        Profile::Raid1,
        Profile::Raid1c3,
        Profile::Raid1c4,
        Profile::Raid10,
        Profile::Raid5,
        Profile::Raid6,
    ];

    /// The lowercase name btrfs-progs accepts (`raid1c3`).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Single => "single",
            Profile::Dup => "dup",
            Profile::Raid0 => "raid0",
            Profile::Raid1 => "raid1",
            Profile::Raid1c3 => "raid1c3",
            Profile::Raid1c4 => "raid1c4",
            Profile::Raid10 => "raid10",
            Profile::Raid5 => "raid5",
            Profile::Raid6 => "raid6",
        }
    }

    /// The profile's row of `btrfs_raid_array` (values of current kernels,
    /// 5.15 and later, and of btrfs-progs 5.14 and later).
    pub const fn geometry(self) -> Geometry {
        //                          sub dev max min tol inc cop par
        match self {
            Profile::Raid10 => row([2, 1, 0, 2, 1, 2, 2, 0]),
            Profile::Raid1 => row([1, 1, 2, 2, 1, 2, 2, 0]),
            Profile::Raid1c3 => row([1, 1, 3, 3, 2, 3, 3, 0]),
            Profile::Raid1c4 => row([1, 1, 4, 4, 3, 4, 4, 0]),
            Profile::Dup => row([1, 2, 1, 1, 0, 1, 2, 0]),
            Profile::Raid0 => row([1, 1, 0, 1, 0, 1, 1, 0]),
            Profile::Single => row([1, 1, 1, 1, 0, 1, 1, 0]),
            Profile::Raid5 => row([1, 1, 0, 2, 1, 1, 1, 1]),
            Profile::Raid6 => row([1, 1, 0, 3, 2, 1, 1, 2]),
        }
    }

    /// What chunks of this profile lose when `missing` of their devices
    /// are gone, in a few words (doctor, show, usage say it).
    pub fn loss_when_missing(self, missing: u32) -> String {
        let t = self.geometry().tolerated_failures;
        if missing > t {
            match self {
                Profile::Single | Profile::Raid0 => "files with any block on the missing device are damaged; the others can be copied out (btrfs-lab rescue)".to_owned(),
                Profile::Dup => "the chunks on the missing device are lost with both their copies".to_owned(),
                _ => format!("more devices are missing than {} survives ({t}): chunks with stripes on them are lost", self.name()),
            }
        } else {
            let spare = t - missing;
            if spare == 0 {
                "still readable, but redundancy is gone: one more failure loses data".to_owned()
            } else {
                format!("still readable with one copy fewer: {spare} more failure(s) survivable")
            }
        }
    }

    /// The fewest devices current kernels (5.15 and later) and mkfs.btrfs
    /// (btrfs-progs 5.14 and later) accept for this profile. On a known
    /// kernel use [`Profile::min_devices_on`].
    pub const fn min_devices(self) -> u32 {
        self.geometry().devs_min
    }

    /// The fewest devices `kernel` accepts for this profile: RAID0 and
    /// RAID10 needed 2 and 4 before Linux 5.15.
    pub(crate) fn min_devices_on(self, kernel: KernelVersion) -> u32 {
        match self {
            Profile::Raid0 if kernel < DEGENERATE_RAID => 2,
            Profile::Raid10 if kernel < DEGENERATE_RAID => 4,
            _ => self.min_devices(),
        }
    }

    /// The oldest kernel that knows this profile, when it is newer than any
    /// kernel btrfs-lab supports otherwise: RAID1C3 and RAID1C4 need 5.5.
    pub const fn min_kernel(self) -> Option<KernelVersion> {
        match self {
            Profile::Raid1c3 | Profile::Raid1c4 => Some(RAID1C34),
            _ => None,
        }
    }

    /// True when `kernel` can mount and allocate this profile.
    pub fn supported_on(self, kernel: KernelVersion) -> bool {
        self.min_kernel().is_none_or(|min| kernel >= min)
    }

    /// Copies of each byte (DUP, RAID1, RAID10: 2; RAID1C3: 3; RAID1C4: 4).
    pub const fn copies(self) -> u32 {
        self.geometry().ncopies
    }

    /// Parity stripes (RAID5: 1, RAID6: 2).
    #[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
    pub(crate) const fn parity(self) -> u32 {
        self.geometry().nparity
    }

    /// Devices that may be lost without losing data.
    pub(crate) const fn tolerated_failures(self) -> u32 {
        self.geometry().tolerated_failures
    }

    /// RAID5 or RAID6.
    pub(crate) const fn is_parity(self) -> bool {
        self.geometry().nparity > 0
    }

    /// Stripes a new chunk has when `devices` devices have room for it (the
    /// kernel's rule: a multiple of `devs_increment`, at most `devs_max`,
    /// `dev_stripes` on each); `None` below the minimum of `kernel`.
    pub fn stripes_on(self, devices: u32, kernel: KernelVersion) -> Option<u32> {
        let g = self.geometry();
        let mut n = devices - devices % g.devs_increment;
        if n == 0 || n < self.min_devices_on(kernel) || !self.supported_on(kernel) {
            return None;
        }
        if g.devs_max > 0 {
            n = n.min(g.devs_max);
        }
        Some(n * g.dev_stripes)
    }

    /// Stripes of a chunk of `num_stripes` that hold distinct data (its
    /// logical length is this times the stripe length): the kernel's
    /// `(num_stripes - nparity) / ncopies`, at least 1.
    pub const fn data_stripes(self, num_stripes: u32) -> u32 {
        let g = self.geometry();
        let d = num_stripes.saturating_sub(g.nparity) / g.ncopies;
        if d == 0 { 1 } else { d }
    }

    /// Bytes each stripe of a chunk of logical length `length` and
    /// `num_stripes` stripes takes on its device (btrfs-progs'
    /// `calc_chunk_size`).
    pub(crate) const fn stripe_length(self, length: u64, num_stripes: u32) -> u64 {
        length / self.data_stripes(num_stripes) as u64
    }

    /// The most bytes the devices write per byte of data written in this
    /// profile: its copies (DUP, RAID1: 2; RAID1C3: 3; RAID1C4: 4), and for
    /// RAID5/6 the worst case of a partial-stripe write (data plus one or
    /// two parity blocks).
    pub(crate) const fn max_write_factor(self) -> u32 {
        let g = self.geometry();
        g.ncopies + g.nparity
    }

    /// True when a chunk of this profile stripes over every device with
    /// room (RAID0, RAID10, RAID5, RAID6: `devs_max` 0).
    pub(crate) const fn stripes_all_devices(self) -> bool {
        self.geometry().devs_max == 0
    }

    /// True when the profile keeps more than one copy (or parity) of data.
    /// Current kernels turn O_DIRECT writes buffered on such data profiles,
    /// even for NOCOW files, so the copies cannot diverge under a racing
    /// writer.
    pub(crate) const fn duplicates_data(self) -> bool {
        self.redundant()
    }

    /// The kernel's "redundancy" of a profile (`btrfs_balance`: `ncopies >= 2
    /// || tolerated_failures >= 1`): two copies or parity.
    pub(crate) const fn redundant(self) -> bool {
        let g = self.geometry();
        g.ncopies >= 2 || g.tolerated_failures >= 1
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| {
                Error::usage(format!("unknown profile '{s}'")).with_hint(
                    "profiles are single, dup, raid0, raid1, raid1c3, raid1c4, raid10, raid5, raid6",
                )
            })
    }
}

/// `single, raid0` (or `unknown`), as reports print a filesystem's profiles.
pub fn profile_list(profiles: &[Profile]) -> String {
    if profiles.is_empty() {
        "unknown".to_owned()
    } else {
        profiles
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Targets the remaining bytes are counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    /// Data target.
    pub data: Option<Profile>,
    /// Metadata (and system) target.
    pub metadata: Option<Profile>,
}

impl Targets {
    /// `data → raid1, metadata unchanged`.
    pub fn describe(&self) -> String {
        let tg = |p: Option<Profile>| p.map_or("unchanged".to_owned(), |p| p.name().to_owned());
        format!("data → {}, metadata → {}", tg(self.data), tg(self.metadata))
    }

    /// `data to raid1, metadata to raid1c3`: the targets that are set.
    pub fn in_words(&self) -> String {
        [
            self.data.map(|p| format!("data to {p}")),
            self.metadata.map(|p| format!("metadata to {p}")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_case_insensitively() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>().unwrap(), p);
            assert_eq!(p.name().to_uppercase().parse::<Profile>().unwrap(), p);
        }
        assert!("raid7".parse::<Profile>().is_err());
    }

    #[test]
    fn duplication_and_minimums() {
        assert!(!Profile::Single.duplicates_data());
        assert!(!Profile::Raid0.duplicates_data());
        assert!(Profile::Dup.duplicates_data());
        assert!(Profile::Raid10.duplicates_data());
        assert!(Profile::Raid5.redundant());
        assert_eq!(Profile::Raid1c3.min_devices(), 3);
        assert_eq!(Profile::Raid1c4.min_devices(), 4);
        assert_eq!(Profile::Raid6.min_devices(), 3);
        assert_eq!(Profile::Raid0.min_devices(), 1);
        assert_eq!(Profile::Raid10.min_devices(), 2);
    }

    /// `btrfs_raid_array` as btrfs-progs has it, copied from
    /// kernel-shared/volumes.c of github.com/kdave/btrfs-progs at commit
    /// 10717dd7c190ef3b6778d3d45edb62e0d5488f5b (2026-03-11), the kernel's
    /// fs/btrfs/volumes.c of 5.15 and later being the same: (profile,
    /// sub_stripes, dev_stripes, devs_max, devs_min, tolerated_failures,
    /// devs_increment, ncopies, nparity).
    const PROGS_RAID_ARRAY: [(Profile, [u32; 8]); 9] = [
        (Profile::Raid10, [2, 1, 0, 2, 1, 2, 2, 0]),
        (Profile::Raid1, [1, 1, 2, 2, 1, 2, 2, 0]),
        (Profile::Raid1c3, [1, 1, 3, 3, 2, 3, 3, 0]),
        (Profile::Raid1c4, [1, 1, 4, 4, 3, 4, 4, 0]),
        (Profile::Dup, [1, 2, 1, 1, 0, 1, 2, 0]),
        (Profile::Raid0, [1, 1, 0, 1, 0, 1, 1, 0]),
        (Profile::Single, [1, 1, 1, 1, 0, 1, 1, 0]),
        (Profile::Raid5, [1, 1, 0, 2, 1, 1, 1, 1]),
        (Profile::Raid6, [1, 1, 0, 3, 2, 1, 1, 2]),
    ];

    /// `devs_min` before kernel commit b2f78e88052b (5.15) and btrfs-progs
    /// commit a177ef7dd444 (5.14), "allow degenerate raid0/raid10": RAID10
    /// 4 and RAID0 2, the rest unchanged (that commit's diff of
    /// kernel-shared/volumes.c).
    fn devs_min_before_5_15(p: Profile) -> u32 {
        match p {
            Profile::Raid10 => 4,
            Profile::Raid0 => 2,
            _ => PROGS_RAID_ARRAY.iter().find(|r| r.0 == p).unwrap().1[3],
        }
    }

    #[test]
    fn the_table_is_btrfs_progs_table() {
        assert_eq!(PROGS_RAID_ARRAY.len(), Profile::ALL.len());
        for (p, v) in PROGS_RAID_ARRAY {
            let g = p.geometry();
            let got = [
                g.sub_stripes,
                g.dev_stripes,
                g.devs_max,
                g.devs_min,
                g.tolerated_failures,
                g.devs_increment,
                g.ncopies,
                g.nparity,
            ];
            assert_eq!(got, v, "{p}");
            assert_eq!(p.copies(), v[6], "{p}");
            assert_eq!(p.parity(), v[7], "{p}");
            assert_eq!(p.tolerated_failures(), v[4], "{p}");
            // btrfs_balance's redundancy rule.
            assert_eq!(p.redundant(), v[6] >= 2 || v[4] >= 1, "{p}");
            assert_eq!(p.is_parity(), v[7] > 0, "{p}");
        }
    }

    /// btrfs-progs' `btrfs_bg_flags_for_device_num` (common/utils.c
    /// `test_num_disk_vs_raid`, which mkfs.btrfs runs): a profile is
    /// allowed on `n` devices when `n >= devs_min`.
    fn progs_allows(p: Profile, n: u32) -> bool {
        let row = PROGS_RAID_ARRAY.iter().find(|r| r.0 == p).unwrap().1;
        n >= row[3]
    }

    /// btrfs-progs' `init_alloc_chunk_ctl`: the stripes mkfs gives a chunk
    /// on `n` devices (mirrors: devs_min; DUP: 2; striped: all, RAID10 an
    /// even count; single: 1).
    fn progs_num_stripes(p: Profile, n: u32) -> u32 {
        match p {
            Profile::Dup => 2,
            Profile::Raid1 | Profile::Raid1c3 | Profile::Raid1c4 => p.min_devices().min(n),
            Profile::Raid0 | Profile::Raid5 | Profile::Raid6 => n,
            Profile::Raid10 => n & !1,
            Profile::Single => 1,
        }
    }

    #[test]
    fn every_profile_and_device_count_agrees_with_btrfs_progs() {
        let now = KernelVersion::new(6, 18);
        let old = KernelVersion::new(5, 14);
        for p in Profile::ALL {
            for n in 1..=8u32 {
                assert_eq!(n >= p.min_devices(), progs_allows(p, n), "{p} on {n}");
                assert_eq!(p.min_devices_on(now), p.min_devices(), "{p}");
                assert_eq!(p.min_devices_on(old), devs_min_before_5_15(p), "{p}");
                let stripes = p.stripes_on(n, now);
                assert_eq!(stripes.is_some(), progs_allows(p, n), "{p} on {n}");
                if let Some(s) = stripes {
                    assert_eq!(s, progs_num_stripes(p, n), "{p} on {n}");
                    let g = p.geometry();
                    assert_eq!(s % g.dev_stripes, 0);
                    assert!(g.devs_max == 0 || s / g.dev_stripes <= g.devs_max);
                    // The kernel's data stripes, and a chunk's length back
                    // to its stripe length (btrfs-progs' calc_chunk_size).
                    let data = (s - g.nparity) / g.ncopies;
                    assert_eq!(p.data_stripes(s), data, "{p} on {n}");
                    assert_eq!(p.stripe_length(u64::from(data) << 20, s), 1 << 20);
                    assert_eq!(p.max_write_factor(), g.ncopies + g.nparity);
                }
                assert_eq!(
                    p.stripes_on(n, old).is_some(),
                    n >= devs_min_before_5_15(p) && p.min_kernel().is_none_or(|k| old >= k),
                    "{p} on {n}, Linux 5.14"
                );
            }
        }
    }

    #[test]
    fn raid1c3_and_raid1c4_need_5_5() {
        for p in Profile::ALL {
            let newer = matches!(p, Profile::Raid1c3 | Profile::Raid1c4);
            assert_eq!(p.min_kernel(), newer.then_some(RAID1C34), "{p}");
            assert_eq!(p.supported_on(KernelVersion::new(5, 4)), !newer);
            assert!(p.supported_on(KernelVersion::new(5, 5)));
            assert_eq!(p.stripes_on(8, KernelVersion::new(5, 4)).is_none(), newer);
        }
    }
}
