//! `device replace MOUNT OLD NEW`: the plan (pure, from the filesystem's
//! state, OLD's chunks and NEW's facts, in plan.rs), carrying it out
//! through `btrfs replace start -B` in a session of its own (under
//! systemd-inhibit where logind runs), following the kernel's progress as a
//! share of the data to copy, and afterwards: NEW grown to its size, every
//! chunk checked for the redundancy its type has (btrfs-progs #1077)
//! (exec.rs); its documents (report.rs); a scrub of NEW when asked
//! (operation.rs).

mod exec;
pub mod operation;
mod plan;
mod report;

use std::path::Path;

use crate::error::Result;
use crate::operation::state::FsState;
use crate::sys::kernel::btrfs::FsHandle;

pub use exec::execute_replace;
pub use plan::*;
pub use report::*;

/// Opens the filesystem for `--status` / `--cancel`.
pub fn open(root: &crate::sys::fs::root::SysRoot, path: &Path) -> Result<(FsHandle, FsState)> {
    crate::operation::state::open_state(root, path)
}

/// `--cancel`, confirmed: stops the running replace; OLD stays a member.
pub fn cancel(fs: &FsHandle, path: &Path) -> Result<bool> {
    fs.check_path_still_here(path)?;
    fs.replace_cancel()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::started::{DeviceAt, StartedReplace};
    use crate::model::kernel::KernelVersion;
    use crate::model::profile::Profile;
    use crate::operation::state::DeviceErrors;
    use crate::operation::state::MemberDevice;
    use crate::sys::block::blockdev::BlockDeviceFacts;
    use crate::sys::kernel::btrfs::{ChunkRecord, DevExtent};
    use btrfs_uapi::space::BlockGroupFlags as F;

    const GIB: u64 = 1 << 30;

    fn fs() -> FsState {
        FsState {
            path: "/mnt".into(),
            mount_point: "/mnt".into(),
            fsid: "x".into(),
            devices: (1..=3)
                .map(|i| MemberDevice {
                    devid: i,
                    path: format!("/dev/test-none-{i}"),
                    size: 4 * GIB,
                    allocated: GIB,
                })
                .collect(),
            spaces: Vec::new(),
            exclusive_operation: Some("none".into()),
            balance: None,
            kernel: KernelVersion::new(6, 18),
            features: Vec::new(),
            device_errors: Vec::new(),
        }
    }

    fn chunk(flags: F, logical: u64, devids: &[u64]) -> ChunkRecord {
        ChunkRecord {
            flags,
            logical,
            length: GIB,
            stripe_len: 64 << 10,
            num_stripes: devids.len() as u16,
            sub_stripes: 1,
            devids: devids.to_vec(),
        }
    }

    fn facts() -> ReplaceFacts {
        ReplaceFacts {
            chunks: vec![
                chunk(F::DATA | F::RAID0, GIB, &[1, 2, 3]),
                chunk(F::METADATA | F::RAID1, 2 * GIB, &[2, 3]),
            ],
            dev_extents: vec![
                DevExtent {
                    devid: 2,
                    offset: GIB,
                    length: GIB / 3,
                    chunk_logical: GIB,
                },
                DevExtent {
                    devid: 2,
                    offset: 2 * GIB,
                    length: GIB / 4,
                    chunk_logical: 2 * GIB,
                },
            ],
            read_only: false,
            replace_running: false,
            running_target: None,
            last_finished: false,
            started: None,
            systemd_inhibit: None,
            is_root: true,
        }
    }

    fn new(size: u64) -> BlockDeviceFacts {
        BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(size),
            ..BlockDeviceFacts::unknown(Path::new("/dev/nvme9n1"), Path::new("/dev/nvme9n1"))
        }
    }

    #[test]
    fn plans_the_replace_with_what_only_old_holds() {
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &new(8 * GIB),
            ReplaceOptions::default(),
            &facts(),
        );
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(
            p.commands,
            vec![
                vec![
                    "btrfs",
                    "replace",
                    "start",
                    "-B",
                    "2",
                    "/dev/nvme9n1",
                    "/mnt"
                ],
                vec!["btrfs", "filesystem", "resize", "2:max", "/mnt"],
            ]
        );
        assert_eq!(p.on_old.len(), 2);
        let raid0 = p
            .on_old
            .iter()
            .find(|o| o.profile == Profile::Raid0)
            .unwrap();
        assert!(!raid0.other_copy);
        assert!(
            p.notes.iter().any(|n| n.contains("only on device 2")),
            "{:?}",
            p.notes
        );
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("nothing holds off suspend"))
        );
    }

    #[test]
    fn read_errors_with_copies_read_from_the_others_and_inhibit_wraps() {
        let mut f = fs();
        f.device_errors.push(DeviceErrors {
            devid: 2,
            path: "/dev/test-none-2".into(),
            dev_uuid: String::new(),
            read: 5,
            write: 0,
            flush: 0,
            corruption: 0,
            generation: 0,
        });
        let mut x = facts();
        x.chunks[0] = chunk(F::DATA | F::RAID1, GIB, &[1, 2]);
        x.systemd_inhibit = Some("/usr/bin/systemd-inhibit".into());
        let p = plan_replace(
            &f,
            &OldSpec::Devid(2),
            &new(4 * GIB),
            ReplaceOptions::default(),
            &x,
        );
        assert!(p.read_from_others);
        assert_eq!(p.commands.len(), 1, "same size: no resize");
        assert_eq!(p.commands[0][0], "systemd-inhibit");
        assert!(p.commands[0].contains(&"-r".to_owned()));
    }

    #[test]
    fn refusals() {
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(7),
            &new(GIB),
            ReplaceOptions::default(),
            &facts(),
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["old-not-member"]);
        assert!(p.refusals[0].message.contains("2 /dev/test-none-2"));
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &new(GIB),
            ReplaceOptions::default(),
            &facts(),
        );
        assert_eq!(p.refusals[0].code, "new-too-small");
        let mut x = facts();
        x.read_only = true;
        x.is_root = false;
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &new(8 * GIB),
            ReplaceOptions::default(),
            &x,
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["not-root", "read-only"]);
        // NEW already a member.
        let member = BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(8 * GIB),
            ..BlockDeviceFacts::unknown(
                Path::new("/dev/test-none-1"),
                Path::new("/dev/test-none-1"),
            )
        };
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &member,
            ReplaceOptions::default(),
            &facts(),
        );
        assert_eq!(p.refusals[0].code, "member");
    }

    #[test]
    fn new_already_that_device_is_done_only_with_the_record_of_our_replace() {
        // NEW (/dev/test-none-2) already is device 2; the kernel says the
        // last replace finished: without a record that ties it, refused.
        let member = BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(4 * GIB),
            devt: Some((7, 2)),
            ..BlockDeviceFacts::unknown(
                Path::new("/dev/test-none-2"),
                Path::new("/dev/test-none-2"),
            )
        };
        let mut x = facts();
        x.last_finished = true;
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &member,
            ReplaceOptions::default(),
            &x,
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["already-that-device"]);
        assert!(
            p.refusals[0]
                .message
                .starts_with("/dev/test-none-2 already is device 2 of /mnt: nothing to replace"),
            "{}",
            p.refusals[0].message
        );
        assert!(!p.following);
        // The record of the replace this tool started onto it: followed.
        let record = StartedReplace {
            fsid: "x".into(),
            devid: 2,
            old_path: "/dev/test-none-old".into(),
            new: DeviceAt {
                path: "/dev/test-none-2".into(),
                devt: Some((7, 2)),
            },
            started_unix: 1,
        };
        x.started = Some(record.clone());
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &member,
            ReplaceOptions::default(),
            &x,
        );
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert!(p.following);
        assert!(p.notes.iter().any(|n| n.contains("has finished")));
        // A record of another filesystem, devid or device number ties nothing.
        for bad in [
            StartedReplace {
                fsid: "y".into(),
                ..record.clone()
            },
            StartedReplace {
                devid: 3,
                ..record.clone()
            },
            StartedReplace {
                new: DeviceAt {
                    path: "/dev/test-none-2".into(),
                    devt: Some((7, 99)),
                },
                ..record.clone()
            },
        ] {
            x.started = Some(bad);
            let p = plan_replace(
                &fs(),
                &OldSpec::Devid(2),
                &member,
                ReplaceOptions::default(),
                &x,
            );
            assert_eq!(p.refusals[0].code, "already-that-device");
        }
    }

    #[test]
    fn progress_is_a_share_of_the_data_not_of_the_device() {
        let e = facts().dev_extents;
        let on2: Vec<DevExtent> = e.into_iter().filter(|e| e.devid == 2).collect();
        assert_eq!(copied_below(&on2, 0), 0);
        // Halfway through the device's size, all of the first extent and
        // half... of nothing of the second (it starts at 2 GiB).
        assert_eq!(copied_below(&on2, 2 * GIB), GIB / 3);
        assert_eq!(copied_below(&on2, 4 * GIB), GIB / 3 + GIB / 4);
    }
}
