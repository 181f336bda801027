//! `btrfs-lab explain` on the real pastes of tests/fixtures/explain
//! (provenance in its PROVENANCE.md), the generated cases of
//! tests/fixtures/generated/explain, and the `fi df`/`fi usage` corpora
//! (read by the same readers as `df --parse`/`usage --parse`): the binary
//! runs on each, its JSON is read back as the library's type, and the
//! outputs found and the findings are the expected ones. No root needed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use btrfs_lab::explain::{Detail, ExplainReport};
use btrfs_lab::parse::scrub::{ScrubState, ScrubStyle};

use crate::common::{TestEnv, bin, run, typed};

fn fixture(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(name)
}

fn explain(path: &Path) -> ExplainReport {
    let (code, stdout, stderr) = run(Command::new(bin()).args(["--json", "explain"]).arg(path));
    assert_eq!(code, 0, "{}: {stderr}", path.display());
    typed(&stdout)
}

fn real(name: &str) -> ExplainReport {
    explain(&fixture("explain", name))
}

fn generated(name: &str) -> ExplainReport {
    explain(&fixture("generated/explain", name))
}

fn codes(r: &ExplainReport) -> Vec<&'static str> {
    r.findings.iter().map(|e| e.finding.code.as_str()).collect()
}

fn kinds(r: &ExplainReport) -> Vec<&'static str> {
    r.outputs
        .iter()
        .map(|o| match &o.detail {
            Detail::FiDf { .. } => "fi-df",
            Detail::FiUsage { .. } => "fi-usage",
            Detail::FiShow { .. } => "fi-show",
            Detail::DeviceStats { .. } => "device-stats",
            Detail::DeviceUsage { .. } => "device-usage",
            Detail::Scrub { .. } => "scrub",
            Detail::BalanceStatus { .. } => "balance-status",
            Detail::ReplaceStatus { .. } => "replace-status",
            Detail::KernelLog { .. } => "kernel-log",
            Detail::Versions { .. } => "versions",
        })
        .collect()
}

fn scrubs(r: &ExplainReport) -> Vec<&btrfs_lab::parse::scrub::ScrubReport> {
    r.outputs
        .iter()
        .filter_map(|o| match &o.detail {
            Detail::Scrub { reports } => Some(reports),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Every real paste and generated case is found, whole, and read back.
#[test]
fn every_fixture_is_explained() {
    for dir in ["explain", "generated/explain"] {
        let mut n = 0;
        for e in fs::read_dir(fixture(dir, "")).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_owned();
            if name.ends_with(".md") {
                continue;
            }
            let r = explain(&p);
            assert!(!r.outputs.is_empty(), "{name}: nothing found");
            assert!(!r.cannot_tell.is_empty(), "{name}");
            n += 1;
        }
        assert!(n >= 5, "{dir}: {n} fixtures");
    }
}

#[test]
fn scrub_in_every_style() {
    let r = real("btrfs-progs-867-scrub-uncorrectable.txt");
    assert_eq!(kinds(&r), ["scrub"]);
    let s = scrubs(&r)[0];
    assert_eq!(
        (s.style, s.state, s.uncorrectable),
        (ScrubStyle::KeyValue, ScrubState::Finished, Some(11))
    );
    assert_eq!(r.outputs[0].lines.first, 5);
    let e = &r.findings[0];
    assert_eq!(e.finding.code.as_str(), "scrub-errors");
    assert_eq!(e.finding.severity.name(), "critical");
    assert_eq!((e.from[0].first, e.from[0].last), (5, 14));

    let r = real("btrfs-progs-pr1127-scrub-start-B.txt");
    let s = scrubs(&r)[0];
    assert!(s.done);
    assert_eq!(s.uncorrectable, Some(18));

    let r = real("btrfs-progs-817-scrub-d-history.txt");
    let s = scrubs(&r);
    assert_eq!(s.len(), 3);
    assert_eq!(s[1].device.as_deref(), Some("/dev/dm-14"));
    assert_eq!(codes(&r), ["scrub-errors"]);

    let r = real("btrfs-progs-1058-scrub-d-running.txt");
    assert!(scrubs(&r).iter().all(|s| s.state == ScrubState::Running));

    let r = real("btrfs-progs-227-scrub-resumed.txt");
    let s = scrubs(&r);
    assert_eq!(s.len(), 2, "{:?}", kinds(&r));
    assert!(
        s.iter()
            .all(|s| s.resumed && s.state == ScrubState::Running)
    );
    assert_eq!(s[1].bytes.as_deref(), Some("12.53TiB"));

    let r = real("rockstor-1786-scrub-classic-raw-interrupted.txt");
    let s = scrubs(&r)[0];
    assert_eq!(
        (s.style, s.state),
        (ScrubStyle::Classic, ScrubState::Interrupted)
    );
    assert_eq!(codes(&r), ["scrub-interrupted"]);

    let r = real("btrfs-progs-pr177-scrub-5.2-development.txt");
    assert_eq!(scrubs(&r)[0].state, ScrubState::Running);

    let r = generated("scrub-classic-4x-every-state.txt");
    let s = scrubs(&r);
    assert_eq!(s.len(), 3);
    assert_eq!(
        (s[0].state, s[0].corrected),
        (ScrubState::Finished, Some(3))
    );
    assert!(s[1].resumed && s[1].state == ScrubState::Aborted);
    assert_eq!(s[2].device.as_deref(), Some("/dev/sda"));
}

#[test]
fn device_stats_in_every_form() {
    let r = real("btrfs-progs-585-dev-stats-text-and-table.txt");
    assert_eq!(kinds(&r), ["versions", "device-stats", "device-stats"]);
    assert_eq!(r.progs_version.as_deref(), Some("6.1.3"));
    assert_eq!(codes(&r), ["device-errors"]);
    // One finding for sdb1, from both outputs.
    assert_eq!(r.findings[0].from.len(), 2);
    let r = real("python-btrfs-21-dev-stats-corruption.txt");
    assert_eq!(
        kinds(&r),
        ["device-stats"],
        "a Nagios `BTRFS CRITICAL:` line is not a kernel line"
    );
    assert!(
        r.findings[0]
            .finding
            .evidence
            .iter()
            .any(|e| e.name == "corruption errors" && e.value == "1")
    );
    let r = real("netdata-13561-dev-stats-comments.txt");
    assert!(r.findings.is_empty());
    let r = generated("dev-stats-json-quoted.txt");
    assert_eq!(kinds(&r), ["device-stats"]);
    assert!(r.findings[0].finding.title.contains("/dev/vdb"));
}

#[test]
fn balance_replace_show_and_usage() {
    let r = real("btrfs-progs-654-balance-considered.txt");
    assert_eq!(r.kernel.as_deref(), Some("5.4.0-153-generic"));
    let b = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "balance-running")
        .unwrap();
    assert!(
        b.finding
            .evidence
            .iter()
            .any(|e| e.value.contains("466 considered > about 101"))
    );
    let r = generated("balance-status-v-paused.txt");
    assert_eq!(codes(&r), ["balance-paused"]);
    let r = real("blog-de-replace-missing-device.txt");
    assert_eq!(kinds(&r), ["fi-show", "replace-status", "replace-status"]);
    let m = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "device-missing")
        .unwrap();
    assert_eq!(m.finding.title, "1 device(s) of 3 missing");
    let r = generated("replace-status-every-state.txt");
    assert_eq!(
        kinds(&r).iter().filter(|k| **k == "replace-status").count(),
        5
    );

    let r = real("rockstor-2311-fi-show-some-missing.txt");
    assert_eq!(codes(&r), ["device-missing"]);
    let r = generated("fi-show-missing-row-5.19.txt");
    let m = &r.findings[0];
    assert_eq!(m.finding.title, "1 device(s) of 3 missing");
    assert_eq!(r.kernel.as_deref(), Some("6.1.0-18-amd64"));
    let r = real("btrfs-progs-286-fi-show-dmesg.txt");
    assert!(r.findings.is_empty(), "{:?}", codes(&r));

    let r = real("btrfs-progs-950-usage-T-missing.txt");
    assert_eq!(kinds(&r), ["fi-usage"]);
    assert!(codes(&r).contains(&"device-missing"));
    let r = real("btrfs-progs-1114-device-usage-uname-a.txt");
    assert_eq!(kinds(&r), ["versions", "device-usage"]);
}

#[test]
fn kernel_logs() {
    let r = real("btrfs-progs-974-journal-csum-corrected.txt");
    let c = codes(&r);
    assert!(
        c.contains(&"device-errors") && c.contains(&"checksum-errors-logged"),
        "{c:?}"
    );
    let csum = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "checksum-errors-logged")
        .unwrap();
    assert!(
        csum.finding
            .evidence
            .iter()
            .any(|e| e.value.contains("inode 59747"))
    );
    assert!(
        csum.finding
            .command
            .as_deref()
            .unwrap()
            .contains("inode-resolve 59747")
    );

    let r = real("btrfs-progs-603-dmesg-zoned-errors.txt");
    let dev = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "device-errors")
        .unwrap();
    // The last counters count.
    assert!(dev.finding.evidence.iter().any(|e| e.value == "172"));

    let r = real("linux-btrfs-2018-07-forced-readonly-wrapped.txt");
    let ro = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "forced-readonly")
        .unwrap();
    assert!(
        ro.finding
            .evidence
            .iter()
            .any(|e| e.value.starts_with("-5")),
        "the wrapped errno is read"
    );
    assert!(codes(&r).contains(&"metadata-damage-logged"));

    // A raw mail: quoted-printable soft breaks and no-break spaces,
    // `journalctl -o short-unix` stamps, quote depths to five.
    let r = real("linux-btrfs-2021-10-raid5-replace-quoted-printable.txt");
    assert_eq!(r.progs_version.as_deref(), Some("5.14.2"));
    assert_eq!(r.kernel.as_deref(), Some("5.14.12-arch1-1"));
    let k = kinds(&r);
    assert!(
        k.contains(&"replace-status") && k.contains(&"fi-show"),
        "{k:?}"
    );
    let c = codes(&r);
    assert!(
        c.contains(&"device-missing") && c.contains(&"mount-degraded"),
        "{c:?}"
    );
    let sdb = r
        .findings
        .iter()
        .find(|e| e.finding.title.contains("/dev/sdb1"))
        .unwrap();
    assert!(sdb.finding.evidence.iter().any(|e| e.value == "228"));
    // Line numbers are the mail's, not the decoded text's.
    let missing = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "device-missing")
        .unwrap();
    assert!(
        missing.from.iter().any(|s| s.first == 10),
        "{:?}",
        missing.from
    );
    assert!(
        r.cannot_tell
            .iter()
            .any(|c| c.contains("why the mount failed"))
    );

    let r = real("maharmstone-btrfs-788-dmesg-human-stamps.txt");
    assert!(codes(&r).contains(&"forced-readonly"));
}

/// Whole tickets: versions in prose, outputs of several commands, kernel
/// lines, read together.
#[test]
fn whole_tickets() {
    let r = real("btrfs-progs-362-ticket-replace-enospc.txt");
    assert_eq!(r.progs_version.as_deref(), Some("5.11.1"));
    assert_eq!(r.kernel.as_deref(), Some("5.10.19"));
    let c = codes(&r);
    assert!(
        c.contains(&"device-missing") && c.contains(&"forced-readonly"),
        "{c:?}"
    );
    let ro = r
        .findings
        .iter()
        .find(|e| e.finding.code.as_str() == "forced-readonly")
        .unwrap();
    assert!(
        ro.finding
            .evidence
            .iter()
            .any(|e| e.value.contains("ENOSPC"))
    );

    let r = real("btrfs-progs-937-ticket-scrub-corrected.txt");
    assert_eq!(r.progs_version.as_deref(), Some("6.10.1"));
    assert_eq!(r.kernel.as_deref(), Some("6.12.7"));
    assert_eq!(codes(&r), ["scrub-errors"]);
    assert_eq!(r.findings[0].finding.severity.name(), "warning");

    let r = real("btrfs-progs-666-scrub-aborted-uname.txt");
    assert_eq!(r.kernel.as_deref(), Some("6.1.47-1-lts"));
    assert_eq!(codes(&r), ["scrub-interrupted"]);
}

/// The `fi df` and `fi usage` corpora read through explain as through
/// `df --parse`/`usage --parse`: the same readers.
#[test]
fn df_and_usage_pastes_are_read_by_the_shared_readers() {
    let mut missed = Vec::new();
    for (dir, kind) in [("fi-df", "fi-df"), ("fi-usage", "fi-usage")] {
        for e in fs::read_dir(fixture(dir, "")).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_owned();
            if name.ends_with(".md") {
                continue;
            }
            let (code, stdout, _) = run(Command::new(bin()).args(["--json", "explain"]).arg(&p));
            let found = code == 0 && kinds(&typed::<ExplainReport>(&stdout)).contains(&kind);
            if !found {
                missed.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(missed.is_empty(), "not read: {missed:#?}");
}

/// Nothing to explain: status 1, one line; control characters of a paste
/// never reach the terminal.
#[test]
fn nothing_found_and_hostile_text() {
    let env = TestEnv::new();
    let noise = env.path().join("noise.txt");
    fs::write(&noise, "hello\nworld\n").unwrap();
    let (code, stdout, stderr) = run(Command::new(bin()).arg("explain").arg(&noise));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
    let evil = env.path().join("evil.txt");
    fs::write(
        &evil,
        "[/dev/sd\u{1b}[2Ja].write_io_errs 3\n[/dev/sd\u{1b}[2Ja].read_io_errs 0\n",
    )
    .unwrap();
    let (code, stdout, _) = run(Command::new(bin()).arg("explain").arg(&evil));
    assert_eq!(code, 0);
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(stdout.contains("\\e[2J"), "{stdout}");
    // Stdin, with invalid UTF-8 and a long line.
    let mut input = b"\xff\xfe garbage\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 100_000));
    input.extend_from_slice(b"\nbtrfs-progs v6.6.3\n");
    let mut child = Command::new(bin())
        .args(["--json", "explain"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let r: ExplainReport = typed(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(r.input, "-");
    assert_eq!(r.progs_version.as_deref(), Some("6.6.3"));
}
