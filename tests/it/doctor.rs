//! `doctor` on real sandboxes in planted states: each bad state is built for
//! real (corruption behind btrfs' back then a scrub, a paused conversion,
//! mixed profiles, a full filesystem) and doctor must find it with the
//! right code, severity and exit status; a healthy filesystem gives no
//! warning. The Prometheus output is checked by `promtool`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btrfs_lab::doctor::DoctorReport;
use btrfs_lab::doctor::deep::ProbedFor;
use btrfs_lab::model::finding::Severity;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, json, promtool_check_metrics, require_root, run, typed};

const MIB: u64 = 1 << 20;

pub(crate) fn write_file(path: &Path, mib: usize, seed: u32) -> std::io::Result<()> {
    let mut f = fs::File::create(path)?;
    let block: Vec<u8> = (0..1u32 << 20)
        .map(|i| ((i ^ seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for _ in 0..mib {
        f.write_all(&block)?;
    }
    f.sync_all()
}

/// A healthy sandbox: two 1 GiB devices, data and metadata raid1.
pub(crate) fn raid1_pair(env: &TestEnv) -> btrfs_lab::sandbox::Sandbox {
    env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    })
}

/// `doctor --json MOUNT`: exit status and the typed report.
fn doctor(env: &TestEnv, m: &Path) -> (i32, DoctorReport) {
    let (code, stdout, stderr) = run(env.cmd().args(["--json", "doctor"]).arg(m));
    assert!(!stderr.contains("panicked"), "{stderr}");
    (code, typed(&stdout))
}

/// (code, severity) of every finding.
fn findings(r: &DoctorReport) -> Vec<(String, Severity)> {
    assert_eq!(r.filesystems.len(), 1);
    r.filesystems[0]
        .findings
        .iter()
        .map(|f| (f.code.to_string(), f.severity))
        .collect()
}

fn has(r: &DoctorReport, code: &str, sev: Severity) -> bool {
    findings(r).iter().any(|(c, s)| c == code && *s == sev)
}

fn btrfs(args: &[&str], m: &Path) -> (i32, String) {
    let out = Command::new("btrfs").args(args).arg(m).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Removes btrfs-progs' scrub record of a test filesystem on every path.
struct ScrubRecord(PathBuf);

impl ScrubRecord {
    fn of(m: &Path) -> Self {
        let fsid = btrfs_lab::sys::kernel::btrfs::fsid(m).unwrap();
        Self(PathBuf::from(format!("/var/lib/btrfs/scrub.status.{fsid}")))
    }
}

impl Drop for ScrubRecord {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
        let _ = fs::remove_file(self.0.with_extension("").with_file_name(format!(
            "scrub.progress.{}",
            self.0
                .file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("scrub.status.")
        )));
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn healthy_filesystem_gives_no_warning_and_valid_metrics() {
    if !require_root("doctor on a healthy filesystem") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("file"), 64, 1).unwrap();
    let (code, r) = doctor(&env, &m);
    eprintln!("{:#?}", findings(&r));
    assert_eq!(code, 0, "{:?}", findings(&r));
    assert_eq!(r.exit_status, 0);
    assert!(
        findings(&r).iter().all(|(_, s)| *s == Severity::Info),
        "a healthy filesystem got {:?}",
        findings(&r)
    );
    assert!(has(&r, "scrub-never-run", Severity::Info));
    // Who, where and when is the envelope's; the older top-level fields
    // are written from the same sources (DoctorReport no longer keeps them).
    let (_, stdout, _) = run(env.cmd().args(["--json", "doctor"]).arg(&m));
    let v = json(&stdout);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["version"], v["btrfs_lab"]["version"]);
    assert_eq!(v["hostname"], v["btrfs_lab"]["host"]);
    assert!(!v["hostname"].as_str().unwrap().is_empty());
    assert!(v["timestamp"].as_str().unwrap().ends_with('Z') && r.timestamp_unix > 1_600_000_000);
    assert_eq!(v["not_examined"], serde_json::json!([]));
    let fs0 = &r.filesystems[0];
    assert_eq!(fs0.facts.devices.len(), 2);
    assert_eq!(fs0.facts.total_devices, 2);
    assert!(
        fs0.facts
            .devices
            .iter()
            .all(|d| d.errors.is_some_and(|e| e.total() == 0))
    );

    // Without root it says so (UNKNOWN) instead of calling it healthy.
    let (code, stdout, stderr) = run(env.as_nobody(&[]).arg("doctor").arg(&m));
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stderr.contains("doctor needs root"), "{stderr}");
    assert_eq!(stdout, "");

    // Text: the same verdict.
    let (code, stdout, stderr) = run(env.cmd().arg("doctor").arg(&m));
    assert_eq!(code, 0, "{stderr}");
    // Info only (how many depends on mkfs defaults: a block group tree adds oldest-kernel).
    assert!(stdout.contains("0 critical, 0 warning, "), "{stdout}");
    assert!(stdout.contains("no warning (exit status 0)"), "{stdout}");

    // Prometheus: promtool accepts it, and the numbers are there.
    // At 80 columns too: metrics are never filled to the width.
    let (code, metrics, stderr) = run(env
        .cmd()
        .env("COLUMNS", "80")
        .args(["doctor", "--format", "prometheus"])
        .arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let (ok, lint) = promtool_check_metrics(&metrics);
    assert!(ok, "promtool check metrics:\n{lint}\n{metrics}");
    assert!(lint.trim().is_empty(), "promtool lint: {lint}");
    assert!(metrics.contains("btrfs_lab_doctor_status 0\n"), "{metrics}");
    let mp = m.display().to_string();
    // The exclusive operations as stable series, none running (sysfs has
    // them from 5.10).
    if std::path::Path::new(&format!("/sys/fs/btrfs/{}/exclusive_operation", fs0.uuid)).exists() {
        assert!(
            metrics.contains(&format!(
                "btrfs_lab_exclusive_operation_running{{mountpoint=\"{mp}\",uuid=\"{}\",operation=\"device replace\"}} 0\n",
                fs0.uuid
            )),
            "{metrics}"
        );
    }
    assert!(
        metrics.contains(&format!(
            "btrfs_lab_device_errors_total{{mountpoint=\"{mp}\",uuid=\"{}\",devid=\"1\"",
            fs0.uuid
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "btrfs_lab_doctor_finding{{mountpoint=\"{mp}\",uuid=\"{}\",code=\"scrub-never-run\",severity=\"info\"}} 1",
            fs0.uuid
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "btrfs_lab_doctor_finding_severity{{mountpoint=\"{mp}\",uuid=\"{}\",code=\"scrub-never-run\"}} 0",
            fs0.uuid
        )),
        "{metrics}"
    );

    // --textfile writes the same metrics atomically, nothing left beside it.
    let dir = env.path().join("textfile");
    fs::create_dir(&dir).unwrap();
    let prom = dir.join("btrfs.prom");
    let (code, _, stderr) = run(env.cmd().args(["doctor", "--textfile"]).arg(&prom).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let written = fs::read_to_string(&prom).unwrap();
    assert!(promtool_check_metrics(&written).0);
    assert!(
        written.contains("btrfs_lab_doctor_success 1\n"),
        "{written}"
    );
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
}

/// Where the first extent of `file` lies: (device, physical byte offset).
pub(crate) fn first_extent(file: &Path, any_member: &Path) -> (PathBuf, u64) {
    let out = Command::new("filefrag")
        .args(["-v", "-b4096"])
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let logical: u64 = text
        .lines()
        .find_map(|l| {
            let cols: Vec<&str> = l.split(':').map(str::trim).collect();
            (cols.len() >= 3 && cols[0] == "0")
                .then(|| cols[2].split("..").next()?.trim().parse::<u64>().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no extent in: {text}"))
        * 4096;
    let out = Command::new("btrfs-map-logical")
        .arg("-l")
        .arg(logical.to_string())
        .arg(any_member)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // "mirror 1 logical L physical P device /dev/loopN"
    let line = text
        .lines()
        .find(|l| l.contains("physical"))
        .unwrap_or_else(|| {
            panic!(
                "btrfs-map-logical -l {logical} {}: {text}{}",
                any_member.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |k: &str| words[words.iter().position(|w| *w == k).unwrap() + 1];
    (PathBuf::from(at("device")), at("physical").parse().unwrap())
}

/// Overwrites 1 MiB of `file`'s first extent on one device behind btrfs'
/// back, then scrubs; returns the device corrupted.
fn corrupt_and_scrub(m: &Path, file: &Path, member: &Path) -> PathBuf {
    // Commit the transaction: btrfs-map-logical reads the extent tree on disk.
    let (code, text) = btrfs(&["filesystem", "sync"], m);
    assert_eq!(code, 0, "{text}");
    let (dev, physical) = first_extent(file, member);
    let out = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=4096",
            "count=256",
            "oflag=direct",
            "conv=notrunc",
        ])
        .arg(format!("of={}", dev.display()))
        .arg(format!("seek={}", physical / 4096))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exit status 3 when errors were found: not asserted, doctor is.
    let (_, text) = btrfs(&["scrub", "start", "-B"], m);
    eprintln!("scrub: {text}");
    dev
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn corruption_on_raid0_is_critical_and_on_raid1_a_warning() {
    if !require_root("doctor after corruption") {
        return;
    }
    let env = TestEnv::new();
    for (data, want_code, want_sev, want_exit) in [
        (
            Profile::Raid0,
            "device-errors-no-redundancy",
            Severity::Critical,
            2,
        ),
        // The scrub repaired every copy: what is left is the reset.
        (
            Profile::Raid1,
            "device-errors-repaired",
            Severity::Warning,
            1,
        ),
    ] {
        let sbx = env.sandbox(SandboxRequest {
            devices: 2,
            size_bytes: 1 << 30,
            data: Some(data),
            metadata: Some(Profile::Raid1),
            ..SandboxRequest::default()
        });
        let m = sbx.mount_point().to_path_buf();
        let _record = ScrubRecord::of(&m);
        let file = m.join("file");
        write_file(&file, 32, 7).unwrap();
        let dev = corrupt_and_scrub(&m, &file, &sbx.devices()[0]);
        let (code, r) = doctor(&env, &m);
        eprintln!("{data}: {:#?}", r.filesystems[0].findings);
        assert_eq!(code, want_exit, "{data}: {:?}", findings(&r));
        assert_eq!(r.exit_status as i32, want_exit);
        let f = r.filesystems[0]
            .findings
            .iter()
            .find(|f| f.code == want_code)
            .unwrap_or_else(|| panic!("{data}: no {want_code}: {:?}", findings(&r)));
        assert_eq!(f.severity, want_sev);
        assert!(f.title.contains(&dev.display().to_string()), "{}", f.title);
        let corruption: u64 = f
            .evidence
            .iter()
            .find(|e| e.name == "corruption errors")
            .map(|e| e.value.parse().unwrap())
            .unwrap_or_else(|| panic!("{data}: {f:?}"));
        assert!(corruption >= 1, "{data}: {corruption}");
        if want_code == "device-errors-repaired" {
            let run = f.command.as_deref().unwrap_or_default();
            assert!(
                run.starts_with(&format!("btrfs device stats -z {}", m.display())),
                "{run}"
            );
            // smartctl is pointed at the drive: the disk holding the loop
            // device's backing file, never the loop device itself.
            let run = f.command.as_deref().unwrap_or_default();
            let facts = &r.filesystems[0].facts.devices;
            let drives = &facts
                .iter()
                .find(|d| d.path == dev.display().to_string())
                .unwrap()
                .drives;
            assert!(!run.contains("smartctl -a /dev/loop"), "{run}");
            for d in drives {
                assert!(run.contains(&format!("smartctl -a {d}")), "{run}");
            }
        }
        // The scrub record: unrepairable on raid0, repaired on raid1.
        let scrub_sev = if data == Profile::Raid0 {
            Severity::Critical
        } else {
            Severity::Warning
        };
        assert!(
            has(&r, "scrub-errors", scrub_sev),
            "{data}: {:?}",
            findings(&r)
        );
        assert!(!findings(&r).iter().any(|(c, _)| c == "scrub-never-run"));
        let s = &r.filesystems[0].facts.scrub;
        let uncorrectable: u64 = s.iter().map(|d| d.uncorrectable).sum();
        let corrected: u64 = s.iter().map(|d| d.corrected).sum();
        if data == Profile::Raid0 {
            assert!(uncorrectable >= 1, "{s:?}");
        } else {
            assert_eq!(uncorrectable, 0, "{s:?}");
            assert!(corrected >= 1, "{s:?}");
        }
        // Text, worst first.
        let (code, stdout, _) = run(env.cmd().arg("doctor").arg(&m));
        assert_eq!(code, want_exit);
        let first = stdout.lines().nth(2).unwrap_or_default(); // after the mount and its uuid
        assert!(
            first
                .trim_start()
                .starts_with(&want_sev.name().to_ascii_uppercase()),
            "{stdout}"
        );
        // The metrics carry the counter and pass promtool.
        let (_, metrics, _) = run(env.cmd().args(["doctor", "--format", "prometheus"]).arg(&m));
        assert!(promtool_check_metrics(&metrics).0, "{metrics}");
        assert!(
            metrics.contains(&format!("btrfs_lab_doctor_status {want_exit}\n")),
            "{metrics}"
        );
        sbx.down().unwrap();
    }
}

/// Data profiles with chunks now (the kernel's space info).
fn data_profiles_now(m: &Path) -> usize {
    btrfs_lab::sys::kernel::btrfs::data_profiles(m)
        .unwrap()
        .len()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn paused_conversion_then_mixed_profiles_after_cancel() {
    if !require_root("doctor on a paused conversion") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 3 << 30,
        data: Some(Profile::Single),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    for i in 0..3 {
        write_file(&m.join(format!("f{i}")), 300, i).unwrap();
    }
    // A conversion paused right after it started; if the kernel finished it
    // first, convert back and try again.
    let mut paused = false;
    for target in ["raid1", "single", "raid1", "single", "raid1"] {
        let arg = format!("-dconvert={target}");
        let (code, text) = btrfs(&["balance", "start", "--bg", "-f", &arg], &m);
        assert_eq!(code, 0, "{text}");
        let (code, _) = btrfs(&["balance", "pause"], &m);
        if code == 0 {
            paused = true;
            break;
        }
        eprintln!("note: the conversion to {target} completed before the pause");
    }
    assert!(paused, "could not pause a conversion in five tries");
    let (code, r) = doctor(&env, &m);
    assert_eq!(code, 1, "{:?}", findings(&r));
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "balance-paused")
        .unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.command.as_deref().unwrap().contains("convert --resume"),
        "{f:?}"
    );
    let b = r.filesystems[0].facts.balance.expect("the paused balance");
    assert!(!b.running);
    assert!(b.data_target.is_some());
    // One situation, one suggestion: no second finding naming another
    // command (before: mixed-profiles with `convert --status` beside it),
    // and df/usage continue the conversion instead of starting one
    // towards a guessed profile.
    let commands: Vec<&str> = r.filesystems[0]
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .filter_map(|f| f.command.as_deref())
        .collect();
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert!(!has(&r, "mixed-profiles", Severity::Warning));
    let resume = format!("btrfs-lab convert --resume {}", m.display());
    for args in [&["--json", "df"][..], &["--json", "usage"][..]] {
        let (code, out, err) = run(env.cmd().args(args).arg(&m));
        assert_eq!(code, 0, "{err}");
        let v = json(&out);
        let cmds: Vec<String> = v["interpretation"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["command"].as_str().map(str::to_owned))
            .filter(|c| c.contains("convert"))
            .collect();
        if data_profiles_now(&m) >= 2 {
            assert_eq!(cmds, std::slice::from_ref(&resume), "{args:?}");
        }
    }

    // Cancel it: the filesystem is left with two data profiles.
    let (code, text) = btrfs(&["balance", "cancel"], &m);
    assert_eq!(code, 0, "{text}");
    let (code, r) = doctor(&env, &m);
    eprintln!("{:#?}", findings(&r));
    let data_profiles = r.filesystems[0]
        .facts
        .profiles(btrfs_lab::model::space::BgType::Data);
    if data_profiles.len() >= 2 {
        assert_eq!(code, 1, "{:?}", findings(&r));
        assert!(
            has(&r, "mixed-profiles", Severity::Warning),
            "{:?}",
            findings(&r)
        );
        assert!(r.filesystems[0].facts.balance.is_none());
    } else {
        // Nothing had been relocated yet: one profile, nothing to say.
        eprintln!("note: no chunk was converted before the cancel");
        assert!(!has(&r, "mixed-profiles", Severity::Warning));
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn nearly_full_filesystem_is_critical() {
    if !require_root("doctor on a full filesystem") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let (code, r) = doctor(&env, &m);
    assert_eq!(code, 0, "empty: {:?}", findings(&r));
    // Fill it: files of 64 MiB until ENOSPC.
    let mut i = 0;
    while write_file(&m.join(format!("fill{i}")), 64, i).is_ok() {
        i += 1;
        assert!(i < 64, "a 1 GiB filesystem took more than 4 GiB");
    }
    let (code, r) = doctor(&env, &m);
    eprintln!("{:#?}", r.filesystems[0].findings);
    assert_eq!(code, 2, "{:?}", findings(&r));
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "data-nearly-full")
        .unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(f.severity, Severity::Critical);
    let (total, used) = r.filesystems[0]
        .facts
        .totals(btrfs_lab::model::space::BgType::Data);
    assert!(used * 100 >= total * 98, "used {used} of {total}");
    assert!(total > 700 * MIB, "{total}");
}

/// Every failure is exit status 3 (UNKNOWN) with one error line, and
/// `--textfile` then says `btrfs_lab_doctor_success 0`.
#[test]
fn doctor_that_cannot_look_exits_3() {
    let env = TestEnv::new();
    let prom = env.path().join("btrfs.prom");
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["doctor", "/nonexistent/btrfs-lab", "--textfile"])
        .arg(&prom));
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
    let text = fs::read_to_string(&prom).unwrap();
    assert!(text.contains("btrfs_lab_doctor_success 0\n"), "{text}");
    // A bad command line is UNKNOWN too (monitoring plugins' usage
    // errors; 2 would be CRITICAL): one line, nothing on stdout.
    let (code, stdout, stderr) =
        run(env
            .cmd()
            .args(["--json", "doctor", "--format", "prometheus", "/"]));
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("exclude each other"), "{stderr}");
    for bad in [
        &["doctor", "--no-such-flag"][..],
        &["doctor", "--format", "xml"],
        &["--json", "doctor", "--textfile"],
    ] {
        let (code, stdout, stderr) = run(env.cmd().args(bad));
        assert_eq!(code, 3, "{bad:?}: {stderr}");
        assert_eq!(stdout, "", "{bad:?}");
        assert!(
            stderr.starts_with("btrfs-lab: error: "),
            "{bad:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // Every other command keeps 2.
    let (code, _, stderr) = run(env.cmd().args(["df", "--no-such-flag", "/"]));
    assert_eq!(code, 2, "{stderr}");
}

/// One mount doctor cannot look at does not abort the others (ripgrep's
/// non-fatal errors): the healthy sandbox is still examined and reported,
/// the bad path is an entry of `not_examined` and one error line, the
/// textfile carries the sandbox's metrics with `btrfs_lab_doctor_success 0`,
/// and the exit status is 3 (UNKNOWN: nothing worse than info to report).
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn one_mount_doctor_cannot_look_at_does_not_abort_the_others() {
    if !require_root("doctor with one bad mount") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    let bad = Path::new("/nonexistent/btrfs-lab");
    let prom = env.path().join("btrfs.prom");
    for args in [[bad, m.as_path()], [m.as_path(), bad]] {
        let (code, stdout, stderr) = run(env
            .cmd()
            .args(["--json", "doctor", "--textfile"])
            .arg(&prom)
            .args(args));
        assert_eq!(code, 3, "{args:?}: {stderr}");
        let r: DoctorReport = typed(&stdout);
        assert_eq!(r.exit_status, 3);
        assert_eq!(r.filesystems.len(), 1, "{args:?}: {stdout}");
        assert_eq!(r.filesystems[0].mount_point, m);
        assert!(has(&r, "scrub-never-run", Severity::Info));
        assert_eq!(r.not_examined.len(), 1, "{stdout}");
        assert_eq!(r.not_examined[0].path, bad);
        assert!(!r.not_examined[0].error.is_empty());
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("btrfs-lab: error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains("/nonexistent/btrfs-lab"), "{stderr}");
        let text = fs::read_to_string(&prom).unwrap();
        assert!(text.contains("btrfs_lab_doctor_success 0\n"), "{text}");
        assert!(
            text.contains(&format!("uuid=\"{}\"", r.filesystems[0].uuid)),
            "{text}"
        );
    }
    // Text: the sandbox's findings, then the path not examined.
    let (code, stdout, stderr) = run(env.cmd().arg("doctor").arg(&m).arg(bad));
    assert_eq!(code, 3, "{stderr}");
    assert!(stdout.contains("0 critical, 0 warning, "), "{stdout}");
    assert!(
        stdout.contains("/nonexistent/btrfs-lab: not examined"),
        "{stdout}"
    );
    assert!(stdout.contains("(exit status 3)"), "{stdout}");
    // Every path bad: as before, UNKNOWN with nothing on stdout, one error
    // line per path.
    let (code, stdout, stderr) = run(env.cmd().args([
        "doctor",
        "/nonexistent/btrfs-lab",
        "/nonexistent/btrfs-lab-2",
    ]));
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stdout, "");
    assert_eq!(stderr.matches("btrfs-lab: error: ").count(), 2, "{stderr}");
}

/// `promtool check rules` and `promtool test rules` on the shipped alerting
/// rules (no root needed).
#[test]
fn shipped_alerting_rules_pass_promtool() {
    let promtool = btrfs_lab::sys::tools::find("promtool", "prometheus")
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh installs it)");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus");
    for args in [
        ["check", "rules", "btrfs-lab-alerts.yml"],
        ["test", "rules", "btrfs-lab-alerts.test.yml"],
    ] {
        let out = Command::new(&promtool.path)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {args:?}:\n{text}");
        assert!(text.contains("SUCCESS"), "{text}");
    }
    let out = Command::new(&promtool.path)
        .args(["check", "rules", "btrfs-lab-alerts.test.yml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "promtool accepts anything");
}

/// `ansible-playbook -i localhost, -c local PLAYBOOK -e ...`: (exit status,
/// output, the PLAY RECAP's (changed, failed)).
fn ansible(env: &TestEnv, playbook: &str, extra: serde_json::Value) -> (i32, String, (u32, u32)) {
    let tool = btrfs_lab::sys::tools::find("ansible-playbook", "ansible-core").expect(
        "ansible-playbook (Debian package ansible-core; scripts/install-deps.sh installs it)",
    );
    let mut vars = extra;
    vars["btrfs_lab"] = crate::common::bin().display().to_string().into();
    vars["btrfs_lab_become"] = false.into();
    // The test's own state directory: doctor records the members it saw.
    vars["btrfs_lab_state_dir"] = env.store().dir().display().to_string().into();
    vars["ansible_python_interpreter"] = "/usr/bin/python3".into();
    let tmp = env.path().join("ansible-tmp");
    fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(&tool.path)
        .args(["-i", "localhost,", "-c", "local"])
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("contrib/ansible")
                .join(playbook),
        )
        .arg("-e")
        .arg(vars.to_string())
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_LOCAL_TEMP", &tmp)
        .env("ANSIBLE_REMOTE_TEMP", &tmp)
        .env("ANSIBLE_RETRY_FILES_ENABLED", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let recap = text
        .lines()
        .find(|l| l.starts_with("localhost") && l.contains("changed="))
        .unwrap_or_else(|| panic!("no PLAY RECAP:\n{text}"));
    let field = |k: &str| -> u32 {
        recap
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {recap}"))
    };
    (
        out.status.code().unwrap_or(-1),
        text.clone(),
        (field("changed="), field("failed=")),
    )
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn ansible_playbooks_convert_idempotently_and_fail_critical_hosts() {
    if !require_root("the Ansible playbooks on sandboxes") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(Profile::Single),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("file"), 64, 3).unwrap();
    let member = sbx.devices()[1].display().to_string();
    let vars = serde_json::json!({
        "mount": m.display().to_string(),
        "data_profile": "raid1",
        "devices": [member],
    });
    let (code, text, (changed, failed)) = ansible(&env, "convert.yml", vars.clone());
    assert_eq!((code, changed, failed), (0, 1, 0), "first run:\n{text}");
    let (_, r) = doctor(&env, &m);
    assert_eq!(
        r.filesystems[0]
            .facts
            .profiles(btrfs_lab::model::space::BgType::Data),
        [Profile::Raid1]
    );
    let (code, text, (changed, failed)) = ansible(&env, "convert.yml", vars);
    assert_eq!(
        (code, changed, failed),
        (0, 0, 0),
        "second run must change nothing:\n{text}"
    );

    // doctor.yml: the healthy host passes and its report is saved.
    let reports = env.path().join("reports");
    fs::create_dir(&reports).unwrap();
    let (code, text, (_, failed)) = ansible(
        &env,
        "doctor.yml",
        serde_json::json!({
            "doctor_mounts": [m.display().to_string()],
            "doctor_report_dir": reports.display().to_string(),
        }),
    );
    assert_eq!((code, failed), (0, 0), "{text}");
    let saved: DoctorReport = typed(&fs::read_to_string(reports.join("localhost.json")).unwrap());
    assert_eq!(saved.filesystems[0].mount_point, m);
    assert_eq!(saved.exit_status, 0);

    // A full filesystem is critical: the host fails.
    let full = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let fm = full.mount_point().to_path_buf();
    let mut i = 0;
    while write_file(&fm.join(format!("fill{i}")), 64, i).is_ok() {
        i += 1;
        assert!(i < 64);
    }
    let (code, text, (_, failed)) = ansible(
        &env,
        "doctor.yml",
        serde_json::json!({ "doctor_mounts": [fm.display().to_string()] }),
    );
    assert_eq!(failed, 1, "{text}");
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("data-nearly-full"), "{text}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn degraded_mount_with_a_missing_device_is_critical() {
    if !require_root("doctor on a degraded mount") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("file"), 16, 5).unwrap();
    let devs = sbx.devices();
    // Unmount, make the kernel forget device 2, mount device 1 alone.
    crate::common::lose_member(&m, &devs[0], &devs[1], "degraded");
    let (code, r) = doctor(&env, &m);
    eprintln!("{:#?}", findings(&r));
    assert_eq!(code, 2, "{:?}", findings(&r));
    assert!(
        has(&r, "device-missing", Severity::Critical),
        "{:?}",
        findings(&r)
    );
    assert!(
        has(&r, "mount-degraded", Severity::Critical),
        "{:?}",
        findings(&r)
    );
    assert_eq!(r.filesystems[0].facts.total_devices, 2);
    assert!(
        r.filesystems[0]
            .findings
            .iter()
            .find(|f| f.code == "device-missing")
            .unwrap()
            .title
            .starts_with("1 device(s) of 2 missing")
    );
    // What it costs per profile and what to do, named.
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "device-missing")
        .unwrap();
    let text = serde_json::to_string(f).unwrap();
    assert!(text.contains("redundancy is gone"), "{text}");
    assert!(text.contains("btrfs-lab device replace"), "{text}");
    assert!(text.contains("never put degraded in fstab"), "{text}");
    // No INFO beside it: the scrub never run (the fixture never scrubbed)
    // and the rest wait until the array is whole.
    let info: Vec<_> = findings(&r)
        .into_iter()
        .filter(|(_, s)| *s == Severity::Info)
        .collect();
    assert_eq!(info, [], "{:?}", findings(&r));
    let (code, stdout, _) = run(env.cmd().arg("doctor").arg(&m));
    assert_eq!(code, 2, "{stdout}");
    assert!(!stdout.contains("INFO"), "{stdout}");
    // show exits 3 (device-missing), and says so.
    let (code, stdout, stderr) = run(env.cmd().arg("show").arg(&m));
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stdout.contains("missing"), "{stdout}");
    let (code, stdout, _) = run(env.cmd().args(["--json", "show"]).arg(&m));
    assert_eq!(code, 3, "{stdout}");
    let v = json(&stdout);
    let fs0 = &v["filesystems"][0];
    let listed = fs0["devices"].as_array().unwrap();
    assert!(
        listed.iter().any(|d| d["missing"] == true)
            || (listed.len() as u64) < fs0["total_devices"].as_u64().unwrap(),
        "{stdout}"
    );
}

/// `btrfs device stats MOUNT`'s corruption counter of `dev`.
fn corruption_of(m: &Path, dev: &Path) -> u64 {
    let (code, text) = btrfs(&["device", "stats"], m);
    assert_eq!(code, 0, "{text}");
    let key = format!("[{}].corruption_errs", dev.display());
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

/// Issue 52: after read-repair fixed a corrupted copy and a clean scrub,
/// doctor no longer says "run scrub" but "repaired: reset the counters",
/// and once they are reset the finding ends (exit 0): the advice ends when
/// it is followed.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn device_errors_end_once_scrubbed_and_reset() {
    if !require_root("doctor after read-repair") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    let _record = ScrubRecord::of(&m);
    let file = m.join("file");
    write_file(&file, 8, 11).unwrap();
    let (code, text) = btrfs(&["filesystem", "sync"], &m);
    assert_eq!(code, 0, "{text}");
    let (dev, physical) = first_extent(&file, &sbx.devices()[0]);
    // The first 64 KiB of one copy zeroed behind btrfs' back.
    let out = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=4096",
            "count=16",
            "oflag=direct",
            "conv=notrunc",
        ])
        .arg(format!("of={}", dev.display()))
        .arg(format!("seek={}", physical / 4096))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Reads of the file from new processes, its cached pages dropped
    // before each (dd's nocache): the mirror read depends on the reader
    // (read_policy), and the one that meets the zeroed copy repairs it from
    // the other (read-repair) and counts it.
    let uncache = || {
        let st = Command::new("dd")
            .arg(format!("if={}", file.display()))
            .args(["iflag=nocache", "count=0", "status=none"])
            .status()
            .unwrap();
        assert!(st.success());
    };
    for _ in 0..64 {
        uncache();
        if corruption_of(&m, &dev) > 0 {
            break;
        }
        let st = Command::new("cat")
            .arg(&file)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert!(corruption_of(&m, &dev) > 0, "no read met the zeroed copy");
    let finding = |r: &DoctorReport, prefix: &str| {
        r.filesystems[0]
            .findings
            .iter()
            .find(|f| f.code.as_str().starts_with(prefix))
            .cloned()
    };
    let (code, r) = doctor(&env, &m);
    let f = finding(&r, "device-errors").unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(
        (f.code.as_str(), code),
        ("device-errors", 1),
        "{:?}",
        findings(&r)
    );
    assert!(
        f.command.as_deref().unwrap().starts_with("btrfs-lab scrub"),
        "{:?}",
        f.command
    );
    // The advice followed: a scrub, which finds nothing left to repair.
    let (_, text) = btrfs(&["scrub", "start", "-B"], &m);
    eprintln!("scrub: {text}");
    let (code, r) = doctor(&env, &m);
    let f = finding(&r, "device-errors").unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(
        f.code.as_str(),
        "device-errors-repaired",
        "{:?}",
        findings(&r)
    );
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(code, 1);
    assert!(
        f.title.contains("repaired: reset the counters"),
        "{}",
        f.title
    );
    let reset = f.command.clone().unwrap();
    assert!(!reset.contains("btrfs-lab scrub"), "{reset}");
    assert!(
        !findings(&r).iter().any(|(c, _)| c == "scrub-errors"),
        "{:?}",
        findings(&r)
    );
    // The reset it names, run as it says.
    let argv: Vec<&str> = reset.split("  (").next().unwrap().split(' ').collect();
    let st = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(
        st.status.success(),
        "{reset}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let (code, r) = doctor(&env, &m);
    assert_eq!(finding(&r, "device-errors"), None);
    assert!(
        findings(&r).iter().all(|(_, s)| *s == Severity::Info),
        "{:?}",
        findings(&r)
    );
    assert_eq!(code, 0, "{:?}", findings(&r));
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn deep_probes_o_direct_and_leaves_nothing_behind() {
    if !require_root("doctor --deep") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    // A database directory whose file is copy-on-write.
    let mysql = m.join("var/lib/mysql");
    fs::create_dir_all(&mysql).unwrap();
    write_file(&mysql.join("ibdata1"), 8, 9).unwrap();
    // A VM image directory given the compression property (issue 30's
    // audit: compression where files should be NOCOW).
    let images = m.join("var/lib/libvirt/images");
    fs::create_dir_all(&images).unwrap();
    let (c, out) = btrfs(
        &["property", "set", images.to_str().unwrap(), "compression"],
        Path::new("zstd"),
    );
    assert_eq!(c, 0, "{out}");
    let (code, stdout, stderr) = run(env.cmd().args(["--json", "doctor", "--deep"]).arg(&m));
    let r: DoctorReport = typed(&stdout);
    eprintln!("{:#?}", r.filesystems[0].deep);
    let deep = r.filesystems[0].deep.clone().expect("deep facts");
    assert_eq!(deep.probe_error, None, "{stderr}");
    let verdict = deep.probe_verdict.expect("a verdict");
    // RAID1 data: every O_DIRECT write is buffered. A busy machine may make
    // the measurement inconclusive; the probe says so then, never "direct".
    assert!(
        ["profile-forced", "inconclusive"].contains(&verdict.as_str()),
        "{verdict}"
    );
    assert_eq!(deep.nocow_audited, [images.clone(), mysql.clone()]);
    let c = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "nocow-with-compression")
        .unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(c.severity, Severity::Warning);
    // The kernel sets the attribute with the property (6.x): chattr -c
    // then takes both off; the property alone is named as such.
    let command = c.command.clone().unwrap();
    assert!(
        [
            format!("chattr -c {}", images.display()),
            format!("btrfs property set {} compression ''", images.display())
        ]
        .contains(&command),
        "{command}"
    );
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "nocow-missing")
        .unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.title.starts_with("1 VM image or database file(s)"),
        "{}",
        f.title
    );
    assert_eq!(code, 1, "{:?}", findings(&r));
    if verdict == "profile-forced" {
        assert!(
            has(&r, "odirect-profile-forced", Severity::Warning),
            "{:?}",
            findings(&r)
        );
    } else {
        assert!(
            has(&r, "odirect-inconclusive", Severity::Info),
            "{:?}",
            findings(&r)
        );
    }
    // What it names takes the compression off.
    let argv: Vec<&str> = command
        .split(' ')
        .map(|w| if w == "''" { "" } else { w })
        .collect();
    let st = Command::new(argv[0]).args(&argv[1..]).status().unwrap();
    assert!(st.success(), "{command}");
    let d = fs::File::open(&images).unwrap();
    assert!(
        !btrfs_lab::sys::fs::filesystem::inode_flags_of(&d, &images)
            .unwrap()
            .unwrap()
            .intersects(btrfs_lab::sys::kernel::ioctl::FS_COMPR_FL),
        "{command}"
    );
    assert_eq!(
        btrfs_lab::sys::fs::filesystem::compression_property_of(&d, &images).unwrap(),
        None,
        "{command}"
    );
    // The probe's scratch files are gone.
    let left: Vec<_> = fs::read_dir(&m)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["var"], "{left:?}");
    let left: Vec<_> = fs::read_dir(&mysql)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["ibdata1"], "the audit changes nothing: {left:?}");
    // Without --deep: no deep facts.
    let (_, r) = doctor(&env, &m);
    assert!(r.filesystems[0].deep.is_none());
}

/// `chattr +C` on a new, empty directory (what `btrfs-lab nocow DIR` makes).
fn nocow_dir(p: &Path) {
    fs::create_dir_all(p).unwrap();
    let st = Command::new("chattr").arg("+C").arg(p).status().unwrap();
    assert!(st.success(), "chattr +C {}", p.display());
}

/// Issue 52: `--deep` probes the mount root with the same tracefs access
/// as probe-dio (the same evidence, and the same verdict when the per-file
/// tracepoint decides), the NOCOW directories it finds at the top and one
/// level down, and `--deep-dir`; once the VM images and databases have a
/// NOCOW directory that is direct, the mount root's O_DIRECT finding ends.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn deep_probes_the_nocow_dirs_and_the_advice_ends_the_finding() {
    if !require_root("doctor --deep on NOCOW directories") {
        return;
    }
    let env = TestEnv::new();
    // Single data: no profile forces O_DIRECT through the page cache.
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        data: Some(Profile::Single),
        metadata: Some(Profile::Dup),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let (code, stdout, stderr) = run(env.cmd().args(["--json", "probe-dio"]).arg(&m));
    assert!(!stderr.contains("panicked"), "{stderr}");
    let alone: btrfs_lab::probe::ProbeReport = typed(&stdout);
    assert_eq!(alone.exit_code as i32, code);
    let odirect = |r: &DoctorReport| -> Vec<(String, String)> {
        r.filesystems[0]
            .findings
            .iter()
            .filter(|f| f.code.as_str().starts_with("odirect-"))
            .map(|f| {
                let dir = f.evidence.iter().find(|e| e.name == "directory").unwrap();
                (f.code.to_string(), dir.value.clone())
            })
            .collect()
    };

    // Nothing NOCOW yet: the mount root alone, as probe-dio sees it.
    let (code, r) = doctor_deep(&env, &m, &[]);
    let deep = r.filesystems[0].deep.clone().unwrap();
    assert_eq!(deep.probes.len(), 1, "{:?}", deep.probes);
    let root = &deep.probes[0];
    assert_eq!(root.path, m);
    assert_eq!(root.probed_for, ProbedFor::MountRoot);
    assert_eq!(root.evidence, Some(alone.evidence.source), "{root:?}");
    if alone.evidence.source == btrfs_lab::probe::EvidenceKind::Tracepoint {
        assert_eq!(root.verdict.as_deref(), Some(alone.verdict.name()));
    }
    let verdict = root.verdict.clone().expect("a verdict");
    let before = odirect(&r);
    if verdict == "direct" {
        assert_eq!(before, []);
    } else {
        assert_eq!(before.len(), 1, "{before:?}");
        assert_eq!(before[0].1, m.display().to_string());
    }
    if verdict == "buffered-fallback" {
        assert_eq!(code, 1, "{:?}", findings(&r));
    }

    // The advice followed: VM images in a NOCOW directory at the top, a
    // database one level down; one three levels down is past the bound; a
    // checksummed directory is named with --deep-dir.
    nocow_dir(&m.join("vm"));
    nocow_dir(&m.join("srv/db"));
    nocow_dir(&m.join("a/b/deep"));
    let asked = m.join("asked");
    fs::create_dir(&asked).unwrap();
    let (_, r) = doctor_deep(&env, &m, &[&asked]);
    let deep = r.filesystems[0].deep.clone().unwrap();
    let probed: Vec<(PathBuf, ProbedFor)> = deep
        .probes
        .iter()
        .map(|p| (p.path.clone(), p.probed_for))
        .collect();
    assert_eq!(
        probed,
        [
            (m.clone(), ProbedFor::MountRoot),
            (m.join("srv/db"), ProbedFor::Nocow),
            (m.join("vm"), ProbedFor::Nocow),
            (asked.clone(), ProbedFor::Asked),
        ]
    );
    for p in &deep.probes[1..3] {
        assert_eq!(p.verdict.as_deref(), Some("direct"), "{p:?}");
    }
    // The checksummed directory asked for is as the mount root; the mount
    // root itself is no longer a finding.
    let asked_verdict = deep.probes[3].verdict.clone().unwrap();
    if alone.evidence.source == btrfs_lab::probe::EvidenceKind::Tracepoint {
        assert_eq!(asked_verdict, verdict);
    }
    let after = odirect(&r);
    assert!(
        after.iter().all(|(_, d)| *d == asked.display().to_string()),
        "{after:?}"
    );
    assert_eq!(after.is_empty(), asked_verdict == "direct", "{after:?}");

    // Without it: no O_DIRECT finding, and nothing worse than info.
    let (code, r) = doctor_deep(&env, &m, &[]);
    assert_eq!(odirect(&r), []);
    assert_eq!(r.filesystems[0].deep.as_ref().unwrap().probes.len(), 3);
    assert_eq!(code, 0, "{:?}", findings(&r));
    // The text names each directory probed.
    let (_, stdout, _) = run(env.cmd().args(["doctor", "--deep"]).arg(&m));
    assert!(
        stdout.contains(&format!(
            "probe-dio: direct {} (NOCOW)",
            m.join("vm").display()
        )),
        "{stdout}"
    );
    // Nothing left behind in any directory probed.
    for d in ["vm", "srv/db", "asked"] {
        assert_eq!(names_in(&m.join(d)), Vec::<String>::new(), "{d}");
    }
    // A --deep-dir on no filesystem examined: not examined, exit 3.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "doctor", "--deep-dir"])
        .arg(env.path())
        .arg(&m));
    assert_eq!(code, 3, "{stderr}");
    let r: DoctorReport = typed(&stdout);
    assert_eq!(r.not_examined[0].path, env.path());
    assert!(stderr.contains("--deep-dir"), "{stderr}");
}

/// `doctor --json --deep [--deep-dir DIR...] MOUNT`.
fn doctor_deep(env: &TestEnv, m: &Path, dirs: &[&Path]) -> (i32, DoctorReport) {
    let mut c = env.cmd();
    c.args(["--json", "doctor", "--deep"]);
    for d in dirs {
        c.arg("--deep-dir").arg(d);
    }
    let (code, stdout, stderr) = run(c.arg(m));
    assert!(!stderr.contains("panicked"), "{stderr}");
    (code, typed(&stdout))
}

/// A pid that no process has: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// The names in a directory, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    crate::common::listing(dir)
}

/// `--textfile` on the very filesystem that is full: the new metrics cannot
/// be written, so the file is made to say `btrfs_lab_doctor_success 0` (a
/// new small file, or the old one rewritten in place), one line on stderr
/// says so, and the exit status is the critical finding's (2), so that
/// `data-nearly-full` reaches monitoring. Before: the healthy file of the
/// last run stayed published (`success 1`) and the status was 3.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn textfile_on_a_full_filesystem_says_success_0_and_exits_critical() {
    if !require_root("doctor --textfile on a full filesystem") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let dir = m.join("textfile");
    fs::create_dir(&dir).unwrap();
    let prom = dir.join("btrfs.prom");
    let (code, _, stderr) = run(env.cmd().args(["doctor", "--textfile"]).arg(&prom).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let healthy = fs::read_to_string(&prom).unwrap();
    assert!(
        healthy.contains("btrfs_lab_doctor_success 1\n"),
        "{healthy}"
    );
    // Larger than an inline extent: the new file needs data space.
    assert!(healthy.len() > 4096, "{}", healthy.len());
    // Fill the data space: big files, then smaller ones, until ENOSPC.
    let mut i = 0u32;
    for mib in [64usize, 4, 1] {
        while write_file(&m.join(format!("fill{i}")), mib, i).is_ok() {
            i += 1;
            assert!(i < 1000, "a 1 GiB filesystem took more than 64 GiB");
        }
        i += 1;
    }
    for k in 0..256u32 {
        if fs::write(m.join(format!("small{k}")), vec![7u8; 64 << 10]).is_err() {
            break;
        }
    }
    let _ = Command::new("sync").arg("-f").arg(&m).status();
    let (code, stdout, stderr) = run(env.cmd().args(["doctor", "--textfile"]).arg(&prom).arg(&m));
    eprintln!("{stderr}");
    assert_eq!(code, 2, "the critical finding's status: {stderr}");
    assert!(stdout.contains("data-nearly-full"), "{stdout}");
    let text = fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("btrfs_lab_doctor_success 0\n"),
        "the textfile still says: {text}"
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("btrfs-lab: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("No space left") || errors[0].contains("no space left"),
        "{stderr}"
    );
    assert!(
        errors[0].contains("btrfs_lab_doctor_success 0"),
        "the line says what the textfile holds now: {stderr}"
    );
    assert_eq!(names_in(&dir), ["btrfs.prom"], "no temporary file left");
}

/// Runs killed with SIGKILL at various moments leave at most temporary
/// files whose pid is dead; the next run removes them (and older versions'
/// `.NAME.PID.tmp`), never a temporary file of a live process or of
/// another file, and never fails because a name exists. Before: 188 of
/// 400 killed runs left a temporary file forever, and a run whose pid
/// matched one failed with "File exists".
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn textfile_temps_of_killed_runs_are_removed() {
    if !require_root("doctor --textfile after SIGKILL") {
        return;
    }
    const KILLS: u64 = 24;
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let dir = env.path().join("textfile");
    fs::create_dir(&dir).unwrap();
    let prom = dir.join("btrfs.prom");
    for k in 0..KILLS {
        let mut child = env
            .cmd()
            .args(["doctor", "--textfile"])
            .arg(&prom)
            .arg(&m)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill points spread over the run (not a timing assertion).
        std::thread::sleep(std::time::Duration::from_millis(k * 3));
        let _ = child.kill();
        let _ = child.wait();
    }
    let dead = dead_pid();
    let me = std::process::id();
    let planted_dead = [
        format!(".btrfs.prom.{dead}.tmp"),
        format!(".btrfs.prom.{dead}.0a1b2c.tmp"),
    ];
    let kept = [
        format!(".btrfs.prom.{me}.0a1b2c.tmp"),
        format!(".other.prom.{dead}.tmp"),
    ];
    for n in planted_dead.iter().chain(&kept) {
        fs::write(dir.join(n), "btrfs_lab_doctor_success 1\n").unwrap();
    }
    let (code, _, stderr) = run(env.cmd().args(["doctor", "--textfile"]).arg(&prom).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let mut want: Vec<String> = kept.to_vec();
    want.push("btrfs.prom".to_owned());
    want.sort();
    assert_eq!(names_in(&dir), want, "stale temporary files left");
    let text = fs::read_to_string(&prom).unwrap();
    assert!(text.contains("btrfs_lab_doctor_success 1\n"), "{text}");
}

/// doctor's stdout that cannot be written (`/dev/full`) is UNKNOWN (3) for
/// monitoring, not 1 (which a plugin reads as WARNING and the shipped unit
/// counts as success); one error line.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn doctor_output_that_cannot_be_written_is_unknown() {
    if !require_root("doctor into /dev/full") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    for args in [
        vec!["doctor"],
        vec!["--json", "doctor"],
        vec!["doctor", "--format", "prometheus"],
    ] {
        let full = fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = env
            .cmd()
            .args(&args)
            .arg(&m)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("btrfs-lab: error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
        assert!(errors[0].contains("cannot write the output"), "{stderr}");
    }
}

/// Our trace instances of a pid (`instances/btrfs-lab-PID-*`).
#[cfg(feature = "test-hooks")]
fn trace_instances_of(pid: u32) -> Vec<String> {
    let prefix = format!("btrfs-lab-{pid}-");
    [
        "/sys/kernel/tracing/instances",
        "/sys/kernel/debug/tracing/instances",
    ]
    .iter()
    .filter_map(|d| fs::read_dir(d).ok())
    .flatten()
    .filter_map(|e| e.ok())
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|n| n.starts_with(&prefix))
    .collect()
}

/// SIGINT, SIGTERM and SIGHUP while `doctor --deep` probes (stopped by the
/// test hook after the probe's first write): exit 130, the probe's test
/// files gone, no trace instance of that run left, nothing on stdout.
/// Before: the signal was not handled by doctor (the probe's error became a
/// finding and the run went on, or the process died with its files).
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn deep_stops_on_int_term_and_hup_and_leaves_nothing() {
    use std::io::{BufRead, BufReader};
    if !require_root("doctor --deep interrupted") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let before = names_in(&m);
    for sig in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        let mut child = env
            .cmd()
            .args(["doctor", "--deep"])
            .arg(&m)
            .env(
                btrfs_lab::hooks::PAUSE_ENV,
                btrfs_lab::hooks::Pause::ProbeWritten.name(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                panic!("{sig}: doctor ended before the probe paused: {seen}");
            }
            seen.push_str(&line);
            if line.contains(&btrfs_lab::hooks::Pause::ProbeWritten.message()) {
                break;
            }
        }
        assert_ne!(
            names_in(&m),
            before,
            "{sig}: the probe's file exists while paused"
        );
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(130), "{sig}: {seen}{rest}");
        assert!(
            out.stdout.is_empty(),
            "{sig}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(rest.contains("interrupted"), "{sig}: {rest}");
        assert_eq!(names_in(&m), before, "{sig}: the probe's files are left");
        assert_eq!(
            trace_instances_of(pid),
            Vec::<String>::new(),
            "{sig}: trace instance left"
        );
    }
}

/// Work directories of bench runs that died, at the top of the mount and in
/// a directory doctor looks at (a database directory): one finding with
/// each path, its size and the command that removes them. A name that only
/// looks alike, or a link, is not named.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn stale_bench_work_dirs_are_named_with_size_and_command() {
    if !require_root("doctor and bench leftovers") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let (_, r) = doctor(&env, &m);
    assert!(
        !has(&r, "bench-leftovers", Severity::Info),
        "{:?}",
        findings(&r)
    );
    let dead = dead_pid();
    let prefix = btrfs_lab::bench::WORK_DIR_PREFIX;
    let top = m.join(format!("{prefix}{dead}-0000abcd"));
    fs::create_dir(&top).unwrap();
    write_file(&top.join("test.bin"), 8, 1).unwrap();
    let mysql = m.join("var/lib/mysql");
    fs::create_dir_all(&mysql).unwrap();
    let inner = mysql.join(format!("{prefix}meta-{dead}-0"));
    fs::create_dir_all(inner.join("d0/d1")).unwrap();
    write_file(&inner.join("d0/d1/f"), 2, 2).unwrap();
    fs::create_dir(m.join(format!("{prefix}notapid"))).unwrap();
    std::os::unix::fs::symlink("/etc", m.join(format!("{prefix}{dead}-00000002"))).unwrap();
    let (code, r) = doctor(&env, &m);
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "bench-leftovers")
        .unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(
        f.severity,
        Severity::Info,
        "10 MiB is below the warning size"
    );
    assert_eq!(code, 0, "{:?}", findings(&r));
    assert!(f.title.starts_with("2 work directories"), "{}", f.title);
    let dirs: Vec<&str> = f
        .evidence
        .iter()
        .filter(|e| e.name == "directory")
        .map(|e| e.value.as_str())
        .collect();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert!(
        dirs.iter()
            .any(|d| d.starts_with(&format!("{} (8.", top.display()))),
        "{dirs:?}"
    );
    assert!(
        dirs.iter()
            .any(|d| d.starts_with(&format!("{} (2.", inner.display()))),
        "{dirs:?}"
    );
    assert!(
        dirs.iter()
            .all(|d| d.ends_with(&format!("pid {dead} gone)"))),
        "{dirs:?}"
    );
    let cmd = f.command.as_deref().unwrap();
    assert!(cmd.starts_with("rm -rf -- "), "{cmd}");
    assert!(
        cmd.contains(&top.display().to_string()) && cmd.contains(&inner.display().to_string()),
        "{cmd}"
    );
    assert!(
        !cmd.contains("notapid") && !cmd.contains("00000002"),
        "{cmd}"
    );
    // The text names them too.
    let (_, text, _) = run(env.cmd().arg("doctor").arg(&m));
    assert!(text.contains("bench-leftovers"), "{text}");
}

/// `--textfile` through a link a user (uid 65534) planted in a sticky
/// directory, pointing at a root directory: refused with the link's owner
/// named, nothing written into root's directory, and the status says the
/// output could not be written (3 on a healthy filesystem). Before: the
/// link was followed and the metrics (and temporary file) went there.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn textfile_never_follows_a_users_link() {
    use std::os::unix::fs::PermissionsExt;
    if !require_root("doctor --textfile through a user's link") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let rootdir = env.path().join("root-only");
    fs::create_dir(&rootdir).unwrap();
    let shared = env.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let link = shared.join("metrics");
    let (code, _, stderr) = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg("ln")
        .arg("-s")
        .arg(&rootdir)
        .arg(&link));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["doctor", "--textfile"])
        .arg(link.join("btrfs.prom"))
        .arg(&m));
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stdout.contains("exit status 0"),
        "the report still goes out: {stdout}"
    );
    assert!(
        stderr.contains("is a symbolic link owned by uid 65534"),
        "{stderr}"
    );
    assert_eq!(
        names_in(&rootdir),
        Vec::<String>::new(),
        "written into root's directory"
    );
}

/// (code, severity) of the room findings of a finding list: the codes every
/// command computes from the same numbers (`space::room`).
fn room_findings(v: &[btrfs_lab::model::finding::Finding]) -> Vec<(String, Severity)> {
    let mut r: Vec<(String, Severity)> = v
        .iter()
        .filter(|f| {
            [
                "data-nearly-full",
                "metadata-chunk-no-room",
                "metadata-nearly-full",
                "global-reserve-used",
            ]
            .contains(&f.code.as_str())
        })
        .map(|f| (f.code.to_string(), f.severity))
        .collect();
    r.sort();
    r
}

/// doctor, `usage MOUNT`, `df MOUNT` and `usage --parse` of
/// `btrfs filesystem usage -b` on the same filesystem: the same room
/// findings with the same severities (the global reserve's few KiB can
/// change between two reads during a commit, so it is left out when info).
fn same_everywhere(env: &TestEnv, m: &Path) -> Vec<(String, Severity)> {
    let strip = |mut v: Vec<(String, Severity)>| {
        v.retain(|(c, s)| !(c == "global-reserve-used" && *s == Severity::Info));
        v
    };
    let (_, r) = doctor(env, m);
    let from_doctor = strip(room_findings(&r.filesystems[0].findings));
    let (code, out, err) = run(env.cmd().args(["--json", "usage"]).arg(m));
    assert_eq!(code, 0, "{err}");
    let u: btrfs_lab::space::usage::UsageDocument = typed(&out);
    assert_eq!(
        strip(room_findings(&u.interpretation.unwrap().findings)),
        from_doctor,
        "usage"
    );
    let (code, out, err) = run(env.cmd().args(["--json", "df"]).arg(m));
    assert_eq!(code, 0, "{err}");
    let d: btrfs_lab::space::DfReport = typed(&out);
    assert_eq!(
        strip(room_findings(&d.interpretation.findings)),
        from_doctor,
        "df"
    );
    let (code, paste) = btrfs(&["filesystem", "usage", "-b"], m);
    assert_eq!(code, 0, "{paste}");
    let file = env.path().join("usage-b.txt");
    fs::write(&file, paste).unwrap();
    let (code, out, err) = run(env.cmd().args(["--json", "usage", "--parse"]).arg(&file));
    assert_eq!(code, 0, "{err}");
    let p: btrfs_lab::space::ParsedUsageDocument = typed(&out);
    assert_eq!(
        strip(room_findings(&p.interpretation.findings)),
        from_doctor,
        "usage --parse"
    );
    from_doctor
}

/// Issue 30's false alarms on real filesystems, and the metadata that
/// really starves: the severities follow what the kernel does, every
/// command agrees, and the reclaim doctor names (up to the `-dusage` value
/// it computes from the chunks' usage) really makes room, data intact.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn room_findings_page_only_for_real_and_the_balance_they_name_makes_room() {
    if !require_root("doctor's room findings") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    let _record = ScrubRecord::of(&m);

    // The healthy RAID1 of the README's use case: one 600 MiB file, a
    // scrub. Data chunks took nearly all unallocated space; metadata is
    // under 1% used. Before: CRITICAL metadata-chunk-no-room (exit 2).
    write_file(&m.join("model.bin"), 600, 7).unwrap();
    let (code, out) = btrfs(&["scrub", "start", "-B"], &m);
    assert_eq!(code, 0, "{out}");
    let (code, r) = doctor(&env, &m);
    assert_eq!(code, 0, "{:?}", findings(&r));
    assert!(
        findings(&r).iter().all(|(_, s)| *s == Severity::Info),
        "{:?}",
        findings(&r)
    );
    assert!(
        r.filesystems[0]
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Info)
            .filter(|f| !room_findings(std::slice::from_ref(f)).is_empty())
            .all(|f| f.command.is_none()),
        "an info finding gives nothing to run"
    );
    let healthy = same_everywhere(&env, &m);
    assert!(
        healthy.iter().all(|(_, s)| *s == Severity::Info),
        "{healthy:?}"
    );

    // Full of large files: data is critical and the command adds room
    // (not a usage report, not a balance that frees nothing); metadata,
    // nearly empty, is not a warning.
    let mut i = 0;
    while write_file(&m.join(format!("big{i}")), 64, i).is_ok() {
        i += 1;
        assert!(i < 64, "a 1 GiB RAID1 took more than 4 GiB");
    }
    let (code, r) = doctor(&env, &m);
    assert_eq!(code, 2, "{:?}", findings(&r));
    let data = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "data-nearly-full")
        .unwrap_or_else(|| panic!("{:?}", findings(&r)));
    assert_eq!(data.severity, Severity::Critical);
    assert_eq!(
        data.command.as_deref(),
        Some(format!("btrfs-lab device add {} NEW_DEVICE", m.display()).as_str())
    );
    assert!(
        !has(&r, "metadata-chunk-no-room", Severity::Warning)
            && !has(&r, "metadata-chunk-no-room", Severity::Critical),
        "{:?}",
        findings(&r)
    );
    let full = same_everywhere(&env, &m);
    assert!(full.contains(&("data-nearly-full".into(), Severity::Critical)));

    // Fragment it: the model file gone and its room filled with big files
    // again (data chunks hold only 64 MiB files), then every other big
    // file deleted (each data chunk keeps some data: no chunk is freed),
    // then small inline files until metadata, which cannot grow, is over
    // half used: now the no-room finding is real.
    fs::remove_file(m.join("model.bin")).unwrap();
    btrfs(&["filesystem", "sync"], &m);
    while write_file(&m.join(format!("big{i}")), 64, i).is_ok() {
        i += 1;
        assert!(i < 128, "a 1 GiB RAID1 took more than 8 GiB");
    }
    for j in (0..i).step_by(2) {
        fs::remove_file(m.join(format!("big{j}"))).unwrap();
    }
    btrfs(&["filesystem", "sync"], &m);
    let small = vec![0x5au8; 1500];
    let mut made = 0usize;
    let metadata_fill = |env: &TestEnv| {
        let (_, r) = doctor(env, &m);
        let f = r.filesystems[0]
            .findings
            .iter()
            .find(|f| f.code == "metadata-chunk-no-room")
            .map(|f| (f.severity, f.command.clone()));
        (r, f)
    };
    let (r, finding) = loop {
        let d = m.join(format!("d{}", made / 1000));
        fs::create_dir_all(&d).unwrap();
        for k in 0..1000 {
            fs::write(d.join(format!("f{k}")), &small).unwrap();
        }
        made += 1000;
        btrfs(&["filesystem", "sync"], &m);
        let (r, f) = metadata_fill(&env);
        if let Some((sev, _)) = &f
            && *sev != Severity::Info
        {
            break (r, f.unwrap());
        }
        assert!(
            made < 200_000,
            "metadata never got tight: {:?}",
            findings(&r)
        );
    };
    eprintln!(
        "{made} small files: {:#?}\ndata chunks: {:?}",
        r.filesystems[0].findings, r.filesystems[0].facts.data_chunks
    );
    let (severity, command) = finding;
    assert!(matches!(severity, Severity::Warning | Severity::Critical));
    let command = command.expect("a warning names what to run");
    let prefix = format!("btrfs-lab reclaim {} --max-usage ", m.display());
    assert!(command.starts_with(&prefix), "{command}");
    let usage: u8 = command[prefix.len()..].parse().unwrap();
    let predicted = btrfs_lab::model::reclaim::step(
        r.filesystems[0].facts.data_chunks.as_deref().unwrap(),
        usage,
    );
    assert!(
        predicted.chunks > 0 && predicted.frees_bytes > 0,
        "{predicted:?}"
    );
    assert_eq!(
        same_everywhere(&env, &m)
            .iter()
            .find(|(c, _)| c == "metadata-chunk-no-room")
            .map(|x| x.1),
        Some(severity)
    );

    // Run exactly what it said: the unallocated space grows by what it
    // predicted (within a chunk: the kernel has the last word), and the
    // metadata finding is no longer a warning.
    let unalloc = |r: &DoctorReport| -> u64 {
        r.filesystems[0]
            .facts
            .devices
            .iter()
            .map(|d| d.size_bytes - d.allocated_bytes)
            .sum()
    };
    let before = unalloc(&r);
    let argv: Vec<&str> = command.split(' ').collect();
    assert_eq!(argv[0], "btrfs-lab");
    let out = env.cmd().args(&argv[1..]).arg("--yes").output().unwrap();
    assert!(out.status.success(), "{command}: {out:?}");
    let (_, after_r) = doctor(&env, &m);
    let after = unalloc(&after_r);
    // RAID1 data: each logical byte freed is two raw bytes.
    let raw_predicted = 2 * predicted.frees_bytes;
    let alloc = |r: &DoctorReport, k| r.filesystems[0].facts.totals(k).0;
    use btrfs_lab::model::space::BgType;
    eprintln!(
        "{command}: unallocated {before} -> {after}, predicted +{raw_predicted}; data allocated {} -> {}, metadata {} -> {}",
        alloc(&r, BgType::Data),
        alloc(&after_r, BgType::Data),
        alloc(&r, BgType::Metadata),
        alloc(&after_r, BgType::Metadata)
    );
    // reclaim stops at the first step that reaches its goal (room for a
    // metadata chunk), at or below the value doctor named: data chunks
    // were freed (and the kernel may take part of the room for metadata
    // at once).
    assert!(
        alloc(&after_r, BgType::Data) < alloc(&r, BgType::Data),
        "reclaim freed no data chunk"
    );
    assert!(after > before, "{before} -> {after}");
    assert!(
        !has(&after_r, "metadata-chunk-no-room", Severity::Warning)
            && !has(&after_r, "metadata-chunk-no-room", Severity::Critical),
        "{:?}",
        findings(&after_r)
    );
    // Data intact: the big files that stay, byte for byte.
    for j in (1..i).step_by(2) {
        let mut want = Vec::new();
        let block: Vec<u8> = (0..1u32 << 20)
            .map(|x| ((x ^ j).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for _ in 0..64 {
            want.extend_from_slice(&block);
        }
        assert!(
            fs::read(m.join(format!("big{j}"))).unwrap() == want,
            "big{j}"
        );
    }
    assert_eq!(fs::read(m.join("d0/f0")).unwrap(), small);
}

/// The audits on a real filesystem: an fstab that names a member by its
/// device name and mounts it degraded (`--fstab`), a remount with
/// ssd_spread, and an `--fstab` that cannot be read.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn audits_of_fstab_and_mount_options_on_a_real_filesystem() {
    if !require_root("doctor's audits") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    let (_, r) = doctor(&env, &m);
    assert!(
        !findings(&r).iter().any(|(c, _)| c.starts_with("fstab-")),
        "the machine's fstab has no entry for a test sandbox: {:?}",
        findings(&r)
    );
    let member = r.filesystems[0].facts.devices[0].path.clone();
    let uuid = r.filesystems[0].uuid.clone();
    // RAID1 data: the read policy as this kernel states it.
    let policy =
        fs::read_to_string(format!("/sys/fs/btrfs/{uuid}/read_policy")).unwrap_or_default();
    assert_eq!(
        has(&r, "raid1-read-policy", Severity::Info),
        policy.split_whitespace().any(|w| w == "[pid]"),
        "read_policy {policy:?}: {:?}",
        findings(&r)
    );
    let tab = env.path().join("fstab");
    fs::write(
        &tab,
        format!(
            "# test\n{member} {} btrfs noatime,degraded 0 0\nUUID=00000000-0000-0000-0000-000000000000 /elsewhere btrfs degraded 0 0\n",
            m.display()
        ),
    )
    .unwrap();
    let (code, out, err) = run(env
        .cmd()
        .args(["--json", "doctor", "--fstab"])
        .arg(&tab)
        .arg(&m));
    assert_eq!(code, 1, "{err}");
    let r: DoctorReport = typed(&out);
    assert!(
        has(&r, "fstab-device-name", Severity::Warning),
        "{:?}",
        findings(&r)
    );
    assert!(
        has(&r, "fstab-degraded", Severity::Warning),
        "{:?}",
        findings(&r)
    );
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "fstab-device-name")
        .unwrap();
    let fixed = format!("UUID={uuid} {} btrfs noatime,degraded 0 0", m.display());
    assert!(
        f.evidence
            .iter()
            .any(|e| e.name == "write instead" && e.value == fixed),
        "{f:?}"
    );
    // Only this filesystem's line: the other degraded entry is not counted.
    assert_eq!(
        r.filesystems[0]
            .findings
            .iter()
            .filter(|f| f.code == "fstab-degraded")
            .count(),
        1
    );

    // Remounted with ssd_spread: said, as info.
    crate::common::remount(&m, "ssd_spread");
    let (_, r) = doctor(&env, &m);
    assert!(has(&r, "ssd-spread", Severity::Info), "{:?}", findings(&r));

    // An --fstab that cannot be read: one line, exit 3, nothing on stdout.
    let (code, out, err) = run(env
        .cmd()
        .args(["doctor", "--fstab"])
        .arg(env.path().join("no-such-fstab"))
        .arg(&m));
    assert_eq!(code, 3, "UNKNOWN, as every failure of doctor: {err}");
    assert_eq!(out, "");
    assert!(
        err.contains("cannot open") && err.contains("no-such-fstab"),
        "{err}"
    );
    assert!(err.contains("--fstab takes a regular file"), "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("btrfs-lab: error"))
            .count(),
        1,
        "{err}"
    );
}

/// Metadata really starved: data took every byte, then small inline files
/// until the kernel refuses one (ENOSPC). doctor, asked every 1000 files,
/// must have said critical before that refusal, and never more than info
/// while metadata was under half of what it can grow to.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn starved_metadata_is_critical_before_the_kernel_refuses() {
    if !require_root("starved metadata") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    let mut i = 0;
    while write_file(&m.join(format!("big{i}")), 64, i).is_ok() {
        i += 1;
        assert!(i < 64, "a 1 GiB RAID1 took more than 4 GiB");
    }
    let _ = fs::remove_file(m.join(format!("big{i}")));
    btrfs(&["filesystem", "sync"], &m);
    let small = vec![0x33u8; 1500];
    let mut made = 0usize;
    let mut seen: Vec<(usize, Severity, f64)> = Vec::new();
    let refused = 'fill: loop {
        let d = m.join(format!("d{}", made / 1000));
        if let Err(e) = fs::create_dir_all(&d) {
            break 'fill e;
        }
        for k in 0..1000 {
            if let Err(e) = fs::write(d.join(format!("f{k}")), &small) {
                break 'fill e;
            }
            made += 1;
        }
        btrfs(&["filesystem", "sync"], &m);
        let (_, r) = doctor(&env, &m);
        let f = &r.filesystems[0].facts;
        let (alloc, used) = f.totals(btrfs_lab::model::space::BgType::Metadata);
        let reserve = f
            .spaces
            .iter()
            .find(|s| s.bg_type == btrfs_lab::model::space::BgType::GlobalReserve)
            .map_or(0, |s| s.total_bytes);
        let fill = (used + reserve) as f64 / alloc.max(1) as f64;
        let sev = r.filesystems[0]
            .findings
            .iter()
            .filter(|x| x.code == "metadata-chunk-no-room" || x.code == "metadata-nearly-full")
            .map(|x| x.severity)
            .min()
            .unwrap_or(Severity::Info);
        seen.push((made, sev, fill));
        assert!(made < 400_000, "the kernel never refused: {seen:?}");
    };
    eprintln!("refused after {made} files ({refused}); doctor said {seen:?}");
    assert_eq!(
        refused.raw_os_error(),
        Some(libc::ENOSPC),
        "the refusal is ENOSPC: {refused}"
    );
    assert!(
        seen.iter().any(|(_, s, _)| *s == Severity::Critical),
        "never critical before the kernel refused: {seen:?}"
    );
    assert!(
        seen.iter()
            .filter(|(_, _, fill)| *fill < 0.45)
            .all(|(_, s, _)| *s == Severity::Info),
        "a warning while metadata had room: {seen:?}"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn raid0_data_written_before_a_device_add_is_narrow_until_a_balance() {
    if !require_root("doctor's narrow chunks after a device add") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("file"), 256, 5).unwrap();
    let (_, r) = doctor(&env, &m);
    assert!(
        findings(&r).iter().all(|(c, _)| c != "data-narrow-chunks"),
        "every chunk is full width: {:?}",
        findings(&r)
    );

    // The btrfs-progs add: the data stays on the three devices it had.
    let new = env.spare_device("fourth", 1 << 30);
    let (code, out) = btrfs(&["device", "add", "-f", new.to_str().unwrap()], &m);
    assert_eq!(code, 0, "{out}");
    let (code, r) = doctor(&env, &m);
    eprintln!("{:#?}", r.filesystems[0].findings);
    assert_eq!(code, 1, "{:?}", findings(&r));
    assert!(has(&r, "data-narrow-chunks", Severity::Warning));
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "data-narrow-chunks")
        .unwrap();
    let ev = |name: &str| {
        f.evidence
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.value.clone())
            .unwrap_or_else(|| panic!("no {name}: {f:?}"))
    };
    assert!(f.title.contains("of raid0 data"), "{}", f.title);
    assert!(
        f.title.ends_with("read from 3 devices, not 4"),
        "{}",
        f.title
    );
    assert_eq!(ev("read width"), "3 devices, 4 at full width");
    // Loop devices have no PCIe link: the ratio alone.
    assert!(
        ev("read ceiling").starts_with("75% "),
        "{}",
        ev("read ceiling")
    );
    assert_eq!(ev("after the balance"), "read from 4 devices on average");
    let narrow = r.filesystems[0].facts.narrow_data.as_ref().unwrap();
    // The file's 256 MiB are all in narrow chunks.
    assert!(narrow.narrow().0 >= 256 * MIB, "{narrow:?}");
    let ms = m.display().to_string();
    assert_eq!(
        f.command.as_deref(),
        Some(format!("btrfs-lab balance {ms}").as_str())
    );
    // The text says it too.
    let (code, text, _) = run(env.cmd().arg("doctor").arg(&m));
    eprintln!("{text}");
    assert_eq!(code, 1);
    assert!(text.contains("data-narrow-chunks"), "{text}");
    assert!(text.contains(&format!("btrfs-lab balance {ms}")), "{text}");

    // The command it names, run: gone.
    let (code, out, err) = run(env.cmd().args(["balance", "--yes"]).arg(&m));
    assert_eq!(code, 0, "{out}{err}");
    let (code, r) = doctor(&env, &m);
    assert!(
        findings(&r).iter().all(|(c, _)| c != "data-narrow-chunks"),
        "{:?}",
        findings(&r)
    );
    assert_eq!(code, 0, "{:?}", findings(&r));
    assert!(r.filesystems[0].facts.narrow_data.is_none());
}
