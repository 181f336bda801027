//! Space records: what `btrfs filesystem df` shows, one record per
//! block-group type and profile, whether read from the kernel or parsed from
//! captured text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::profile::Profile;

/// Block-group type, as btrfs-progs names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BgType {
    /// File data.
    Data,
    /// Chunk tree.
    System,
    /// Metadata trees.
    Metadata,
    /// Mixed block groups (small filesystems, `mkfs --mixed`).
    DataMetadata,
    /// The global block reserve (not a block group; part of metadata).
    GlobalReserve,
    /// Flags btrfs-progs calls "unknown".
    Unknown,
}

impl BgType {
    /// Every type.
    pub const ALL: [BgType; 6] = [
        BgType::Data,
        BgType::System,
        BgType::Metadata,
        BgType::DataMetadata,
        BgType::GlobalReserve,
        BgType::Unknown,
    ];

    /// The name btrfs-progs prints (`Data+Metadata`).
    pub fn progs_name(self) -> &'static str {
        match self {
            BgType::Data => "Data",
            BgType::System => "System",
            BgType::Metadata => "Metadata",
            BgType::DataMetadata => "Data+Metadata",
            BgType::GlobalReserve => "GlobalReserve",
            BgType::Unknown => "unknown",
        }
    }

    /// The name in JSON (`data+metadata`, `global_reserve`).
    pub fn json_name(self) -> &'static str {
        match self {
            BgType::Data => "data",
            BgType::System => "system",
            BgType::Metadata => "metadata",
            BgType::DataMetadata => "data+metadata",
            BgType::GlobalReserve => "global_reserve",
            BgType::Unknown => "unknown",
        }
    }

    /// Parses a JSON name (`global_reserve`).
    pub(crate) fn from_json_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.json_name() == s)
    }

    /// Parses a btrfs-progs type name (case-insensitive).
    pub fn from_progs_name(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.progs_name().eq_ignore_ascii_case(s))
    }
}

impl Serialize for BgType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.json_name())
    }
}

impl schemars::JsonSchema for BgType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "BgType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Self::ALL.iter().map(|t| t.json_name()).collect();
        schemars::json_schema!({
            "description": "Block-group type, as btrfs-progs names them.",
            "type": "string",
            "enum": names,
        })
    }
}

impl<'de> Deserialize<'de> for BgType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        BgType::from_json_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown block-group type {name:?}")))
    }
}

/// A profile as shown by `fi df`: a known one, or `UNKNOWN` (flags this
/// version does not know).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BgProfile {
    /// A known profile.
    Known(Profile),
    /// btrfs-progs' `UNKNOWN`.
    Unknown,
}

impl BgProfile {
    /// The name btrfs-progs prints: `single` lowercase, the rest uppercase.
    pub fn progs_name(self) -> String {
        match self {
            BgProfile::Known(Profile::Single) => "single".to_owned(),
            BgProfile::Known(p) => p.name().to_ascii_uppercase(),
            BgProfile::Unknown => "UNKNOWN".to_owned(),
        }
    }

    /// Parses a btrfs-progs profile name (case-insensitive).
    pub fn from_progs_name(s: &str) -> Option<Self> {
        if s.eq_ignore_ascii_case("unknown") {
            return Some(BgProfile::Unknown);
        }
        s.parse::<Profile>().ok().map(BgProfile::Known)
    }
}

impl fmt::Display for BgProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BgProfile::Known(p) => f.write_str(p.name()),
            BgProfile::Unknown => f.write_str("unknown"),
        }
    }
}

impl Serialize for BgProfile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl schemars::JsonSchema for BgProfile {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "BgProfile".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut names: Vec<String> = Profile::ALL
            .iter()
            .map(|p| BgProfile::Known(*p).to_string())
            .collect();
        names.push(BgProfile::Unknown.to_string());
        schemars::json_schema!({
            "description": "A profile as `fi df` shows it (lowercase), or `unknown`.",
            "type": "string",
            "enum": names,
        })
    }
}

impl<'de> Deserialize<'de> for BgProfile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        BgProfile::from_progs_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown profile {name:?}")))
    }
}

/// One line of `btrfs filesystem df`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpaceRecord {
    /// Block-group type.
    #[serde(rename = "type")]
    pub bg_type: BgType,
    /// Profile.
    pub profile: BgProfile,
    /// Bytes allocated to block groups of this kind (logical).
    pub total_bytes: u64,
    /// Bytes used in them.
    pub used_bytes: u64,
    /// Zoned filesystems: bytes that cannot be used until a zone reset.
    pub zone_unusable_bytes: Option<u64>,
    /// True when the values are exact (kernel, raw bytes); false when parsed
    /// from rounded human-readable text.
    pub exact: bool,
    /// The true total lies within `total_bytes` ± this (0 when exact).
    pub total_error_bytes: u64,
    /// The true used lies within `used_bytes` ± this.
    pub used_error_bytes: u64,
    /// Likewise for `zone_unusable_bytes`.
    pub zone_unusable_error_bytes: Option<u64>,
}

impl SpaceRecord {
    /// An exact record (from the kernel, or raw bytes).
    pub fn exact(
        bg_type: BgType,
        profile: BgProfile,
        total: u64,
        used: u64,
        zone_unusable: Option<u64>,
    ) -> Self {
        Self {
            bg_type,
            profile,
            total_bytes: total,
            used_bytes: used,
            zone_unusable_bytes: zone_unusable,
            exact: true,
            total_error_bytes: 0,
            used_error_bytes: 0,
            zone_unusable_error_bytes: zone_unusable.map(|_| 0),
        }
    }
}

/// Types that carry more than one profile: a conversion (balance with a
/// convert filter) that did not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MixedProfiles {
    /// The type.
    #[serde(rename = "type")]
    pub bg_type: BgType,
    /// Its profiles, in the order btrfs-progs lists them.
    pub profiles: Vec<BgProfile>,
}

/// Finds types with several profiles (GlobalReserve excluded: it is always
/// `single`).
pub fn mixed_profiles(records: &[SpaceRecord]) -> Vec<MixedProfiles> {
    let mut out: Vec<MixedProfiles> = Vec::new();
    for r in records
        .iter()
        .filter(|r| r.bg_type != BgType::GlobalReserve)
    {
        match out.iter_mut().find(|m| m.bg_type == r.bg_type) {
            Some(m) => {
                if !m.profiles.contains(&r.profile) {
                    m.profiles.push(r.profile);
                }
            }
            None => out.push(MixedProfiles {
                bg_type: r.bg_type,
                profiles: vec![r.profile],
            }),
        }
    }
    out.retain(|m| m.profiles.len() > 1);
    for m in &mut out {
        m.profiles.sort();
    }
    out
}

/// `Data: single, raid0` for a warning.
pub(crate) fn describe_mixed(m: &MixedProfiles) -> String {
    let names: Vec<String> = m.profiles.iter().map(ToString::to_string).collect();
    format!("{}: {}", m.bg_type.progs_name(), names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in [
            "Data",
            "System",
            "Metadata",
            "Data+Metadata",
            "GlobalReserve",
            "unknown",
        ] {
            assert_eq!(BgType::from_progs_name(t).unwrap().progs_name(), t);
        }
        for p in [
            "single", "DUP", "RAID0", "RAID1", "RAID1C3", "RAID1C4", "RAID10", "RAID5", "RAID6",
            "UNKNOWN",
        ] {
            assert_eq!(BgProfile::from_progs_name(p).unwrap().progs_name(), p);
        }
        assert_eq!(BgProfile::from_progs_name("raid7"), None);
        assert_eq!(
            serde_json::to_string(&BgType::DataMetadata).unwrap(),
            "\"data+metadata\""
        );
        assert_eq!(
            serde_json::to_string(&BgProfile::Known(Profile::Raid1c3)).unwrap(),
            "\"raid1c3\""
        );
    }

    #[test]
    fn finds_mixed_profiles() {
        let r = |t, p| SpaceRecord::exact(t, BgProfile::Known(p), 1, 0, None);
        let records = vec![
            r(BgType::Data, Profile::Raid0),
            r(BgType::Data, Profile::Single),
            r(BgType::Metadata, Profile::Raid1),
            r(BgType::GlobalReserve, Profile::Single),
        ];
        let m = mixed_profiles(&records);
        assert_eq!(m.len(), 1);
        assert_eq!(describe_mixed(&m[0]), "Data: single, raid0");
        assert!(mixed_profiles(&records[2..]).is_empty());
    }
}
