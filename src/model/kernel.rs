//! Kernel versions, for features that depend on them.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `major.minor` of a kernel release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

impl KernelVersion {
    /// A version.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// Parses the start of a release string (`6.18.44-fc-v657`).
    pub fn parse(release: &str) -> Option<Self> {
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self { major, minor })
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for KernelVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl schemars::JsonSchema for KernelVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KernelVersion".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "`major.minor` of a kernel release.",
            "type": "string",
            "pattern": "^[0-9]+\\.[0-9]+$",
        })
    }
}

impl<'de> Deserialize<'de> for KernelVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        KernelVersion::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a kernel version: {text:?}")))
    }
}

/// RAID1C3 and RAID1C4 exist since Linux 5.5.
pub(crate) const RAID1C34: KernelVersion = KernelVersion::new(5, 5);
/// Since Linux 5.15 RAID0 and RAID10 work with fewer devices (1 and 2).
pub(crate) const DEGENERATE_RAID: KernelVersion = KernelVersion::new(5, 15);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_releases() {
        assert_eq!(
            KernelVersion::parse("6.18.44-fc-v657"),
            Some(KernelVersion::new(6, 18))
        );
        assert_eq!(
            KernelVersion::parse("5.4.0"),
            Some(KernelVersion::new(5, 4))
        );
        assert_eq!(KernelVersion::parse("garbage"), None);
        assert!(KernelVersion::new(5, 4) < RAID1C34);
        assert!(KernelVersion::new(6, 1) >= DEGENERATE_RAID);
    }
}
