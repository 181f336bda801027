//! btrfs block-group profiles: names, device minimums, redundancy.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

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

    /// The fewest devices the kernel (5.15 and later) accepts for this profile.
    pub fn min_devices(self) -> u32 {
        match self {
            Profile::Single | Profile::Dup | Profile::Raid0 => 1,
            Profile::Raid1 | Profile::Raid10 | Profile::Raid5 => 2,
            Profile::Raid1c3 | Profile::Raid6 => 3,
            Profile::Raid1c4 => 4,
        }
    }

    /// The most bytes the devices write per byte of data written in this
    /// profile: its copies (DUP, RAID1: 2; RAID1C3: 3; RAID1C4: 4), and for
    /// RAID5/6 the worst case of a partial-stripe write (data plus one or
    /// two parity blocks).
    pub fn max_write_factor(self) -> u32 {
        match self {
            Profile::Single | Profile::Raid0 => 1,
            Profile::Dup | Profile::Raid1 | Profile::Raid10 | Profile::Raid5 => 2,
            Profile::Raid1c3 | Profile::Raid6 => 3,
            Profile::Raid1c4 => 4,
        }
    }

    /// True when the profile keeps more than one copy (or parity) of data.
    /// Current kernels turn O_DIRECT writes buffered on such data profiles,
    /// even for NOCOW files, so the copies cannot diverge under a racing
    /// writer.
    pub fn duplicates_data(self) -> bool {
        !matches!(self, Profile::Single | Profile::Raid0)
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
        assert_eq!(Profile::Raid1c3.min_devices(), 3);
        assert_eq!(Profile::Raid1c4.min_devices(), 4);
        assert_eq!(Profile::Raid6.min_devices(), 3);
    }
}
