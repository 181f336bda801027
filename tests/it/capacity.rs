//! `capacity` against the kernel: filesystems of unequal loop devices,
//! every profile, filled with files until ENOSPC; the bytes stored must
//! match what `btrfs-lab capacity` predicts for the same sizes within one
//! data chunk (the prediction comes from the command's own output, nothing
//! here depends on the machine).

use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{self, TestEnv};

const MIB: u64 = 1 << 20;

/// One filesystem of the matrix: device sizes in MiB (the first one at
/// least 1 GiB: mkfs.btrfs makes mixed block groups when its first device
/// is smaller), data and metadata profile.
struct Case {
    sizes: &'static [u64],
    data: &'static str,
    metadata: &'static str,
}

const MATRIX: &[Case] = &[
    Case {
        sizes: &[1280, 512],
        data: "single",
        metadata: "raid1",
    },
    Case {
        sizes: &[1024, 768],
        data: "dup",
        metadata: "dup",
    },
    Case {
        sizes: &[1536, 512, 768],
        data: "raid0",
        metadata: "raid1",
    },
    Case {
        sizes: &[1024, 640],
        data: "raid1",
        metadata: "raid1",
    },
    // The largest device is larger than the others together.
    Case {
        sizes: &[1536, 256, 384],
        data: "raid1",
        metadata: "raid1",
    },
    Case {
        sizes: &[1024, 768, 512],
        data: "raid1c3",
        metadata: "raid1c3",
    },
    Case {
        sizes: &[1024, 768, 512, 640],
        data: "raid1c4",
        metadata: "raid1c4",
    },
    Case {
        sizes: &[1024, 768, 768, 512],
        data: "raid10",
        metadata: "raid1",
    },
    Case {
        sizes: &[1024, 512, 768],
        data: "raid5",
        metadata: "raid1",
    },
    Case {
        sizes: &[1024, 768, 512, 512],
        data: "raid6",
        metadata: "raid1c3",
    },
    Case {
        sizes: &[1024, 512, 512, 768, 256, 384],
        data: "raid10",
        metadata: "raid1",
    },
    Case {
        sizes: &[1024, 384, 512, 768, 640],
        data: "raid5",
        metadata: "raid1",
    },
    Case {
        sizes: &[1280, 256, 512, 768, 640, 384],
        data: "raid6",
        metadata: "raid1c4",
    },
];

/// What `btrfs-lab capacity --json` predicts: (usable data, one data chunk).
fn predict(env: &TestEnv, c: &Case) -> (u64, u64) {
    let mut cmd = env.cmd();
    cmd.arg("--json").arg("capacity");
    for s in c.sizes {
        cmd.arg(format!("{s}M"));
    }
    cmd.args(["--data", c.data, "--metadata", c.metadata]);
    let (code, stdout, stderr) = common::run(&mut cmd);
    assert_eq!(code, 0, "{stderr}");
    let v = common::json(&stdout);
    assert_eq!(common::validate(&v, &stdout), "capacity");
    let o = &v["options"][0];
    assert_eq!(o["impossible"], Value::Null, "{o}");
    (
        o["usable_data_bytes"].as_u64().unwrap(),
        o["data_chunk_bytes"].as_u64().unwrap(),
    )
}

/// Makes the filesystem, mounts it (unmounted when `env` drops).
fn make(env: &mut TestEnv, n: usize, c: &Case) -> PathBuf {
    let devs: Vec<PathBuf> = c
        .sizes
        .iter()
        .enumerate()
        .map(|(i, s)| env.spare_device(&format!("c{n}d{i}"), s * MIB))
        .collect();
    common::must(
        std::process::Command::new("mkfs.btrfs")
            .args(["-f", "-q", "-d", c.data, "-m", c.metadata])
            .args(&devs),
    );
    let mnt = env.path().join(format!("mnt{n}"));
    std::fs::create_dir(&mnt).unwrap();
    let opts: Vec<String> = devs
        .iter()
        .map(|d| format!("device={}", d.display()))
        .collect();
    nix::mount::mount(
        Some(devs[0].as_path()),
        &mnt,
        Some("btrfs"),
        nix::mount::MsFlags::empty(),
        Some(opts.join(",").as_str()),
    )
    .unwrap();
    env.track_mount(mnt.clone());
    mnt
}

/// Fills `dir` with preallocated files until ENOSPC, in ever smaller
/// pieces; returns the bytes stored.
fn fill(dir: &Path) -> u64 {
    let mut stored = 0u64;
    let mut n = 0;
    for piece in [64 * MIB, 8 * MIB, MIB, 128 << 10] {
        loop {
            let path = dir.join(format!("f{n}"));
            n += 1;
            let f = File::create(&path).unwrap();
            match nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::empty(), 0, piece as i64) {
                Ok(()) => stored += piece,
                Err(nix::errno::Errno::ENOSPC) => {
                    drop(f);
                    // An empty file; its inode stays (metadata is not full).
                    let _ = std::fs::remove_file(&path);
                    break;
                }
                Err(e) => panic!("fallocate {}: {e}", path.display()),
            }
        }
    }
    common::must(std::process::Command::new("sync").arg("-f").arg(dir));
    stored
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn capacity_predicts_what_the_kernel_stores() {
    if !common::require_root("capacity_predicts_what_the_kernel_stores") {
        return;
    }
    let mut env = TestEnv::new();
    let mut rows = Vec::new();
    let mut worst = 0f64;
    for (n, c) in MATRIX.iter().enumerate() {
        let (predicted, chunk) = predict(&env, c);
        let mnt = make(&mut env, n, c);
        let stored = fill(&mnt);
        let off = stored as f64 - predicted as f64;
        worst = worst.max(off.abs() / chunk as f64);
        let row = format!(
            "{:?} MiB {}/{}: predicted {} MiB, stored {} MiB, off {:+.1} MiB (chunk {} MiB)",
            c.sizes,
            c.data,
            c.metadata,
            predicted / MIB,
            stored / MIB,
            off / MIB as f64,
            chunk / MIB
        );
        eprintln!("{row}");
        rows.push((row, stored.abs_diff(predicted) <= chunk));
        common::must(std::process::Command::new("umount").arg(&mnt));
    }
    eprintln!("worst error: {worst:.2} data chunks");
    let bad: Vec<&String> = rows.iter().filter(|r| !r.1).map(|r| &r.0).collect();
    assert!(bad.is_empty(), "off by more than one data chunk:\n{bad:#?}");
}
