//! A member that went away and came back (issue 53), on loop devices: a
//! RAID1 pair, one member forgotten and the other mounted `-o degraded`
//! and written, then both mounted again. What doctor says at each look,
//! what `--notify` tells (once per new state), the resync by `scrub
//! --device`, and the files after it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use btrfs_lab::doctor::DoctorReport;
use btrfs_lab::doctor::members::{MemberState, MembersRecord};
use btrfs_lab::model::finding::Severity;

use crate::common::{TestEnv, must, require_root, run, typed};
use crate::doctor::write_file;

/// `doctor --json --notify HOOK MOUNT`: exit status and the report.
fn look(env: &TestEnv, m: &Path, hook: &Path) -> (i32, DoctorReport) {
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "doctor", "--notify"])
        .arg(hook)
        .arg(m));
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !stderr.contains("error"),
        "a look that could not record or tell: {stderr}"
    );
    (code, typed(&stdout))
}

/// Device 2's state as `show --json` and `usage --json` name it.
fn shown(env: &TestEnv, m: &Path) -> (String, String) {
    let (_, out, err) = run(env.cmd().args(["--json", "show"]).arg(m));
    assert!(!err.contains("panicked"), "{err}");
    let show = crate::common::json(&out);
    let state = |devs: &serde_json::Value| {
        devs.as_array()
            .unwrap_or_else(|| panic!("no devices: {devs}"))
            .iter()
            .find(|d| d["devid"] == 2)
            .map_or("(not listed)".to_owned(), |d| {
                d["state"].as_str().unwrap().to_owned()
            })
    };
    let s = state(&show["filesystems"][0]["devices"]);
    let (_, out, err) = run(env.cmd().args(["--json", "usage"]).arg(m));
    let usage = crate::common::json(&out);
    let u = state(&usage["devices"]);
    assert!(!err.contains("panicked"), "{err}");
    (s, u)
}

fn codes(r: &DoctorReport) -> Vec<(String, Severity)> {
    r.filesystems[0]
        .findings
        .iter()
        .map(|f| (f.code.to_string(), f.severity))
        .collect()
}

fn told(log: &Path) -> Vec<Vec<String>> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('\u{1f}').map(str::to_owned).collect())
        .collect()
}

fn sha(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_member_that_came_back_is_named_told_once_and_resynced_by_its_scrub() {
    if !require_root("a member that came back") {
        return;
    }
    let env = TestEnv::new();
    let sbx = crate::doctor::raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    let devs = sbx.devices();
    // The notify program: its arguments, one event a line. Root owns it
    // and its directory (the test's own, 0700).
    let log = env.path().join("told.log");
    let hook = env.path().join("hook");
    fs::write(
        &hook,
        format!(
            "#!/bin/sh\nIFS=$(printf '\\037')\nprintf '%s\\n' \"$*\" >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    write_file(&m.join("before"), 16, 1).unwrap();

    let (code, r) = look(&env, &m, &hook);
    assert!(code < 2, "{:?}", codes(&r));
    let fsid = r.filesystems[0].uuid.clone();
    assert!(
        r.filesystems[0]
            .facts
            .devices
            .iter()
            .all(|d| d.state == MemberState::Present && d.generation.is_some()),
        "{:#?}",
        r.filesystems[0].facts.devices
    );
    assert!(told(&log).is_empty(), "{:?}", told(&log));

    // Device 2 gone: device 1 mounted alone, degraded, and written (each
    // sync a transaction device 2 misses).
    crate::common::lose_member(&m, &devs[0], &devs[1], "degraded");
    for i in 0..4 {
        write_file(&m.join(format!("while-gone-{i}")), 4, 10 + i).unwrap();
        must(Command::new("sync").arg("-f").arg(&m));
    }
    let (code, r) = look(&env, &m, &hook);
    assert_eq!(code, 2, "{:?}", codes(&r));
    assert!(codes(&r).contains(&("device-missing".into(), Severity::Critical)));
    let dev2 = |r: &DoctorReport| {
        r.filesystems[0]
            .facts
            .devices
            .iter()
            .find(|d| d.devid == 2)
            .cloned()
            .unwrap()
    };
    assert_eq!(dev2(&r).state, MemberState::Missing);
    assert_eq!(shown(&env, &m), ("missing".into(), "missing".into()));
    let events = told(&log);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0][..5],
        [
            "device-missing",
            "critical",
            &fsid,
            &m.display().to_string(),
            "2"
        ]
    );
    // The next look tells nothing new.
    let (_, r) = look(&env, &m, &hook);
    assert_eq!(dev2(&r).state, MemberState::Missing);
    assert_eq!(told(&log).len(), 1, "{:?}", told(&log));

    // Back: both mounted again. Device 2 missed what was written.
    must(Command::new("umount").arg(&m));
    must(Command::new("btrfs").args(["device", "scan"]).arg(&devs[1]));
    must(Command::new("mount").arg(&devs[0]).arg(&m));
    let (code, r) = look(&env, &m, &hook);
    eprintln!("back: {:?}", codes(&r));
    let d = dev2(&r);
    eprintln!(
        "member 2 back: {:?}, its generation {:?}, the filesystem's {:?}",
        d.state, d.generation, r.filesystems[0].facts.generation
    );
    assert!(
        matches!(d.state, MemberState::Returned | MemberState::Stale),
        "{d:#?}"
    );
    // show and usage name it as doctor does (what they read does not
    // change it: no commit between).
    let word = serde_json::to_value(d.state)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(shown(&env, &m), (word.clone(), word));
    assert_eq!(code, 1, "{:?}", codes(&r));
    let f = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "device-returned" || f.code == "device-stale")
        .unwrap_or_else(|| panic!("{:?}", codes(&r)));
    assert_eq!(f.severity, Severity::Warning);
    let cmd = f.command.clone().unwrap();
    assert!(cmd.ends_with("--device 2"), "{cmd}");
    assert!(f.why.contains("never mount it alone"), "{}", f.why);
    let events = told(&log);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1][0], f.code.to_string());
    assert_eq!(events[1][4], "2");
    // Still returned at the next look, and not told again.
    let (_, r) = look(&env, &m, &hook);
    assert!(
        codes(&r)
            .iter()
            .any(|(c, _)| c == "device-returned" || c == "device-stale"),
        "{:?}",
        codes(&r)
    );
    assert_eq!(told(&log).len(), 2, "{:?}", told(&log));

    // The resync the finding names: a scrub of device 2 alone.
    let (code, out, err) = run(env.cmd().args(["scrub", "--yes", "--device", "2"]).arg(&m));
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.contains("devid 2"), "{out}");
    assert!(!out.contains("devid 1"), "only device 2 is read: {out}");
    // Its old metadata is found and rewritten from device 1's copies:
    // errors found, all corrected (3).
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("0 uncorrectable"), "{out}");
    let (_, r) = look(&env, &m, &hook);
    assert!(
        !codes(&r)
            .iter()
            .any(|(c, _)| c == "device-returned" || c == "device-stale"),
        "{:?}",
        codes(&r)
    );
    assert_eq!(dev2(&r).state, MemberState::Present);
    assert_eq!(shown(&env, &m), ("present".into(), "present".into()));
    let record: MembersRecord = serde_json::from_str(
        &fs::read_to_string(
            env.path()
                .join("state")
                .join("members")
                .join(format!("{fsid}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(
        record
            .members
            .iter()
            .all(|x| x.state == MemberState::Present),
        "{record:#?}"
    );
    // Every file reads back as written, from either copy.
    let expect = env.path().join("expect");
    write_file(&expect, 16, 1).unwrap();
    assert_eq!(sha(&m.join("before")), sha(&expect));
    for i in 0..4 {
        write_file(&expect, 4, 10 + i).unwrap();
        assert_eq!(sha(&m.join(format!("while-gone-{i}"))), sha(&expect));
    }
    let (code, _, err) = run(Command::new("btrfs")
        .args(["scrub", "start", "-B", "-r"])
        .arg(&m));
    assert_eq!(code, 0, "a read-only scrub of both finds nothing: {err}");
}

#[test]
fn notify_refuses_a_program_root_does_not_hold() {
    let env = TestEnv::new();
    let loose = env.path().join("loose");
    fs::write(&loose, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&loose, fs::Permissions::from_mode(0o777)).unwrap();
    for (arg, says) in [
        ("relative/hook", "not an absolute path"),
        (loose.to_str().unwrap(), "can change it"),
        ("/nonexistent/hook", "No such file"),
    ] {
        let (code, out, err) = run(env.cmd().args(["doctor", "--notify", arg]));
        assert_eq!(code, 3, "usage errors of doctor are UNKNOWN: {err}");
        assert_eq!(out, "");
        assert_eq!(err.lines().count(), 2, "{err}");
        assert!(err.contains(says), "{err}");
    }
}

/// contrib/systemd's member watch: the udev rule starts the service on a
/// btrfs member's add and remove events, and the service verifies and runs
/// doctor with flags it takes.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn the_member_watch_rule_starts_a_service_that_verifies() {
    // The service's doctor run needs root.
    if !require_root("the member watch's service") {
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd");
    let rule = fs::read_to_string(src.join("90-btrfs-lab-members.rules")).unwrap();
    let rules: Vec<&str> = rule
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(rules.len(), 1, "{rule}");
    // udev(7): KEY==value matches, KEY+=value assigns, comma separated.
    let pairs: Vec<(&str, &str, &str)> = rules[0]
        .split(", ")
        .map(|p| {
            let (k, op, v) = p
                .split_once("==")
                .map(|(k, v)| (k, "==", v))
                .or_else(|| p.split_once("+=").map(|(k, v)| (k, "+=", v)))
                .unwrap_or_else(|| panic!("not KEY==value or KEY+=value: {p}"));
            assert!(v.starts_with('"') && v.ends_with('"'), "{p}");
            (k, op, &v[1..v.len() - 1])
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("SUBSYSTEM", "==", "block"),
            ("ACTION", "==", "add|remove"),
            ("ENV{ID_FS_TYPE}", "==", "btrfs"),
            (
                "RUN",
                "+=",
                "/usr/bin/systemctl --no-block start btrfs-lab-members.service"
            ),
        ]
    );
    let unit = "btrfs-lab-members.service";
    let text = fs::read_to_string(src.join(unit)).unwrap();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let args: Vec<&str> = exec.split(' ').collect();
    assert_eq!(
        args[..4],
        ["/usr/bin/btrfs-lab", "doctor", "--notify", "journal"]
    );
    assert!(text.lines().any(|l| l == "SuccessExitStatus=1 2"), "{text}");
    let t = tempfile::tempdir().unwrap();
    let bin = crate::common::bin();
    fs::write(
        t.path().join(unit),
        text.replace("/usr/bin/btrfs-lab", bin.to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(t.path().join(unit))
        .output()
        .expect("systemd-analyze (Debian package systemd; scripts/install-deps.sh installs it)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    // Its flags, as doctor takes them, on a tree with no btrfs mounted:
    // nothing to tell, and the textfile written.
    let sysroot = t.path().join("root");
    fs::create_dir_all(sysroot.join("proc/self")).unwrap();
    fs::write(sysroot.join("proc/self/mountinfo"), "").unwrap();
    let prom = t.path().join("btrfs-lab.prom");
    let mut c = Command::new(&bin);
    c.args(&args[1..args.len() - 1])
        .arg(&prom)
        .arg("--sysroot")
        .arg(&sysroot)
        .env("NO_COLOR", "1");
    let (code, out, err) = run(&mut c);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        fs::read_to_string(&prom)
            .unwrap()
            .contains("btrfs_lab_doctor_success 1\n")
    );
}
