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

/// The kernel each incompat on-disk feature (sysfs `features/` names)
/// needs to be mounted at all, from the kernel's fs/btrfs history (the
/// release that added each flag).
pub(crate) const MOUNT_FLOORS: [(&str, KernelVersion); 11] = [
    ("mixed_backref", KernelVersion::new(2, 6)),
    ("compress_lzo", KernelVersion::new(2, 6)),
    ("big_metadata", KernelVersion::new(3, 4)),
    ("extended_iref", KernelVersion::new(3, 7)),
    ("raid56", KernelVersion::new(3, 9)),
    ("skinny_metadata", KernelVersion::new(3, 10)),
    ("no_holes", KernelVersion::new(3, 14)),
    ("compress_zstd", KernelVersion::new(4, 14)),
    ("metadata_uuid", KernelVersion::new(5, 0)),
    ("raid1c34", KernelVersion::new(5, 5)),
    ("zoned", KernelVersion::new(5, 12)),
];

/// compat_ro features: an older kernel mounts read-only.
pub(crate) const MOUNT_FLOORS_RO: [(&str, KernelVersion); 3] = [
    ("free_space_tree", KernelVersion::new(4, 5)),
    ("verity", KernelVersion::new(5, 15)),
    ("block_group_tree", KernelVersion::new(6, 1)),
];

/// Incompat features of newer kernels (the remap tree: 8912c2fd5830,
/// experimental in 7.0).
pub(crate) const MOUNT_FLOORS_NEW: [(&str, KernelVersion); 3] = [
    ("raid_stripe_tree", KernelVersion::new(6, 7)),
    ("simple_quota", KernelVersion::new(6, 7)),
    ("remap_tree", KernelVersion::new(7, 0)),
];

/// A rescue system this old (Ubuntu 20.04's 5.4, an LTS still in wide use)
/// is what `oldest-kernel` compares with.
pub(crate) const RESCUE_KERNEL: KernelVersion = KernelVersion::new(5, 4);

/// The oldest kernel that mounts a filesystem with `features` read-write,
/// and the features that decide it.
pub(crate) fn oldest_read_write(features: &[String]) -> (KernelVersion, Vec<&'static str>) {
    let has = |f: &str| features.iter().any(|x| x == f);
    let all = MOUNT_FLOORS
        .iter()
        .copied()
        .chain(MOUNT_FLOORS_RO)
        .chain(MOUNT_FLOORS_NEW)
        .filter(|(f, _)| has(f));
    let mut best = KernelVersion::new(2, 6);
    let mut why = Vec::new();
    for (f, k) in all {
        if k > best {
            best = k;
            why.clear();
        }
        if k == best {
            why.push(f);
        }
    }
    (best, why)
}

/// The oldest kernel that mounts it read-only (compat_ro features left out).
pub(crate) fn oldest_read_only(features: &[String]) -> KernelVersion {
    let has = |f: &str| features.iter().any(|x| x == f);
    MOUNT_FLOORS
        .iter()
        .copied()
        .chain(MOUNT_FLOORS_NEW)
        .filter(|(f, _)| has(f))
        .map(|(_, k)| k)
        .max()
        .unwrap_or(KernelVersion::new(2, 6))
}

/// Every feature of `features` that a kernel must know to mount the
/// filesystem, with the release that added it and whether an older kernel
/// still mounts it read-only (compat_ro), from the same tables as
/// [`oldest_read_write`] and [`oldest_read_only`].
pub(crate) fn floors(features: &[String]) -> Vec<(&'static str, KernelVersion, bool)> {
    let has = |f: &str| features.iter().any(|x| x == f);
    MOUNT_FLOORS
        .iter()
        .chain(&MOUNT_FLOORS_NEW)
        .map(|&(f, k)| (f, k, false))
        .chain(MOUNT_FLOORS_RO.iter().map(|&(f, k)| (f, k, true)))
        .filter(|(f, _, _)| has(f))
        .collect()
}

/// Linux 7.3 disables the v1 free space cache (545e560a5b0f): the
/// `space_cache` and `space_cache=v1` options fall back to
/// `nospace_cache`; nothing converts the filesystem to the free space tree.
pub(crate) const V1_CACHE_DISABLED: KernelVersion = KernelVersion::new(7, 3);
/// Linux 7.3 removes the plain `usebackuproot` mount option
/// (ee2851074b4a); `rescue=usebackuproot` remains, and is a read-only
/// rescue option from 7.3 on (ce5d6709ebfa).
pub(crate) const PLAIN_USEBACKUPROOT_REMOVED: KernelVersion = KernelVersion::new(7, 3);

/// A kernel version as a person gives it (`7.3`, `7.3.4`, or a release
/// as `uname -r` prints it, `7.3.4+deb13-amd64`): its `major.minor`, or
/// `None` when it is not one.
pub fn parse_version_arg(text: &str) -> Option<KernelVersion> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (numbers, rest) = text.split_at(end);
    let parts: Vec<&str> = numbers.split('.').collect();
    let numeric = parts.iter().all(|p| !p.is_empty() && p.len() <= 4);
    let suffix_ok = rest.is_empty() || rest.starts_with(['-', '+', '~']);
    if !(2..=3).contains(&parts.len()) || !numeric || !suffix_ok {
        return None;
    }
    KernelVersion::parse(numbers).filter(|k| k.major >= 2)
}

/// RAID1C3 and RAID1C4 exist since Linux 5.5.
pub(crate) const RAID1C34: KernelVersion = KernelVersion::new(5, 5);
/// Since Linux 5.15 RAID0 and RAID10 work with fewer devices (1 and 2).
pub(crate) const DEGENERATE_RAID: KernelVersion = KernelVersion::new(5, 15);
/// From this kernel on every failed bio counts in the device error
/// counters (fc3d53288158): counts jump after an upgrade to it.
pub(crate) const COUNTS_EVERY_BIO_ERROR: KernelVersion = KernelVersion::new(7, 1);

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

    #[test]
    fn version_arguments() {
        let k = |s: &str| parse_version_arg(s);
        assert_eq!(k("7.3"), Some(KernelVersion::new(7, 3)));
        assert_eq!(k("7.3.4"), Some(KernelVersion::new(7, 3)));
        assert_eq!(k("6.12"), Some(KernelVersion::new(6, 12)));
        assert_eq!(k("7.3.4+deb13-amd64"), Some(KernelVersion::new(7, 3)));
        assert_eq!(k("6.18.44-fc-v1300"), Some(KernelVersion::new(6, 18)));
        for bad in [
            "", "7", "7.", "7.x", "v7.3", "7.3.4.5", "latest", "7..3", "1.0", "7.3rc1",
        ] {
            assert_eq!(k(bad), None, "{bad}");
        }
    }

    #[test]
    fn floors_are_the_oldest_kernel_tables() {
        let f: Vec<String> = ["raid1c34", "free_space_tree", "remap_tree", "no_holes"]
            .map(String::from)
            .to_vec();
        let v = floors(&f);
        let newest_rw = v.iter().filter(|x| !x.2).map(|x| x.1).max().unwrap();
        assert_eq!(newest_rw, oldest_read_only(&f));
        let newest = v.iter().map(|x| x.1).max().unwrap();
        assert_eq!(newest, oldest_read_write(&f).0);
        assert!(v.contains(&("free_space_tree", KernelVersion::new(4, 5), true)));
    }
}
