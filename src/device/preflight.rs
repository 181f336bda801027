//! "May I write on this device?" — one preflight for every command that
//! takes a device (device add now; replace later), returning every reason
//! as a value instead of stopping at the first.

use std::path::Path;

use crate::error::{Error, ErrorKind};
use crate::operation::state::FsState;
use crate::parse::size::format_iec;
use crate::sys::block::blockdev::BlockDeviceFacts;

/// The smallest device btrfs-lab adds.
pub(crate) const MIN_DEVICE_SIZE: u64 = 256 << 20;

pub use crate::operation::reason::Reason;

/// `member` (a member's path) is the device `candidate` (resolved).
pub(crate) fn same_device(member: &str, candidate: &Path) -> bool {
    !member.is_empty() && crate::sys::block::blockdev::resolved(Path::new(member)) == candidate
}

/// Every reason why `f` must not become a new device of `fs`. Reasons that
/// `--overwrite` lifts (signatures, partitions, another unmounted btrfs) are
/// included; the caller decides with [`Reason::blocks`].
pub(crate) fn device_reasons(f: &BlockDeviceFacts, fs: &FsState) -> Vec<Reason> {
    let p = &f.given;
    let mut r = Vec::new();
    if !f.exists {
        r.push(Reason::device(
            p,
            "not-found",
            format!("{} does not exist", p.display()),
            false,
        ));
        return r;
    }
    if !f.is_block {
        r.push(Reason::device(
            p,
            "not-block-device",
            format!("{} is not a block device (to use an image file, attach it first: losetup --find --show FILE)", p.display()),
            false,
        ));
        return r;
    }
    if let Some(m) = fs.devices.iter().find(|m| same_device(&m.path, &f.path)) {
        r.push(Reason::device(
            p,
            "member",
            format!(
                "{} is already device {} of this filesystem",
                p.display(),
                m.devid
            ),
            false,
        ));
        return r;
    }
    if f.btrfs_fsid.as_deref() == Some(fs.fsid.as_str()) {
        r.push(Reason::device(
            p,
            "member",
            format!(
                "{} carries this filesystem's own superblock (a missing or removed member?)",
                p.display()
            ),
            false,
        ));
    }
    for m in &f.mounted_at {
        r.push(Reason::device(
            p,
            "mounted",
            format!("{} is mounted at {}", p.display(), m.display()),
            false,
        ));
    }
    if f.swap {
        r.push(Reason::device(
            p,
            "swap",
            format!("{} is in use as swap", p.display()),
            false,
        ));
    }
    if !f.holders.is_empty() {
        r.push(Reason::device(
            p,
            "holders",
            format!(
                "{} is used by {} (device-mapper, LVM or md RAID)",
                p.display(),
                f.holders.join(", ")
            ),
            false,
        ));
    }
    let other_fs = f.btrfs_fsid.as_deref().filter(|id| *id != fs.fsid);
    if let (Some(other), Some(at)) = (other_fs, f.btrfs_mounted_at.first())
        && f.mounted_at.is_empty()
    {
        r.push(Reason::device(
            p,
            "mounted",
            format!(
                "{} is a member of the btrfs mounted at {} ({other})",
                p.display(),
                at.display()
            ),
            false,
        ));
    }
    let in_use = !f.mounted_at.is_empty() || !f.btrfs_mounted_at.is_empty();
    if f.busy && !in_use && !f.swap && f.holders.is_empty() {
        r.push(Reason::device(
            p,
            "busy",
            format!(
                "{} is busy: another program holds it open exclusively",
                p.display()
            ),
            false,
        ));
    }
    if f.read_only {
        r.push(Reason::device(
            p,
            "read-only",
            format!("{} is read-only", p.display()),
            false,
        ));
    }
    match f.size {
        Some(s) if s < MIN_DEVICE_SIZE => r.push(Reason::device(
            p,
            "too-small",
            format!(
                "{} has {}; a device needs at least {}",
                p.display(),
                format_iec(s),
                format_iec(MIN_DEVICE_SIZE)
            ),
            false,
        )),
        None => r.push(Reason::device(
            p,
            "size-unknown",
            format!("the size of {} cannot be read", p.display()),
            false,
        )),
        _ => {}
    }
    if !f.partitions.is_empty() {
        r.push(Reason::device(
            p,
            "partitions",
            format!(
                "{} has partitions ({}); add a partition instead, or --overwrite to overwrite the partition table",
                p.display(),
                f.partitions.join(", ")
            ),
            true,
        ));
    }
    if let Some((file, uid)) = &f.loop_backing_owner {
        r.push(Reason::device(
            p,
            "loop-file-user-owned",
            format!(
                "{} is a loop device over {}, a file uid {uid} owns: that user could rewrite this member under the filesystem; --overwrite (--force) to use it anyway",
                p.display(),
                file.display()
            ),
            true,
        ));
    }
    if let Some(other) = other_fs.filter(|_| !in_use) {
        r.push(Reason::device(
            p,
            "other-btrfs",
            format!(
                "{} holds another btrfs filesystem ({other}); --overwrite destroys it",
                p.display()
            ),
            true,
        ));
    }
    let sigs: Vec<String> = f
        .signatures
        .iter()
        .filter(|s| s.kind != "btrfs" || f.btrfs_fsid.is_none())
        .map(|s| format!("{} at {}", s.kind, s.offset))
        .collect();
    if !sigs.is_empty() {
        r.push(Reason::device(
            p,
            "signature",
            format!(
                "{} carries signatures: {}; --overwrite wipes them",
                p.display(),
                sigs.join(", ")
            ),
            true,
        ));
    }
    if let Some(e) = &f.signature_error {
        r.push(Reason::device(
            p,
            "signature-unknown",
            format!(
                "cannot check {} for signatures ({e}); --overwrite proceeds without the check",
                p.display()
            ),
            true,
        ));
    }
    r
}

/// Every reason at once. Each reason `--overwrite` lifts says so itself;
/// when another reason stands anyway, that offer is left out (it would not
/// help) and the hint says what `--overwrite` cannot lift.
pub fn refused(what: &str, refusals: &[Reason]) -> Error {
    let all_liftable = refusals.iter().all(|r| r.force_overrides);
    let mut messages: Vec<String> = refusals
        .iter()
        .map(|r| {
            if all_liftable || !r.force_overrides {
                r.message.clone()
            } else {
                without_overwrite_offer(&r.message)
            }
        })
        .collect();
    let first = messages.remove(0);
    let mut e = Error::new(ErrorKind::Refused, format!("cannot {what}: {first}"));
    let mut hint: Vec<String> = messages.iter().map(|m| format!("also: {m}")).collect();
    if !all_liftable && refusals.iter().any(|r| r.force_overrides) {
        let stands: Vec<&str> = refusals
            .iter()
            .filter(|r| !r.force_overrides)
            .map(|r| r.code.as_ref())
            .collect();
        hint.push(format!(
            "--overwrite would not help: it never lifts {}",
            stands.join(", ")
        ));
    }
    if !hint.is_empty() {
        e = e.with_hint(hint.join("; "));
    }
    e
}

/// A reason's sentence without its "; --overwrite ..." offer.
fn without_overwrite_offer(message: &str) -> String {
    match message
        .find("; --overwrite")
        .or_else(|| message.find(", or --overwrite"))
    {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::KernelVersion;
    use crate::operation::state::MemberDevice;
    use crate::parse::wipefs::Signature;

    pub(crate) fn fs() -> FsState {
        FsState {
            path: "/mnt".into(),
            mount_point: "/mnt".into(),
            fsid: "aaaa".into(),
            devices: vec![MemberDevice {
                devid: 1,
                path: "/dev/test-member-none".into(),
                size: 1 << 30,
                allocated: 1 << 28,
            }],
            spaces: Vec::new(),
            exclusive_operation: Some("none".into()),
            balance: None,
            kernel: KernelVersion::new(6, 18),
            features: Vec::new(),
            device_errors: Vec::new(),
        }
    }

    fn blank(path: &str) -> BlockDeviceFacts {
        BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(1 << 30),
            ..BlockDeviceFacts::unknown(Path::new(path), Path::new(path))
        }
    }

    #[test]
    fn a_clean_device_passes() {
        assert!(device_reasons(&blank("/dev/loop9"), &fs()).is_empty());
    }

    #[test]
    fn every_reason_is_returned() {
        let mut f = blank("/dev/loop9");
        f.mounted_at = vec!["/media/usb".into()];
        f.busy = true;
        f.size = Some(100 << 20);
        f.signatures = vec![Signature {
            kind: "ext4".into(),
            offset: "0x438".into(),
            uuid: None,
            label: None,
        }];
        let r = device_reasons(&f, &fs());
        let codes: Vec<&str> = r.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["mounted", "too-small", "signature"]);
        assert!(r[0].blocks(true), "force never lifts 'mounted'");
        assert!(!r[2].blocks(true), "force lifts 'signature'");
        assert!(r[2].blocks(false));
        assert_eq!(
            r[2].message,
            "/dev/loop9 carries signatures: ext4 at 0x438; --overwrite wipes them"
        );
    }

    #[test]
    fn not_a_block_device_or_missing() {
        let mut f = blank("/etc/passwd");
        f.is_block = false;
        assert_eq!(device_reasons(&f, &fs())[0].code, "not-block-device");
        f.exists = false;
        assert_eq!(device_reasons(&f, &fs())[0].code, "not-found");
    }

    #[test]
    fn members_and_other_filesystems() {
        let mut f = blank("/dev/loop9");
        f.btrfs_fsid = Some("aaaa".into());
        assert_eq!(device_reasons(&f, &fs())[0].code, "member");
        f.btrfs_fsid = Some("bbbb".into());
        f.signatures = vec![Signature {
            kind: "btrfs".into(),
            offset: "0x10040".into(),
            uuid: Some("bbbb".into()),
            label: None,
        }];
        let r = device_reasons(&f, &fs());
        assert_eq!(
            r.iter().map(|r| &*r.code).collect::<Vec<_>>(),
            ["other-btrfs"]
        );
        // A member of another mounted btrfs (not the device it was mounted
        // from: no mount names it) is named as such, never "busy", and
        // --overwrite is not offered.
        f.busy = true;
        f.btrfs_mounted_at = vec!["/srv/other".into()];
        let r = device_reasons(&f, &fs());
        assert_eq!(r.iter().map(|r| &*r.code).collect::<Vec<_>>(), ["mounted"]);
        assert_eq!(
            r[0].message,
            "/dev/loop9 is a member of the btrfs mounted at /srv/other (bbbb)"
        );
        assert!(r[0].blocks(true));
        let mut holders = blank("/dev/sdb");
        holders.holders = vec!["dm-0".into()];
        holders.busy = true;
        assert_eq!(
            device_reasons(&holders, &fs())
                .iter()
                .map(|r| &*r.code)
                .collect::<Vec<_>>(),
            ["holders"]
        );
    }
}

/// The kernel's errno in a failed relocating operation's message (btrfs-progs
/// prints `strerror`), named, with what to do next: ENOSPC, EIO, EROFS.
/// `None` for anything else (ECANCELED included: that is a cancel, not a
/// failure).
pub fn kernel_failure(message: &str) -> Option<(&'static str, &'static str)> {
    if message.contains("No space left on device") || message.contains("ENOSPC") {
        Some((
            "ENOSPC (no space left on device)",
            "the devices ran out of space for it: add a device (btrfs-lab device add) or free space, then run it again; the same command as is fails the same way",
        ))
    } else if message.contains("Input/output error") || message.contains("EIO") {
        Some((
            "EIO (input/output error)",
            "a device could not be read or written: see the kernel log (dmesg) and btrfs-lab doctor for the device's errors; replace or remove the failing device, or copy out what is readable (btrfs-lab rescue)",
        ))
    } else if message.contains("Read-only file system") || message.contains("EROFS") {
        Some((
            "EROFS (read-only file system)",
            "the kernel aborted a transaction (see dmesg: 'Transaction aborted', error -28 is ENOSPC) and forced the filesystem read-only; what was committed is intact: unmount and mount it again, add a device or free space, then run it again",
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod kernel_failure_tests {
    use super::kernel_failure;

    #[test]
    fn errnos_are_named_and_a_cancel_is_not_a_failure() {
        let enospc = kernel_failure(
            "ERROR: ioctl(DEV_REPLACE_START) failed on \"/mnt\": No space left on device",
        );
        assert!(enospc.is_some_and(|(e, _)| e.starts_with("ENOSPC")));
        assert!(
            kernel_failure("ERROR: error removing devid 2: Read-only file system")
                .is_some_and(|(e, _)| e.starts_with("EROFS"))
        );
        assert!(
            kernel_failure("... failed: Input/output error")
                .is_some_and(|(e, _)| e.starts_with("EIO"))
        );
        assert_eq!(kernel_failure("... failed: Operation canceled"), None);
    }
}
