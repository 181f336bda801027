//! BTRFS lines of `dmesg` and `journalctl -k` (their timestamps taken off
//! by [`super::paste`]), kernels 3.x to 6.x: `BTRFS error (device sda):
//! ...`, `BTRFS error (device sda state EA): ...`, `BTRFS: error (device
//! sda) in func:123: errno=-5 IO failure`, `BTRFS: ...`. What explain uses:
//!
//! - `bdev /dev/sdb errs: wr 0, rd 1, flush 0, corrupt 2, gen 0`;
//! - `csum failed root 5 ino 257 off 4096 csum 0x... expected csum 0x...
//!   mirror 1` (older kernels: no root, no mirror);
//! - scrub's `checksum error at logical L on dev D, physical P, root R,
//!   inode I, offset O, length N, links 1 (path: a/b)`, `unable to fixup
//!   (regular) error at logical L on dev D`, `fixed up error at ...`,
//!   `read error corrected: ino I off O (dev D sector S)`;
//! - a missing device: `devid 2 uuid U is missing`, `missing devices (1)
//!   exceeds the limit (0)`; `allowing degraded mounts`;
//! - `forced readonly`, `Transaction aborted (error -28)`, `errno=-28 No
//!   space left`;
//! - metadata damage: `parent transid verify failed on`, `corrupt leaf`,
//!   `corrupt node`, `bad tree block start`, `checksum verify failed on`,
//!   `open_ctree failed`.

use serde::{Deserialize, Serialize};

use super::paste::{after, after_num};

/// What a BTRFS line says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum KernelEvent {
    /// The error counters of one device, after an error.
    DeviceErrors {
        /// The device.
        device: String,
        /// Write, read, flush, corruption, generation.
        counters: [u64; 5],
    },
    /// A data block's checksum did not match (a read, or a scrub).
    ChecksumFailed {
        /// Subvolume (root) id, when printed.
        root: Option<i64>,
        /// Inode.
        inode: Option<u64>,
        /// Offset in the file.
        offset: Option<u64>,
        /// The path scrub printed.
        path: Option<String>,
        /// The device, when printed.
        device: Option<String>,
    },
    /// Scrub could not repair a block (no good copy).
    Unrepaired {
        /// The device.
        device: Option<String>,
    },
    /// A bad block was rewritten from a good copy.
    Repaired,
    /// A member device is missing.
    DeviceMissing {
        /// Its devid, when printed.
        devid: Option<u64>,
    },
    /// Mounted with `-o degraded`.
    Degraded,
    /// The filesystem went read-only.
    ForcedReadonly,
    /// A transaction was aborted.
    TransactionAborted {
        /// The errno (`-28`: no space, `-5`: I/O error).
        errno: Option<i64>,
    },
    /// Metadata found damaged (`parent transid verify failed`, `corrupt
    /// leaf`, ...).
    MetadataDamage {
        /// Which message.
        what: String,
    },
    /// The mount failed (`open_ctree failed`, `failed to read chunk tree`,
    /// `failed to read the system array`): a missing device, or damage.
    MountFailed,
    /// Any other BTRFS line.
    Other,
}

/// The device a `BTRFS level (device X[ state S])` line is about.
pub fn fs_device(text: &str) -> Option<&str> {
    let d = after(text, "(device ")?;
    Some(d.trim_end_matches(':'))
}

/// Reads one cleaned log line; `None` when it is not a BTRFS line.
pub fn read(text: &str) -> Option<KernelEvent> {
    let at = text.find("BTRFS")?;
    let head = &text[..at];
    // `BTRFS` inside a longer word or a sentence is not a kernel line.
    if !(head.is_empty() || head.trim_end().ends_with(':') && head.len() < 64) {
        return None;
    }
    let t = &text[at..];
    // `BTRFS: ...` or `BTRFS level (device X...): ...`; not another
    // tool's `BTRFS CRITICAL: ...`.
    let levelled = t.strip_prefix("BTRFS ").is_some_and(|r| {
        let level = r.split([' ', ':']).next().unwrap_or("");
        [
            "emerg", "alert", "critical", "error", "warning", "notice", "info", "debug",
        ]
        .contains(&level)
    });
    if !(t.starts_with("BTRFS:") || levelled) {
        return None;
    }
    let event = if let Some(r) = t
        .split_once(" bdev ")
        .map(|x| x.1)
        .filter(|r| r.contains(" errs: wr "))
    {
        let device = r.split(' ').next().unwrap_or("").to_owned();
        let n = |k| after_num(r, k).unwrap_or(0);
        KernelEvent::DeviceErrors {
            device,
            counters: [
                n("wr "),
                n(" rd "),
                n(" flush "),
                n(" corrupt "),
                n(" gen "),
            ],
        }
    } else if t.contains("csum failed ") {
        KernelEvent::ChecksumFailed {
            root: after_num(t, " root "),
            inode: after_num(t, " ino "),
            offset: after_num(t, " off "),
            path: None,
            device: None,
        }
    } else if t.contains("checksum error at logical ") {
        KernelEvent::ChecksumFailed {
            root: after_num(t, " root "),
            inode: after_num(t, " inode "),
            offset: after_num(t, " offset "),
            path: t
                .split_once("(path: ")
                .map(|(_, p)| p.trim_end_matches(')').to_owned()),
            device: after(t, " on dev ").map(str::to_owned),
        }
    } else if t.contains("unable to fixup") {
        KernelEvent::Unrepaired {
            device: after(t, " on dev ").map(str::to_owned),
        }
    } else if t.contains("fixed up error at") || t.contains("read error corrected") {
        KernelEvent::Repaired
    } else if t.contains(" is missing") && t.contains("devid ") {
        KernelEvent::DeviceMissing {
            devid: after_num(t, "devid "),
        }
    } else if t.contains("missing devices (") || t.contains("too many missing devices") {
        KernelEvent::DeviceMissing { devid: None }
    } else if t.contains("allowing degraded mounts") {
        KernelEvent::Degraded
    } else if t.contains("forced readonly") || t.contains("Remounting read-only") {
        KernelEvent::ForcedReadonly
    } else if t.contains("Transaction aborted") {
        KernelEvent::TransactionAborted {
            errno: after_num(t, "(error "),
        }
    } else if t.contains("errno=") {
        KernelEvent::TransactionAborted {
            errno: after_num(t, "errno="),
        }
    } else if t.contains("open_ctree failed")
        || t.contains("failed to read chunk tree")
        || t.contains("failed to read the system array")
    {
        KernelEvent::MountFailed
    } else if let Some(what) = [
        "parent transid verify failed",
        "corrupt leaf",
        "corrupt node",
        "bad tree block start",
        "checksum verify failed",
    ]
    .into_iter()
    .find(|w| t.contains(w))
    {
        KernelEvent::MetadataDamage {
            what: what.to_owned(),
        }
    } else {
        KernelEvent::Other
    };
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_explain_uses() {
        // kdave/btrfs-progs#974 (journalctl, kernel 6.x).
        let e = read("BTRFS warning (device sdb1): csum failed root 1562 ino 59747 off 1602211840 csum 0xf6f45a1f expected csum 0x0e8a49e7 mirror 2").unwrap();
        assert_eq!(
            e,
            KernelEvent::ChecksumFailed {
                root: Some(1562),
                inode: Some(59747),
                offset: Some(1602211840),
                path: None,
                device: None
            }
        );
        let e = read(
            "BTRFS error (device sdb1): bdev /dev/sdc1 errs: wr 0, rd 0, flush 0, corrupt 1, gen 0",
        )
        .unwrap();
        assert_eq!(
            e,
            KernelEvent::DeviceErrors {
                device: "/dev/sdc1".into(),
                counters: [0, 0, 0, 1, 0]
            }
        );
        assert_eq!(
            read("BTRFS: error (device sdc2) in __btrfs_cow_block:1080: errno=-5 IO failure"),
            Some(KernelEvent::TransactionAborted { errno: Some(-5) })
        );
        assert_eq!(
            read("BTRFS: Transaction aborted (error -28)"),
            Some(KernelEvent::TransactionAborted { errno: Some(-28) })
        );
        assert_eq!(
            read("BTRFS info (device sdc2): forced readonly"),
            Some(KernelEvent::ForcedReadonly)
        );
        assert_eq!(
            read("BTRFS warning (device sdb): devid 2 uuid 1234 is missing"),
            Some(KernelEvent::DeviceMissing { devid: Some(2) })
        );
        let e = read("BTRFS warning (device sda): checksum error at logical 123 on dev /dev/sdb, physical 456, root 5, inode 257, offset 8192, length 4096, links 1 (path: home/a.txt)").unwrap();
        assert!(
            matches!(e, KernelEvent::ChecksumFailed { path: Some(ref p), inode: Some(257), .. } if p == "home/a.txt")
        );
        assert!(matches!(
            read(
                "BTRFS error (device vdb): parent transid verify failed on 30736384 wanted 10 found 8"
            ),
            Some(KernelEvent::MetadataDamage { .. })
        ));
        assert_eq!(
            read("BTRFS info (device sda): using free space tree"),
            Some(KernelEvent::Other)
        );
        assert_eq!(
            read("I said BTRFS is great, really, many many words before it here ok"),
            None
        );
        assert_eq!(read("NOTBTRFS: x"), None);
        assert_eq!(read("BTRFS CRITICAL: Device 1: generation_errs: 1"), None);
        assert_eq!(
            fs_device("BTRFS error (device dm-0 state EA): x"),
            Some("dm-0")
        );
    }
}
