//! `--members`: a read-only O_DIRECT sequential read of each member block
//! device alone, then of all at once, to show which drive holds the array
//! back ("slowest × N"). fio runs with `--readonly`, so it refuses to
//! write to them whatever the job says; only devices found as
//! members of the filesystem under DIR are ever named.

use std::fmt::Write as _;
use std::time::Duration;

use crate::sys::fs::beneath::TrustedDir;

use super::kit::{Progress, check_stop};
use super::report::{MemberDevice, MemberRate, MemberScaling};
use crate::error::{Error, ErrorKind, Result};
use crate::parse::fio::FioOutput;
use crate::report::rate::format_mb;
use crate::sys::fs::root::SysRoot;
use crate::sys::tools::fio::FioRunner;

fn section(i: usize, dev: &MemberDevice, duration: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "[member{i}-{}]", dev.name);
    let _ = writeln!(s, "filename={}", dev.path);
    let _ = writeln!(s, "time_based=1\nruntime={duration}");
    s
}

/// The job file: O_DIRECT sequential 1 MiB reads at queue depth 8 over the
/// whole device; run it with `fio --readonly` (then fio refuses any write).
pub(crate) fn member_job(devices: &[(usize, &MemberDevice)], duration: u64) -> String {
    let mut j = String::from(
        "; btrfs-lab bench --members: O_DIRECT reads of the member devices\n; run it with: fio --readonly --output-format=json THIS_FILE\n[global]\nioengine=libaio\ndirect=1\nrw=read\nbs=1048576\niodepth=8\nallow_file_create=0\n\n",
    );
    for (i, d) in devices {
        j.push_str(&section(*i, d, duration));
        j.push('\n');
    }
    j
}

fn rate_of(out: &FioOutput, i: usize, dev: &MemberDevice) -> Result<f64> {
    let name = format!("member{i}-{}", dev.name);
    out.jobs
        .iter()
        .find(|j| j.name == name)
        .map(|j| j.read.bw_bytes)
        .ok_or_else(|| Error::new(ErrorKind::Tool, format!("fio's output has no job {name}")))
}

/// Pure: the figures from the rates alone and together.
pub(crate) fn analyse(alone: Vec<MemberRate>, together: Vec<MemberRate>) -> MemberScaling {
    let n = alone.len().max(1) as f64;
    let slowest = alone
        .iter()
        .min_by(|a, b| a.bytes_per_sec.total_cmp(&b.bytes_per_sec))
        .cloned();
    let sum: f64 = alone.iter().map(|m| m.bytes_per_sec).sum();
    let total: f64 = together.iter().map(|m| m.bytes_per_sec).sum();
    let slow = slowest.as_ref().map_or(0.0, |m| m.bytes_per_sec);
    let fastest = alone.iter().map(|m| m.bytes_per_sec).fold(0.0, f64::max);
    let name = slowest.map(|m| m.device).unwrap_or_default();
    let summary = if fastest > slow * 1.2 {
        format!(
            "{name} is the slowest member at {} alone ({:.0}% of the fastest): a striped array reads at most slowest × {} = {}",
            format_mb(slow),
            100.0 * slow / fastest.max(1.0),
            alone.len(),
            format_mb(slow * n)
        )
    } else {
        format!(
            "the members are even ({} alone at the slowest); all at once they gave {} of {} summed",
            format_mb(slow),
            format_mb(total),
            format_mb(sum)
        )
    };
    MemberScaling {
        alone,
        together,
        sum_alone_bytes_per_sec: sum,
        together_bytes_per_sec: total,
        slowest_times_n_bytes_per_sec: slow * n,
        slowest: name,
        array_bytes_per_sec: None,
        summary,
    }
}

/// Checks that a member's path is `/dev/NAME` with a name fio reads back
/// exactly (`sys::tools::fio::check_value`) and that it is a block device.
pub(crate) fn check_member(d: &MemberDevice) -> Result<()> {
    crate::sys::tools::fio::check_value("member device", d.path.as_bytes())?;
    let plain = d
        .path
        .strip_prefix("/dev/")
        .is_some_and(|n| !n.is_empty() && !n.split('/').any(|c| c.is_empty() || c == ".."));
    let block = std::fs::symlink_metadata(&d.path)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()));
    if !plain || !block {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "member {} is not a block device under /dev; --members reads only those",
                d.path
            ),
        ));
    }
    Ok(())
}

/// Reads each member alone, then all at once.
pub fn scale(
    fio: &mut dyn FioRunner,
    work_dir: &TrustedDir,
    devices: &[MemberDevice],
    root: &SysRoot,
    duration: u64,
    progress: &mut dyn FnMut(&Progress),
) -> Result<MemberScaling> {
    if devices.is_empty() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "--members: no member block devices were found for this filesystem",
        ));
    }
    let _ = root;
    // Only device names fio reads back exactly go into a job file, and only
    // block devices.
    for d in devices {
        check_member(d)?;
    }
    let limit = crate::sys::tools::fio::watchdog(Duration::from_secs(duration));
    let mut alone = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        check_stop()?;
        progress(&Progress {
            what: format!("member {} alone", d.path),
            run: 1,
            runs: 1,
            eta_secs: duration * (devices.len() - i + 1) as u64,
        });
        let out = fio.run_readonly(
            work_dir,
            &format!("member-{i}.fio"),
            &member_job(&[(i, d)], duration),
            limit,
            &check_stop,
        )?;
        alone.push(MemberRate {
            device: d.path.clone(),
            bytes_per_sec: rate_of(&out, i, d)?,
            device_read_bytes: None,
        });
    }
    progress(&Progress {
        what: "all members at once".into(),
        run: 1,
        runs: 1,
        eta_secs: duration,
    });
    let all: Vec<(usize, &MemberDevice)> = devices.iter().enumerate().collect();
    let out = fio.run_readonly(
        work_dir,
        "members-all.fio",
        &member_job(&all, duration),
        limit,
        &check_stop,
    )?;
    let together = devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Ok(MemberRate {
                device: d.path.clone(),
                bytes_per_sec: rate_of(&out, i, d)?,
                device_read_bytes: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut m = analyse(alone, together);
    if devices.iter().any(|d| d.name.starts_with("loop")) {
        m.summary.push_str(
            "; loop devices: reads of their backing files' holes never reach a disk, so these figures are not drives'",
        );
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(d: &str, r: f64) -> MemberRate {
        MemberRate {
            device: d.into(),
            bytes_per_sec: r,
            device_read_bytes: None,
        }
    }

    #[test]
    fn the_slow_member_is_named() {
        // The seed article: two x4 drives and one on an x2 root port.
        let alone = vec![
            rate("/dev/nvme0n1", 6.0e9),
            rate("/dev/nvme1n1", 6.2e9),
            rate("/dev/nvme2n1", 3.55e9),
        ];
        let together = alone.clone();
        let m = analyse(alone, together);
        assert_eq!(m.slowest, "/dev/nvme2n1");
        assert!((m.slowest_times_n_bytes_per_sec - 10.65e9).abs() < 1.0);
        assert!((m.sum_alone_bytes_per_sec - 15.75e9).abs() < 1.0);
        assert!(m.summary.contains("slowest × 3"), "{}", m.summary);
    }

    #[test]
    fn member_jobs_are_read_only() {
        let d = MemberDevice {
            path: "/dev/loop3".into(),
            name: "loop3".into(),
            major: 7,
            minor: 3,
        };
        let j = member_job(&[(0, &d)], 5);
        assert!(j.contains("fio --readonly"));
        assert!(j.contains("\nrw=read\n"));
        assert!(!j.contains("write"));
        assert!(j.contains("[member0-loop3]\nfilename=/dev/loop3\n"));
    }
}
