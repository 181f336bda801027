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

/// One filesystem of the matrix: device sizes in MiB (256 MiB at least:
/// mkfs.btrfs makes mixed block groups only on far smaller devices), data
/// and metadata profile.
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
    // devid 1 the smallest.
    Case {
        sizes: &[300, 600, 900],
        data: "raid5",
        metadata: "raid1",
    },
    // DUP metadata and system on the small device, data single on devid 1.
    Case {
        sizes: &[1500, 300],
        data: "single",
        metadata: "dup",
    },
    Case {
        sizes: &[1500, 1500, 900, 700, 333],
        data: "raid10",
        metadata: "raid1c3",
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

/// The first option of `capacity --json ARGS`.
fn first_option(env: &TestEnv, args: &[&str]) -> Value {
    let (code, stdout, stderr) = common::run(env.cmd().arg("--json").arg("capacity").args(args));
    assert_eq!(code, 0, "{args:?}: {stderr}");
    let v = common::json(&stdout);
    assert_eq!(common::validate(&v, &stdout), "capacity");
    v["options"][0].clone()
}

fn bytes(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key}: {v}"))
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn from_a_mounted_filesystem_the_plans_and_the_kernel_agree() {
    if !common::require_root("from_a_mounted_filesystem_the_plans_and_the_kernel_agree") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(btrfs_lab::sandbox::SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(btrfs_lab::model::profile::Profile::Raid1),
        metadata: Some(btrfs_lab::model::profile::Profile::Raid1),
        ..Default::default()
    });
    let m = sbx.mount_point().display().to_string();
    let p = ["--data", "raid1", "--metadata", "raid1"];
    let with = |extra: &[&str]| {
        let mut a = vec!["--from", m.as_str()];
        a.extend_from_slice(extra);
        a.extend_from_slice(&p);
        first_option(&env, &a)
    };
    // Its chunks as they are; a filesystem made anew on the same sizes
    // gives the same within a data chunk (mkfs made both).
    let now = with(&[]);
    assert_eq!(now["basis"], "filesystem", "{now}");
    let mut fresh_args = vec!["1G", "1G"];
    fresh_args.extend_from_slice(&p);
    let fresh = first_option(&env, &fresh_args);
    assert_eq!(fresh["basis"], "new");
    assert!(
        bytes(&now, "usable_data_bytes").abs_diff(bytes(&fresh, "usable_data_bytes"))
            <= bytes(&fresh, "data_chunk_bytes"),
        "{now}\n{fresh}"
    );
    let added = with(&["--add", "512M"]);
    assert!(bytes(&added, "usable_data_bytes") > bytes(&now, "usable_data_bytes"));
    // RAID1: one bigger device alone gives nothing, both do.
    let one_bigger = with(&["--replace", "2=2G"]);
    assert_eq!(one_bigger["usable_data_bytes"], now["usable_data_bytes"]);
    assert!(
        one_bigger["unusable_reason"]
            .as_str()
            .unwrap()
            .contains("larger than the others"),
        "{one_bigger}"
    );
    let bigger = with(&["--replace", "1=2G", "--replace", "2=2G"]);
    assert!(bytes(&bigger, "usable_data_bytes") > bytes(&now, "usable_data_bytes") + (800 << 20));
    // Another profile than the filesystem's: as if made anew.
    let raid0 = first_option(
        &env,
        &["--from", &m, "--data", "raid0", "--metadata", "raid1"],
    );
    assert_eq!(raid0["basis"], "new");
    // One device left: raid1 cannot be made, said in the option.
    let one = with(&["--remove", "1"]);
    assert!(
        one["impossible"]
            .as_str()
            .unwrap()
            .contains("needs 2 devices"),
        "{one}"
    );
    // A devid it does not have: one line, exit 2.
    let (code, stdout, stderr) =
        common::run(env.cmd().args(["capacity", "--from", &m, "--remove", "9"]));
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(stderr.contains("has no device 9"), "{stderr}");

    // device add's plan: usable before and after from the same model.
    let spare = env.spare_device("spare", 512 << 20);
    let (code, stdout, stderr) = common::run(
        env.cmd()
            .args(["--json", "device", "add", "--dry-run", &m])
            .arg(&spare),
    );
    assert_eq!(code, 0, "{stderr}");
    let plan = common::json(&stdout);
    assert_eq!(
        plan["plan"]["before"]["usable_bytes"], now["usable_data_bytes"],
        "{stdout}"
    );
    assert_eq!(
        plan["plan"]["after"]["usable_bytes"], added["usable_data_bytes"],
        "{stdout}"
    );
    let (_, text, _) = common::run(
        env.cmd()
            .args(["device", "add", "--dry-run", &m])
            .arg(&spare),
    );
    eprintln!("{text}");
    assert!(text.contains("usable"), "{text}");

    // The kernel: the device added, the filesystem filled.
    common::must(
        std::process::Command::new("btrfs")
            .args(["device", "add", "-f"])
            .arg(&spare)
            .arg(&m),
    );
    let stored = fill(Path::new(&m));
    let predicted = bytes(&added, "usable_data_bytes");
    let chunk = bytes(&added, "data_chunk_bytes").max(bytes(&fresh, "data_chunk_bytes"));
    eprintln!(
        "--from --add 512M: predicted {} MiB, stored {} MiB (chunk {} MiB)",
        predicted / MIB,
        stored / MIB,
        chunk / MIB
    );
    assert!(
        stored.abs_diff(predicted) <= chunk,
        "predicted {predicted}, stored {stored}"
    );
}
