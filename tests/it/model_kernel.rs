//! The btrfs model (`model::profile`, `model::alloc`) against the real
//! thing: for every profile × device count 1..=5, mkfs.btrfs on loop
//! devices this test makes accepts exactly when the model says the count is
//! enough (and names the model's minimum when it refuses); each accepted
//! filesystem is mounted (when the model says the running kernel knows the
//! profile; refused when it says not), written to, balanced so that the
//! kernel (not mkfs) allocated every chunk, and its chunk tree, read
//! through the library, holds the stripes per chunk and the chunk lengths
//! the model's allocator predicts.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btrfs_lab::model::alloc::{ChunkKind, next_chunk};
use btrfs_lab::model::kernel::KernelVersion;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sys::kernel::btrfs::{self, ChunkRecord, profile_of};
use btrfs_uapi::space::BlockGroupFlags;

use crate::common::{TestEnv, require_root, run};

const MIB: u64 = 1 << 20;
/// Each device: sparse, so only what btrfs writes takes space; large
/// enough that no chunk the kernel allocates here is cut short by free
/// space (the model then predicts it from the limits alone), small enough
/// that the 10% cap shapes every chunk size.
const DEVICE_BYTES: u64 = 4096 * MIB;
const MAX_DEVICES: usize = 5;

fn tool(name: &str) -> PathBuf {
    btrfs_lab::sys::tools::find(name, "")
        .unwrap_or_else(|e| panic!("{name}: {}", e.message()))
        .path
}

/// btrfs-progs' version (`mkfs.btrfs, part of btrfs-progs v6.2`).
fn progs_version() -> KernelVersion {
    let out = Command::new(tool("mkfs.btrfs"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('v').and_then(KernelVersion::parse))
        .unwrap_or_else(|| panic!("no version in {text:?}"))
}

/// Unmounts on every path out of one case (the environment's drop is the
/// net behind it).
struct Mounted(PathBuf);

impl Drop for Mounted {
    /// Unmounts, waiting while the mount is busy: other tests running in
    /// parallel list every btrfs of the machine (`show`, `doctor`) and may
    /// hold the mount point open for a moment; an unmount that failed then
    /// left the filesystem mounted and every later case's mkfs refused with
    /// "Device or resource busy". A mount still busy after 10 s is detached
    /// (it goes when its last user closes it).
    fn drop(&mut self) {
        use nix::mount::{MntFlags, umount2};
        for _ in 0..40 {
            match umount2(&self.0, MntFlags::empty()) {
                Err(nix::errno::Errno::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(250))
                }
                _ => return,
            }
        }
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

fn kind_of(flags: BlockGroupFlags) -> ChunkKind {
    if flags.contains(BlockGroupFlags::DATA) {
        ChunkKind::Data
    } else if flags.contains(BlockGroupFlags::SYSTEM) {
        ChunkKind::System
    } else {
        ChunkKind::Metadata
    }
}

/// What one accepted filesystem's chunk tree must look like.
fn check_chunks(p: Profile, n: usize, kernel: KernelVersion, chunks: &[ChunkRecord]) {
    let total = DEVICE_BYTES * n as u64;
    let free = vec![DEVICE_BYTES; n];
    let g = p.geometry();
    let mut kinds = Vec::new();
    for c in chunks {
        assert!(
            !c.flags
                .contains(BlockGroupFlags::DATA | BlockGroupFlags::METADATA),
            "{p} on {n}: a mixed block group ({c:?}): the devices are too small"
        );
        assert_eq!(profile_of(c.flags), p, "{p} on {n}: chunk {c:?}");
        let kind = kind_of(c.flags);
        kinds.push(kind);
        let want = next_chunk(&free, p, kind, total, kernel)
            .unwrap_or_else(|| panic!("{p} on {n}: the model allocates no {kind:?} chunk"));
        assert_eq!(
            u32::from(c.num_stripes),
            want.num_stripes,
            "{p} on {n}: stripes of {kind:?} chunk {c:?}"
        );
        assert_eq!(
            Some(want.num_stripes),
            p.stripes_on(n as u32, kernel),
            "{p} on {n}"
        );
        assert_eq!(
            c.length,
            want.length,
            "{p} on {n}: length of {kind:?} chunk {c:?} (model: stripe {} × {} data stripes)",
            want.stripe,
            p.data_stripes(want.num_stripes)
        );
        assert_eq!(u32::from(c.sub_stripes), g.sub_stripes, "{p} on {n}: {c:?}");
        let mut devs = c.devids.clone();
        devs.sort_unstable();
        devs.dedup();
        assert_eq!(
            devs.len() as u32,
            want.num_stripes / g.dev_stripes,
            "{p} on {n}: devices of {c:?}"
        );
    }
    for kind in [ChunkKind::Data, ChunkKind::Metadata, ChunkKind::System] {
        assert!(
            kinds.contains(&kind),
            "{p} on {n}: no {kind:?} chunk in {chunks:?}"
        );
    }
}

/// One profile on `devices`: mkfs's verdict against the model, and for an
/// accepted one the kernel's chunks. Returns whether mkfs accepted.
fn one_case(env: &TestEnv, p: Profile, devices: &[PathBuf], kernel: KernelVersion) -> bool {
    let n = devices.len();
    // The same loop devices are made anew for every case, right after the
    // previous case's unmount: a filesystem another test held open a moment
    // longer (see `Mounted`) may still claim them, and mkfs's exclusive open
    // says "Device or resource busy" (seen under load). That is not the
    // model's business: wait for the devices, at most 10 s.
    let mut attempt = 0;
    let (code, stderr) = loop {
        attempt += 1;
        let (code, _, stderr) = run(Command::new(tool("mkfs.btrfs"))
            .args(["-f", "-q", "-d", p.name(), "-m", p.name()])
            .args(devices)
            .stdin(Stdio::null()));
        if code != 0 && stderr.contains("Device or resource busy") && attempt < 40 {
            std::thread::sleep(std::time::Duration::from_millis(250));
            continue;
        }
        break (code, stderr);
    };
    let enough = n as u32 >= p.min_devices();
    if !enough {
        assert!(
            code != 0,
            "mkfs.btrfs accepted {p} on {n} devices, the model says {} are needed",
            p.min_devices()
        );
        assert!(
            stderr.contains(&format!("but {} devices are required", p.min_devices())),
            "mkfs.btrfs refused {p} on {n} devices for another reason, or names another minimum than the model's {}: {stderr}",
            p.min_devices()
        );
        return false;
    }
    assert_eq!(
        code,
        0,
        "mkfs.btrfs refused {p} on {n} devices, the model says {} are enough: {stderr}",
        p.min_devices()
    );

    let mnt = env.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let opts = devices
        .iter()
        .map(|d| format!("device={}", d.display()))
        .collect::<Vec<_>>()
        .join(",");
    let mounted = nix::mount::mount(
        Some(devices[0].as_path()),
        &mnt,
        Some("btrfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(opts.as_str()),
    );
    if !p.supported_on(kernel) {
        assert!(
            mounted.is_err(),
            "Linux {kernel} mounted {p}, the model says it needs {:?}",
            p.min_kernel()
        );
        if mounted.is_ok() {
            let _ = nix::mount::umount2(&mnt, nix::mount::MntFlags::empty());
        }
        return true;
    }
    mounted.unwrap_or_else(|e| panic!("mount {p} on {n} devices (Linux {kernel}): {e}"));
    let guard = Mounted(mnt.clone());

    // A little data, so the balance has extents to move.
    let mut f = fs::File::create_new(mnt.join("data")).unwrap();
    f.write_all(&vec![0x5a; 4 << 20]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // Relocate every chunk mkfs made: afterwards the kernel allocated all.
    let (code, _, stderr) = run(Command::new(tool("btrfs"))
        .args(["balance", "start", "--full-balance"])
        .arg(&mnt)
        .stdin(Stdio::null()));
    assert_eq!(code, 0, "balance of {p} on {n}: {stderr}");
    let members = btrfs::devices(&mnt).unwrap();
    assert_eq!(members.len(), n, "{p}: members");
    for m in &members {
        assert_eq!(m.total_bytes, DEVICE_BYTES, "{p} on {n}: size of {m:?}");
    }
    let chunks = btrfs::chunk_records(&mnt)
        .unwrap()
        .expect("root reads the chunk tree");
    check_chunks(p, n, kernel, &chunks);
    assert_eq!(
        fs::read(mnt.join("data")).unwrap(),
        vec![0x5a; 4 << 20],
        "{p} on {n}: data after the balance"
    );
    drop(guard);
    true
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn every_profile_and_device_count_against_mkfs_and_the_kernel() {
    if !require_root("model_kernel") {
        return;
    }
    let progs = progs_version();
    assert!(
        progs >= KernelVersion::new(5, 14),
        "btrfs-progs {progs}: the model's device minimums are those of btrfs-progs 5.14 and later"
    );
    let kernel = KernelVersion::parse(&btrfs_lab::sys::kernel_release()).unwrap();
    let env = TestEnv::new();
    let devices: Vec<PathBuf> = (0..MAX_DEVICES)
        .map(|i| env.spare_device(&format!("m{i}"), DEVICE_BYTES))
        .collect();
    let mut accepted = 0;
    let mut refused = 0;
    for p in Profile::ALL {
        for n in 1..=MAX_DEVICES {
            if one_case(&env, p, &devices[..n], kernel) {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
    }
    // single/dup/raid0 5, raid1 4, raid1c3 3, raid1c4 2, raid10 4, raid5 4,
    // raid6 3: what the model's minimums give for 1..=5 devices.
    let expected: usize = Profile::ALL
        .iter()
        .map(|p| {
            (1..=MAX_DEVICES)
                .filter(|&n| n as u32 >= p.min_devices())
                .count()
        })
        .sum();
    assert_eq!(accepted, expected);
    assert_eq!(accepted + refused, Profile::ALL.len() * MAX_DEVICES);
    for d in &devices {
        btrfs::forget_device(d);
    }
    assert!(mnt_free(env.path()), "{:?}", env.leftovers());
}

/// Nothing of the cases is still mounted (the loop devices stay until the
/// environment drops).
fn mnt_free(dir: &Path) -> bool {
    !crate::common::leftovers_now(dir)
        .iter()
        .any(|l| l.starts_with("mount "))
}
