//! `/etc/fstab` as fstab(5) writes it: the entries, with the octal escapes
//! (`\040` for a space) taken off, and which of them are a filesystem's.
//! Pure: text in, entries out; the device paths an entry names are resolved
//! by the caller (doctor, on the host only).

use serde::{Deserialize, Serialize};

/// One fstab line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FstabEntry {
    /// Line number (1-based).
    pub line: usize,
    /// First field: what to mount (`UUID=...`, `/dev/nvme1n1`, `LABEL=...`).
    pub spec: String,
    /// Second field: where.
    pub file: String,
    /// Third field: the filesystem type.
    pub vfstype: String,
    /// Fourth field, split at commas.
    pub options: Vec<String>,
    /// The line as written.
    pub text: String,
}

impl FstabEntry {
    /// The value of `name=VALUE` among the options, or `Some("")` for a
    /// bare `name`.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options.iter().find_map(|o| match o.split_once('=') {
            Some((k, v)) if k == name => Some(v),
            None if o == name => Some(""),
            _ => None,
        })
    }
}

/// The fstab entries a doctor run audits for one filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FstabFacts {
    /// The file read (`/etc/fstab`, or `--fstab FILE`).
    pub path: String,
    /// Its btrfs entries for this filesystem.
    pub entries: Vec<FstabEntry>,
}

use crate::parse::mountinfo::unescape;

/// Every entry of an fstab text (comments and blank lines skipped; a line
/// of fewer than three fields is not an entry).
pub fn parse(text: &str) -> Vec<FstabEntry> {
    text.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                return None;
            }
            let f: Vec<&str> = t.split_whitespace().collect();
            if f.len() < 3 {
                return None;
            }
            Some(FstabEntry {
                line: n + 1,
                spec: unescape(f[0]),
                file: unescape(f[1]),
                vfstype: f[2].to_owned(),
                options: f
                    .get(3)
                    .map(|o| o.split(',').map(unescape).collect())
                    .unwrap_or_default(),
                text: line.to_owned(),
            })
        })
        .collect()
}

/// Whether `e` mounts the filesystem of `uuid`/`label` at `mount_point`,
/// or names one of its members (`members`: the members' paths, and the
/// entry's device path as the caller resolved it, when it exists).
pub fn is_for(
    e: &FstabEntry,
    uuid: &str,
    label: Option<&str>,
    mount_point: &str,
    members: &[String],
    resolved_spec: Option<&str>,
) -> bool {
    if e.vfstype != "btrfs" {
        return false;
    }
    let spec = e.spec.as_str();
    let by_spec = if let Some(u) = spec.strip_prefix("UUID=") {
        u.trim_matches('"').eq_ignore_ascii_case(uuid)
    } else if let Some(l) = spec.strip_prefix("LABEL=") {
        label.is_some_and(|x| x == l.trim_matches('"'))
    } else if let Some(u) = spec.strip_prefix("/dev/disk/by-uuid/") {
        u.eq_ignore_ascii_case(uuid)
    } else {
        members
            .iter()
            .any(|m| m == spec || Some(m.as_str()) == resolved_spec)
    };
    by_spec || e.file == mount_point
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_escapes_and_options() {
        let text = "# /etc/fstab\n\nUUID=ab-cd /mnt/My\\040Data btrfs noatime,subvol=@data,compress=zstd:3 0 0\n/dev/sdb1 /srv btrfs\nbroken line\n";
        let v = parse(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].line, 3);
        assert_eq!(v[0].file, "/mnt/My Data");
        assert_eq!(v[0].option("subvol"), Some("@data"));
        assert_eq!(v[0].option("noatime"), Some(""));
        assert_eq!(v[0].option("degraded"), None);
        assert!(v[1].options.is_empty());
    }

    #[test]
    fn which_entries_are_a_filesystems() {
        let v = parse(
            "UUID=AB-CD / btrfs defaults 0 0\nLABEL=pool /p btrfs defaults\n/dev/sdb1 /srv btrfs defaults\n/dev/sdc /x ext4 defaults\nPARTUUID=1 /data btrfs defaults\n",
        );
        let m = ["/dev/sdb1".to_owned()];
        let is = |e: &FstabEntry| is_for(e, "ab-cd", Some("pool"), "/data", &m, None);
        assert_eq!(
            v.iter().map(is).collect::<Vec<_>>(),
            [true, true, true, false, true]
        );
    }
}
