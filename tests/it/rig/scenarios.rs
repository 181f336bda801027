//! Scenarios on the rig (docs/rig.md): each boots a Debian kernel with
//! emulated NVMe drives and runs btrfs-lab inside the guest.

use super::{Drive, Guest, Kernel, Outcome, kernels, require_rig, workdir};

const GIB: u64 = 1 << 30;

fn boot_each(test: &str, guest: &Guest) -> Vec<Outcome> {
    let mut out = Vec::new();
    for suite in kernels() {
        let k = Kernel::fetch(&suite).unwrap_or_else(|e| panic!("{test}: {e}"));
        let work = workdir();
        let o = guest
            .boot(&k, work.path())
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        out.push(o);
    }
    out
}

const SPACE_AND_PROBE: &str = r#"
rig_run mkfs mkfs.btrfs -f -d raid0 -m raid1 /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1
rig_run mount mount -t btrfs /dev/nvme0n1 /mnt
mkdir -p /mnt/csum /mnt/nocow
rig_run chattr chattr +C /mnt/nocow
rig_run lsattr-nocow lsattr -d /mnt/nocow
rig_run df btrfs-lab df --json /mnt
rig_run progs-df btrfs filesystem df -b /mnt
rig_run usage btrfs-lab usage --json /mnt
rig_run show btrfs-lab show --json /mnt
rig_run df-text btrfs-lab df /mnt
rig_run probe-csum btrfs-lab probe-dio --json --file-size 64M /mnt/csum
rig_run probe-nocow btrfs-lab probe-dio --json --file-size 64M /mnt/nocow
rig_run left ls -A /mnt/csum /mnt/nocow
"#;

/// What probe-dio measured on the checksummed directory of each kernel of
/// the matrix (RAID0 data over three emulated NVMe drives, 64 MiB files).
/// Measured on the rig, not derived from the version. The source check
/// against each kernel's fs/btrfs (issue 28) is not done yet: when a
/// measurement changes, the test says which kernel and what it saw.
///   bookworm 6.1.176-1 : direct            (6.1.y has no 968f19c5b1b7)
///   trixie 6.12.117-1  : buffered-fallback (the 6.12.y stable backport)
///   sid, trixie-backports: recorded, not asserted (see docs/rig.md)
fn expected_checksummed_verdict(k: &Kernel) -> Option<&'static str> {
    match k.suite.as_str() {
        "bookworm" => Some("direct"),
        "trixie" => Some("buffered-fallback"),
        _ => None,
    }
}

/// `btrfs filesystem df -b` lines: (type, profile) -> (total, used).
fn progs_df(text: &str) -> Vec<(String, String, u64, u64)> {
    let mut out = Vec::new();
    for l in text.lines() {
        let Some((head, rest)) = l.split_once(':') else {
            continue;
        };
        let Some((ty, profile)) = head.split_once(", ") else {
            continue;
        };
        let num = |k: &str| {
            rest.split(&format!("{k}="))
                .nth(1)
                .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let ty = match ty.trim() {
            "GlobalReserve" => "global_reserve".to_owned(),
            t => t.to_ascii_lowercase(),
        };
        if let (Some(t), Some(u)) = (num("total"), num("used")) {
            out.push((ty, profile.trim().to_ascii_lowercase(), t, u));
        }
    }
    out
}

#[test]
#[cfg_attr(
    root_tests_ignored,
    ignore = "needs root and qemu (scripts/install-rig-deps.sh)"
)]
fn rig_space_and_probe_dio_on_each_kernel() {
    if !require_rig("rig_space_and_probe_dio_on_each_kernel") {
        return;
    }
    let guest = Guest::new(vec![Drive::new(2 * GIB); 3], SPACE_AND_PROBE);
    for o in boot_each("rig_space_and_probe_dio_on_each_kernel", &guest) {
        let k = o.kernel.describe();
        for step in ["mkfs", "mount", "chattr"] {
            let r = o.run(step);
            assert_eq!(r.rc, 0, "[{k}] {step}: {}", r.stderr);
        }
        let devs = ["/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1"];

        // df: the kernel's numbers, equal to btrfs-progs' on the same mount.
        let df = o.json("df");
        assert_eq!(df["source"]["kind"], "kernel", "[{k}] {df:#}");
        let recs: Vec<(String, String, u64, u64)> = df["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["type"].as_str().unwrap().to_owned(),
                    r["profile"].as_str().unwrap().to_owned(),
                    r["total_bytes"].as_u64().unwrap(),
                    r["used_bytes"].as_u64().unwrap(),
                )
            })
            .collect();
        let progs = progs_df(&o.run("progs-df").stdout);
        assert!(
            !progs.is_empty(),
            "[{k}] btrfs fi df -b: {:?}",
            o.run("progs-df")
        );
        for (ty, profile, total, _) in &progs {
            let ours = recs
                .iter()
                .find(|r| &r.0 == ty && &r.1 == profile)
                .unwrap_or_else(|| panic!("[{k}] df has no {ty} {profile}: {recs:?}"));
            assert_eq!(
                ours.2, *total,
                "[{k}] {ty} {profile} total: ours {recs:?}, progs {progs:?}"
            );
        }
        for want in [
            ("data", "raid0"),
            ("metadata", "raid1"),
            ("system", "raid1"),
        ] {
            assert!(
                recs.iter().any(|r| (r.0.as_str(), r.1.as_str()) == want),
                "[{k}] no {want:?} in {recs:?}"
            );
        }
        let text = &o.run("df-text");
        assert_eq!(text.rc, 0, "[{k}] df text: {}", text.stderr);
        assert!(
            text.stdout.contains("RAID0") || text.stdout.contains("raid0"),
            "[{k}] {}",
            text.stdout
        );

        // usage: three 2 GiB members, data on all three, metadata mirrored.
        let usage = o.json("usage");
        assert_eq!(
            usage["overall"]["device_size"],
            3 * 2 * GIB,
            "[{k}] {usage:#}"
        );
        assert_eq!(usage["overall"]["device_missing"], 0, "[{k}] {usage:#}");
        assert_eq!(usage["overall"]["metadata_ratio"], 2.0, "[{k}] {usage:#}");
        let paths: Vec<&str> = usage["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, devs, "[{k}] {usage:#}");
        let data = usage["block_groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "data")
            .unwrap();
        assert_eq!(data["profile"], "raid0", "[{k}] {usage:#}");
        assert_eq!(
            data["devices"].as_array().unwrap().len(),
            3,
            "[{k}] {usage:#}"
        );

        // show: one filesystem, three present members, no errors.
        let show = o.json("show");
        let fss = show["filesystems"].as_array().unwrap();
        assert_eq!(fss.len(), 1, "[{k}] {show:#}");
        assert_eq!(fss[0]["total_devices"], 3, "[{k}] {show:#}");
        assert_eq!(fss[0]["checksum"], "crc32c", "[{k}] {show:#}");
        for (d, want) in fss[0]["devices"].as_array().unwrap().iter().zip(devs) {
            assert_eq!(d["path"], want, "[{k}] {show:#}");
            assert_eq!(d["missing"], false, "[{k}] {show:#}");
            assert_eq!(d["has_errors"], false, "[{k}] {show:#}");
        }

        // probe-dio: NOCOW is direct on every kernel; the checksummed
        // directory gives this kernel's verdict.
        let nocow = o.json("probe-nocow");
        assert_eq!(nocow["verdict"], "direct", "[{k}] {nocow:#}");
        assert_eq!(o.run("probe-nocow").rc, 0, "[{k}]");
        assert_eq!(nocow["filesystem"]["target_nocow"], true, "[{k}] {nocow:#}");
        assert_eq!(
            nocow["kernel"],
            o.kernel.release.as_str(),
            "[{k}] {nocow:#}"
        );
        let csum = o.json("probe-csum");
        assert_eq!(csum["filesystem"]["target_nocow"], false, "[{k}] {csum:#}");
        assert_eq!(
            csum["filesystem"]["data_profiles"],
            serde_json::json!(["raid0"]),
            "[{k}]"
        );
        assert_eq!(csum["control"]["behaviour"], "direct", "[{k}] {csum:#}");
        let verdict = csum["verdict"].as_str().unwrap();
        assert_eq!(
            i64::from(o.run("probe-csum").rc),
            csum["exit_code"].as_i64().unwrap(),
            "[{k}]"
        );
        eprintln!(
            "rig: [{k}] probe-dio checksummed: {verdict} (evidence {}, dirtied median {} of {} bytes, {:.0} vs NOCOW control {:.0} B/s)",
            csum["evidence"]["source"],
            csum["test"]["dirtied_bytes_median"],
            csum["test"]["bytes_written"],
            csum["test"]["throughput_bytes_per_sec"]
                .as_f64()
                .unwrap_or(f64::NAN),
            csum["control"]["throughput_bytes_per_sec"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
        match expected_checksummed_verdict(&o.kernel) {
            Some(want) => assert_eq!(
                verdict, want,
                "[{k}] probe-dio on a checksummed dir: {csum:#}"
            ),
            None => assert!(
                [
                    "direct",
                    "buffered-fallback",
                    "profile-forced",
                    "inconclusive",
                    "direct-bounced"
                ]
                .contains(&verdict),
                "[{k}] {csum:#}"
            ),
        }
        // Nothing left behind by either probe.
        let left = &o.run("left").stdout;
        assert!(
            !left.lines().any(|l| l.contains("btrfs-lab")),
            "[{k}] probe files left: {left}"
        );
    }
}

const MIB: u64 = 1 << 20;

const HARDWARE: &str = r#"
rig_run mkfs mkfs.btrfs -f -d raid0 -m raid1 /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1
rig_run mount mount -t btrfs /dev/nvme0n1 /mnt
rig_run links btrfs-lab links --json
rig_run links-thermal btrfs-lab links --thermal --json /mnt
rig_run sysfs-links sh -c 'for d in /sys/class/nvme/nvme*; do p=$(readlink -f $d/device); echo "$(basename $d) $(basename $p) $(cat $p/current_link_speed) x$(cat $p/current_link_width) max $(cat $p/max_link_speed) x$(cat $p/max_link_width)"; done'
mkdir -p /mnt/bench
rig_run members btrfs-lab bench --json --yes --members --tests SEQ1M-Q8T1 --file-size 96M --rounds 1 --duration 3 /mnt/bench
"#;

/// The slow member's read throttle (bytes/s): far below what TCG gives an
/// unthrottled emulated NVMe drive here (hundreds of MB/s).
const SLOW_READ: u64 = 24 * MIB;

#[test]
#[cfg_attr(
    root_tests_ignored,
    ignore = "needs root and qemu (scripts/install-rig-deps.sh)"
)]
fn rig_links_smart_and_members_on_emulated_nvme() {
    let test = "rig_links_smart_and_members_on_emulated_nvme";
    if !require_rig(test) {
        return;
    }
    let mut drives = vec![Drive::new(2 * GIB); 3];
    drives[0].port_speed = Some("16");
    drives[0].port_width = Some(4);
    drives[1].port_speed = Some("8");
    drives[1].port_width = Some(2);
    drives[2].bps_read = Some(SLOW_READ);
    let guest = Guest::new(drives, HARDWARE);
    let suite = kernels().remove(0);
    let k = Kernel::fetch(&suite).unwrap_or_else(|e| panic!("{test}: {e}"));
    let work = workdir();
    let o = guest
        .boot(&k, work.path())
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let k = o.kernel.describe();
    for step in ["mkfs", "mount"] {
        assert_eq!(o.run(step).rc, 0, "[{k}] {step}: {}", o.run(step).stderr);
    }
    eprintln!("[{k}] sysfs links:\n{}", o.run("sysfs-links").stdout);
    let links = o.json("links");
    eprintln!("[{k}] links: {links:#}");
    let thermal = o.json("links-thermal");
    eprintln!("[{k}] links --thermal: {thermal:#}");
    let members = o.json("members");
    eprintln!("[{k}] bench --members: {members:#}");
    eprintln!("[{k}] bench stderr: {}", o.run("members").stderr);
}

const SUSTAINED: &str = r#"
rig_run mkfs mkfs.btrfs -f /dev/nvme0n1
rig_run mount mount -t btrfs /dev/nvme0n1 /mnt
mkdir -p /mnt/sustained
rig_run sustained btrfs-lab bench --json --yes --sustained 384M --time 120 /mnt/sustained
"#;

/// The burst: `bps-write-max` for `bps-write-max-length` seconds, then
/// `bps-write` (QEMU's leaky bucket: about max × length bytes at the fast
/// rate, an SLC cache running out).
const BURST_RATE: u64 = 64 * MIB;
const BURST_SECS: u64 = 2;
const STEADY_RATE: u64 = 8 * MIB;

#[test]
#[cfg_attr(
    root_tests_ignored,
    ignore = "needs root and qemu (scripts/install-rig-deps.sh)"
)]
fn rig_bench_sustained_finds_a_write_burst_running_out() {
    let test = "rig_bench_sustained_finds_a_write_burst_running_out";
    if !require_rig(test) {
        return;
    }
    let mut d = Drive::new(2 * GIB);
    d.bps_write = Some(STEADY_RATE);
    d.bps_write_max = Some(BURST_RATE);
    d.bps_write_max_length = Some(BURST_SECS);
    let guest = Guest::new(vec![d], SUSTAINED);
    let suite = kernels().remove(0);
    let k = Kernel::fetch(&suite).unwrap_or_else(|e| panic!("{test}: {e}"));
    let work = workdir();
    let o = guest
        .boot(&k, work.path())
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let k = o.kernel.describe();
    for step in ["mkfs", "mount"] {
        assert_eq!(o.run(step).rc, 0, "[{k}] {step}: {}", o.run(step).stderr);
    }
    let r = o.json("sustained");
    eprintln!("[{k}] bench --sustained: {r:#}");
}

const PULL: &str = r#"
rig_run mkfs mkfs.btrfs -f -d raid1 -m raid1c3 /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1
rig_run mount mount -t btrfs /dev/nvme0n1 /mnt
rig_run write dd if=/dev/urandom of=/mnt/data bs=1M count=16 conv=fsync
rig_run show-before btrfs-lab show --json /mnt
rig_wait pull-nvme2
i=0
while [ -e /sys/block/nvme2n1 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
rig_note "nvme2n1 gone after $i polls: $([ -e /sys/block/nvme2n1 ] && echo no || echo yes)"
# Writes that reach the missing member make btrfs see it gone.
dd if=/dev/urandom of=/mnt/data2 bs=1M count=4 conv=fsync 2>/dev/null
sync
rig_run show-pulled btrfs-lab show --json /mnt
rig_run doctor-pulled btrfs-lab doctor --json /mnt
rig_run doctor-pulled-text btrfs-lab doctor /mnt
umount /mnt
"#;

const DEGRADED: &str = r#"
btrfs device scan >/dev/null 2>&1
rig_run mount-plain mount -t btrfs /dev/nvme0n1 /mnt
rig_run mount-degraded mount -t btrfs -o degraded /dev/nvme0n1 /mnt
rig_run show-degraded btrfs-lab show --json /mnt
rig_run doctor-degraded btrfs-lab doctor --json /mnt
rig_run doctor-degraded-text btrfs-lab doctor /mnt
rig_run read cat /mnt/data
"#;

#[test]
#[cfg_attr(
    root_tests_ignored,
    ignore = "needs root and qemu (scripts/install-rig-deps.sh)"
)]
fn rig_doctor_and_show_after_device_del_and_degraded_boot() {
    let test = "rig_doctor_and_show_after_device_del_and_degraded_boot";
    if !require_rig(test) {
        return;
    }
    let suite = kernels().remove(0);
    let kern = Kernel::fetch(&suite).unwrap_or_else(|e| panic!("{test}: {e}"));
    let work = workdir();
    let guest = Guest::new(vec![Drive::new(GIB); 3], PULL)
        .action("pull-nvme2", super::Action::DeviceDel(2));
    let o = guest
        .boot(&kern, work.path())
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let k = o.kernel.describe();
    for step in ["mkfs", "mount", "write"] {
        assert_eq!(o.run(step).rc, 0, "[{k}] {step}: {}", o.run(step).stderr);
    }
    eprintln!("[{k}] notes: {:?}", o.notes);
    let before = o.json("show-before");
    eprintln!("[{k}] show before: {before:#}");
    let after = &o.run("show-pulled");
    eprintln!(
        "[{k}] show pulled (exit {}): {}\n{}",
        after.rc, after.stdout, after.stderr
    );
    let doc = &o.run("doctor-pulled");
    eprintln!(
        "[{k}] doctor pulled (exit {}): {}\n{}",
        doc.rc, doc.stdout, doc.stderr
    );
    eprintln!("[{k}] doctor text: {}", o.run("doctor-pulled-text").stdout);

    // The next boot of the same machine without the third drive.
    let mut second = Guest::new(vec![Drive::new(GIB); 2], DEGRADED);
    second.images = Some(o.images[..2].iter().cloned().map(Some).collect());
    let o2 = second
        .boot(&kern, work.path())
        .unwrap_or_else(|e| panic!("{test}: second boot: {e}"));
    for n in [
        "mount-plain",
        "mount-degraded",
        "show-degraded",
        "doctor-degraded",
        "doctor-degraded-text",
        "read",
    ] {
        let r = o2.run(n);
        eprintln!(
            "[{k}] {n} (exit {}): {}\n{}",
            r.rc,
            &r.stdout[..r.stdout.len().min(3000)],
            r.stderr
        );
    }
}
