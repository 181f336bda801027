//! The kernel's log of a scrub: which files hold blocks it could not
//! repair (the 6.1 and 6.4+ wordings).

use super::DamagedFile;

/// What the kernel logs of one scrub error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LogEvent {
    /// An error at `logical` in a file (`checksum error at logical L on
    /// dev D, physical P[,] root R[,] inode I[,] offset O ... (path: X)`).
    Named {
        logical: u64,
        root: u64,
        inode: u64,
        offset: u64,
        path: String,
    },
    /// No good copy of `logical` (`unable to fixup (regular) error at
    /// logical L on dev D ...`).
    Unfixed { logical: u64 },
}

/// Pure: one kernel log message about a device in `devices`, read as a
/// scrub error (the 6.1 and 6.4+ scrub wordings), or `None`.
pub(super) fn parse_log(msg: &str, devices: &[String]) -> Option<LogEvent> {
    let ours = devices.iter().any(|d| {
        !d.is_empty()
            && (msg.ends_with(&format!(" on dev {d}"))
                || [",", " ", ":"]
                    .iter()
                    .any(|end| msg.contains(&format!(" on dev {d}{end}"))))
    });
    if !ours {
        return None;
    }
    let (_, rest) = msg.split_once("error at logical ")?;
    let logical: u64 = rest.split([' ', ',']).next()?.parse().ok()?;
    if msg.contains("unable to fixup") {
        return Some(LogEvent::Unfixed { logical });
    }
    let (fields, path) = rest.split_once("(path: ")?;
    let path = path.strip_suffix(')').unwrap_or(path).to_owned();
    let words: Vec<&str> = fields.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let after = |name: &str| -> Option<u64> {
        let i = words.iter().position(|w| *w == name)?;
        words.get(i + 1)?.parse().ok()
    };
    Some(LogEvent::Named {
        logical,
        root: after("root")?,
        inode: after("inode")?,
        offset: after("offset")?,
        path,
    })
}

/// The damaged files among the log's events: those named for a logical
/// address the kernel could not fix up. At most 1000.
pub(super) fn damaged_from(events: &[LogEvent]) -> Vec<DamagedFile> {
    let mut unfixed: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for e in events {
        if let LogEvent::Unfixed { logical } = e {
            *unfixed.entry(*logical).or_default() += 1;
        }
    }
    let mut files: std::collections::BTreeMap<(u64, u64), DamagedFile> =
        std::collections::BTreeMap::new();
    let mut counted: std::collections::BTreeSet<(u64, u64, u64)> =
        std::collections::BTreeSet::new();
    for e in events {
        if let LogEvent::Named {
            logical,
            root,
            inode,
            offset,
            path,
        } = e
            && let Some(&n) = unfixed.get(logical)
        {
            if files.len() >= 1000 && !files.contains_key(&(*root, *inode)) {
                continue;
            }
            let f = files.entry((*root, *inode)).or_insert_with(|| DamagedFile {
                subvolume: *root,
                inode: *inode,
                path: path.clone(),
                offsets: Vec::new(),
                errors: 0,
            });
            if !f.offsets.contains(offset) {
                f.offsets.push(*offset);
            }
            if counted.insert((*root, *inode, *logical)) {
                f.errors += n;
            }
        }
    }
    let mut v: Vec<DamagedFile> = files.into_values().collect();
    for f in &mut v {
        f.offsets.sort_unstable();
    }
    v
}
