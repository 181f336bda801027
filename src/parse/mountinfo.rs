//! `/proc/self/mountinfo` (see proc(5)).

use std::path::{Path, PathBuf};

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Mount ID.
    pub id: u32,
    /// `major:minor` of the filesystem (`st_dev` of its root).
    pub major: u32,
    /// See `major`.
    pub minor: u32,
    /// Root of the mount within the filesystem (a subvolume path on btrfs).
    pub root: PathBuf,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,noatime`).
    pub mount_options: String,
    /// Filesystem type (`btrfs`, `ext4`, `tmpfs`).
    pub fs_type: String,
    /// Source (`/dev/loop3`).
    pub source: String,
    /// Per-superblock options (`rw,compress=zstd:3,space_cache=v2`).
    pub(crate) super_options: String,
}

impl MountEntry {
    /// Every option of the mount and of its superblock, split at commas,
    /// each once: the per-mount ones first, then those of the superblock the
    /// mount did not already give (both say `rw`, it is listed once).
    pub fn options(&self) -> impl Iterator<Item = &str> {
        let own = || self.mount_options.split(',').filter(|o| !o.is_empty());
        own().chain(
            self.super_options
                .split(',')
                .filter(move |o| !o.is_empty() && !own().any(|m| m == *o)),
        )
    }

    /// [`MountEntry::options`] joined with commas (`rw,relatime,ssd,...`).
    pub(crate) fn options_text(&self) -> String {
        self.options().collect::<Vec<_>>().join(",")
    }

    /// True if mounted read-only (per mount or per superblock).
    pub(crate) fn is_read_only(&self) -> bool {
        self.options().any(|o| o == "ro")
    }
}

/// Parses the whole file. Lines that do not parse are skipped: the kernel
/// writes this file, and one odd line must not hide the others.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let mut l = left.split(' ');
    let id = l.next()?.parse().ok()?;
    let _parent = l.next()?;
    let (major, minor) = l.next()?.split_once(':')?;
    let root = unescape(l.next()?);
    let mount_point = unescape(l.next()?);
    let mount_options = l.next()?.to_owned();
    let mut r = right.split(' ');
    let fs_type = r.next()?.to_owned();
    let source = unescape(r.next()?);
    let super_options = r.next().unwrap_or("").to_owned();
    Some(MountEntry {
        id,
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        root: PathBuf::from(root),
        mount_point: PathBuf::from(mount_point),
        mount_options,
        fs_type,
        source,
        super_options,
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\134` for `\`).
/// The octal escapes of /proc/self/mountinfo and fstab(5) (`\040` a
/// space, `\011` a tab, `\134` a backslash) taken off.
pub(crate) fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that contains `path` (already canonical): the last-mounted entry
/// with the longest mount point that is a prefix of `path`.
pub(crate) fn mount_containing<'a>(
    mounts: &'a [MountEntry],
    path: &Path,
) -> Option<&'a MountEntry> {
    mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| path.starts_with(&m.mount_point))
        .max_by_key(|(i, m)| (m.mount_point.components().count(), *i))
        .map(|(_, m)| m)
}

/// Options of a mount that change how btrfs writes data.
pub(crate) fn relevant_mount_options<'a>(options: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = options
        .filter(|o| {
            let key = o.split('=').next().unwrap_or("");
            matches!(
                key,
                "nodatasum" | "nodatacow" | "compress" | "compress-force"
            )
        })
        .map(str::to_owned)
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
29 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
101 29 0:52 / /var/tmp/btrfs-lab/sbx/mnt rw,relatime shared:60 - btrfs /dev/loop3 rw,compress=zstd:3,space_cache=v2,subvolid=5,subvol=/
102 101 0:55 /sub /var/tmp/my\\040dir rw shared:61 - btrfs /dev/loop3 ro,nodatasum,subvolid=256,subvol=/sub
";

    #[test]
    fn parses_fields_and_escapes() {
        let m = parse_mountinfo(SAMPLE);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].fs_type, "btrfs");
        assert_eq!(m[2].source, "/dev/loop3");
        assert_eq!((m[2].major, m[2].minor), (0, 52));
        assert!(m[2].options().any(|o| o == "compress=zstd:3"));
        assert_eq!(m[3].mount_point, PathBuf::from("/var/tmp/my dir"));
        assert_eq!(m[3].root, PathBuf::from("/sub"));
        assert!(m[3].is_read_only());
        assert!(!m[2].is_read_only());
    }

    #[test]
    fn options_name_rw_once() {
        let m = parse_mountinfo(SAMPLE);
        // Mount `rw,relatime`, superblock `rw,compress=zstd:3,...`: one `rw`.
        assert_eq!(
            m[2].options_text(),
            "rw,relatime,compress=zstd:3,space_cache=v2,subvolid=5,subvol=/"
        );
        assert_eq!(m[2].options().filter(|o| *o == "rw").count(), 1);
        // A read-write mount of a read-only superblock keeps both words.
        assert_eq!(
            m[3].options_text(),
            "rw,ro,nodatasum,subvolid=256,subvol=/sub"
        );
        assert_eq!(m[0].options_text(), "rw,nosuid,nodev,noexec,relatime");
    }

    #[test]
    fn finds_the_innermost_mount() {
        let m = parse_mountinfo(SAMPLE);
        let hit = mount_containing(&m, Path::new("/var/tmp/btrfs-lab/sbx/mnt/a/b")).unwrap();
        assert_eq!(hit.id, 101);
        assert_eq!(mount_containing(&m, Path::new("/home")).unwrap().id, 29);
        // "/var/tmp/btrfs-lab/sbx/mntx" is not inside ".../mnt".
        assert_eq!(
            mount_containing(&m, Path::new("/var/tmp/btrfs-lab/sbx/mntx"))
                .unwrap()
                .id,
            29
        );
    }

    #[test]
    fn skips_garbage_lines() {
        assert!(parse_mountinfo("garbage\n1 2 3\n").is_empty());
    }
}
