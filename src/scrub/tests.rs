use std::path::Path;

use super::log::{LogEvent, damaged_from, parse_log};
use super::plan::{DeviceInput, plan_from};
use super::*;
use crate::error::ErrorKind;
use crate::model::exit;

#[test]
fn a_state_file_that_is_not_a_bounded_regular_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let store = StateStore::new(t.path());
    assert!(
        store.load("abc").unwrap().is_none(),
        "no state directory yet"
    );
    std::fs::create_dir_all(store.file("abc").parent().unwrap()).unwrap();
    assert!(store.load("abc").unwrap().is_none(), "none yet");
    let made = std::process::Command::new("mkfifo")
        .arg(store.file("abc"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let e = store.load("abc").unwrap_err();
    assert!(e.message().contains("it is a FIFO"), "{}", e.message());
    std::os::unix::fs::symlink("/dev/zero", store.file("def")).unwrap();
    assert!(store.load("def").is_err());
    std::fs::write(store.file("big"), vec![b' '; (1 << 20) + 1]).unwrap();
    let e = store.load("big").unwrap_err();
    assert!(e.message().contains("larger than"), "{}", e.message());
}

fn dev(devid: u64, path: &str, used: u64) -> DeviceInput {
    DeviceInput {
        devid,
        path: path.to_owned(),
        allocated: used * 2,
        used: Some(used),
        speed_max_file: None,
        speed_max_now: None,
    }
}

fn saved(finished: bool, last: &[(u64, u64, bool)]) -> SavedScrub {
    SavedScrub {
        fsid: "f".into(),
        started_at: 1,
        saved_at: 2,
        finished,
        readonly: false,
        duration_seconds: 1.0,
        runs: 1,
        devices: last
            .iter()
            .map(|&(devid, last_physical, finished)| DeviceScrub {
                devid,
                last_physical,
                finished,
                bytes_to_read: 100,
                ..DeviceScrub::default()
            })
            .collect(),
    }
}

#[test]
fn a_new_scrub_starts_every_present_device_at_zero() {
    let devs = [dev(1, "/dev/a", 100), dev(2, "", 100), dev(3, "/dev/c", 50)];
    let p = plan_from(Path::new("/m"), "f", &devs, None, Request::default()).unwrap();
    assert_eq!(
        p.devices.iter().map(|d| d.devid).collect::<Vec<_>>(),
        [1, 3]
    );
    assert!(p.devices.iter().all(|d| d.start == 0));
    assert_eq!(p.missing, [2]);
    assert_eq!(p.bytes_left(), 150);
}

#[test]
fn a_resume_starts_at_last_physical_and_skips_finished_devices() {
    let devs = [dev(1, "/dev/a", 100), dev(2, "/dev/b", 100)];
    let s = saved(false, &[(1, 40, false), (2, 100, true)]);
    let req = Request {
        resume: true,
        ..Request::default()
    };
    let p = plan_from(Path::new("/m"), "f", &devs, Some(&s), req).unwrap();
    assert!(p.resume);
    assert_eq!(p.devices.len(), 1);
    assert_eq!((p.devices[0].devid, p.devices[0].start), (1, 40));
    assert_eq!(p.bytes_left(), 60);
}

#[test]
fn nothing_to_resume_is_refused() {
    let devs = [dev(1, "/dev/a", 100)];
    let req = Request {
        resume: true,
        ..Request::default()
    };
    for s in [None, Some(saved(true, &[(1, 100, true)]))] {
        let e = plan_from(Path::new("/m"), "f", &devs, s.as_ref(), req).unwrap_err();
        assert!(
            e.message().contains("no interrupted scrub"),
            "{}",
            e.message()
        );
    }
}

#[test]
fn state_file_round_trips_and_garbage_is_a_parse_error() {
    let s = saved(false, &[(1, 40, false)]);
    let text = serde_json::to_string(&s).unwrap();
    assert_eq!(SavedScrub::parse(&text, Path::new("x")).unwrap(), s);
    let e = SavedScrub::parse("{", Path::new("x")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Parse);
}

#[test]
fn outcome_decides_the_exit_status() {
    let mut d = DeviceScrub {
        devid: 1,
        csum_errors: 2,
        corrected: 2,
        finished: true,
        ..DeviceScrub::default()
    };
    let mut r = ScrubReport {
        mount_point: "/m".into(),
        fsid: "f".into(),
        outcome: Outcome::Finished,
        resumed: false,
        readonly: false,
        started_at: 0,
        duration_seconds: 1.0,
        devices: vec![d.clone()],
        totals: Totals::of(std::slice::from_ref(&d)),
        scrub_totals: Totals::of(std::slice::from_ref(&d)),
        scrub_duration_seconds: 1.0,
        runs: 1,
        missing: vec![],
        suspend_held_off: false,
        damaged_files: vec![],
        stopped_by: None,
    };
    assert_eq!(r.exit_code(), exit::SCRUB_CORRECTED.code);
    d.uncorrectable = 1;
    r.totals = Totals::of(std::slice::from_ref(&d));
    assert_eq!(r.exit_code(), exit::SCRUB_UNCORRECTABLE.code);
    r.outcome = Outcome::Interrupted;
    assert_eq!(r.exit_code(), exit::INTERRUPTED.code);
    r.devices.clear();
    r.totals = Totals::default();
    r.outcome = Outcome::Finished;
    assert_eq!(r.exit_code(), exit::OK.code);
    let s = saved(false, &[(1, 40, false)]);
    let m = metrics(Path::new("/m"), "f", Some(&s), true);
    assert!(
        m.contains("btrfs_lab_scrub_running{mountpoint=\"/m\",uuid=\"f\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("btrfs_lab_scrub_last_finished{mountpoint=\"/m\",uuid=\"f\"} 0\n"),
        "{m}"
    );
    let first = metrics(Path::new("/m"), "f", None, true);
    assert_eq!(
        first.lines().filter(|l| !l.starts_with('#')).count(),
        1,
        "{first}"
    );
}

/// Logged by Linux 6.18 during `scrub::single_corruption_is_uncorrectable`
/// (a 16 MiB file on a single-profile sandbox, blocks overwritten on the
/// loop device), and the 6.1 wording (commas between the fields).
const LOG: [&str; 6] = [
    "scrub: checksum error at logical 84148224 on dev /dev/loop1, physical 146210816 root 5 inode 257 offset 65536 length 4096 links 1 (path: file)",
    "scrub: unable to fixup (regular) error at logical 84148224 on dev /dev/loop1 physical 146210816",
    "scrub: checksum error at logical 84082688 on dev /dev/loop1, physical 146145280 root 5 inode 257 offset 0 length 4096 links 1 (path: file)",
    "checksum error at logical 99 on dev /dev/loop1, physical 7, root 256, inode 300, offset 8192, length 4096, links 1 (path: dir/a b)",
    "unable to fixup (regular) error at logical 99 on dev /dev/loop1",
    "scrub: checksum error at logical 5 on dev /dev/loop12, physical 5 root 5 inode 9 offset 0 length 4096 links 1 (path: other-fs)",
];

#[test]
fn damaged_files_are_those_the_kernel_could_not_fix_up() {
    let devs = vec!["/dev/loop1".to_owned()];
    let events: Vec<LogEvent> = LOG.iter().filter_map(|m| parse_log(m, &devs)).collect();
    assert_eq!(events.len(), 5, "the other filesystem's line is not ours");
    let v = damaged_from(&events);
    assert_eq!(
        v,
        [
            DamagedFile {
                subvolume: 5,
                inode: 257,
                path: "file".into(),
                offsets: vec![65536],
                errors: 1,
            },
            DamagedFile {
                subvolume: 256,
                inode: 300,
                path: "dir/a b".into(),
                offsets: vec![8192],
                errors: 1,
            },
        ],
        "the block at 0 was named but fixed up (no unable-to-fixup line)"
    );
    assert!(parse_log("BTRFS info: nothing here", &devs).is_none());
    assert!(parse_log("error at logical x on dev /dev/loop1,", &devs).is_none());
}

#[test]
fn the_saved_state_says_when_it_started_ended_and_how_long_it_took() {
    let mut s = saved(true, &[(1, 100, true)]);
    // date -u -d @1796648401: 2026-12-07T13:00:01Z.
    s.started_at = 1_796_648_401;
    s.saved_at = 1_796_648_700;
    s.duration_seconds = 299.0;
    assert_eq!(
        s.when(),
        "started 2026-12-07T13:00:01Z, ended 2026-12-07T13:05:00Z, took 4m59s"
    );
    s.finished = false;
    s.runs = 2;
    assert_eq!(
        s.when(),
        "started 2026-12-07T13:00:01Z, stopped 2026-12-07T13:05:00Z, took 4m59s in 2 runs"
    );
}

#[test]
fn a_resumed_run_adds_to_the_earlier_runs_counters() {
    let devs = [dev(1, "/dev/a", 100), dev(2, "/dev/b", 100)];
    let mut s = saved(false, &[(1, 40, false), (2, 100, true)]);
    s.devices[0].bytes_scrubbed = 40;
    s.devices[0].corrected = 1;
    s.devices[1].bytes_scrubbed = 100;
    s.duration_seconds = 4.0;
    let req = Request {
        resume: true,
        ..Request::default()
    };
    let p = plan_from(Path::new("/m"), "f", &devs, Some(&s), req).unwrap();
    let run = [DeviceScrub {
        devid: 1,
        bytes_to_read: 100,
        bytes_scrubbed: 60,
        last_physical: 100,
        finished: true,
        ..DeviceScrub::default()
    }];
    let whole = super::exec::saved_state(&p, Some(&s), s.devices.clone(), &run, 9, 2.0);
    let t = Totals::of(&whole.devices);
    assert_eq!(
        (t.bytes_scrubbed, t.bytes_to_read, t.corrected),
        (200, 200, 1)
    );
    assert!(whole.finished);
    assert_eq!((whole.started_at, whole.runs), (1, 2));
    assert_eq!(whole.duration_seconds, 6.0);
    // A new scrub is one run, whatever was saved before.
    let p = plan_from(Path::new("/m"), "f", &devs, Some(&s), Request::default()).unwrap();
    let whole = super::exec::saved_state(&p, Some(&s), Vec::new(), &run, 9, 2.0);
    assert_eq!((whole.started_at, whole.runs), (9, 1));
}

#[test]
fn the_suspend_note_is_one_line_said_once_per_reason() {
    // The longest reason the inhibitor gives.
    let note = super::exec::suspend_note("systemd-inhibit failed (is systemd-logind running?)");
    assert!(note.len() + "btrfs-lab: note: ".len() <= 150, "{note}");
    assert!(!note.contains('\n'));
    let t = tempfile::tempdir().unwrap();
    let store = StateStore::new(t.path());
    assert!(store.first_time(&note), "the first run says it");
    assert!(!store.first_time(&note), "the next runs do not");
    assert!(store.first_time("another reason"), "another reason is said");
    assert!(!store.first_time(&note));
}

#[test]
fn one_device_is_planned_alone_and_a_missing_or_unknown_one_refused() {
    let devs = [dev(1, "/dev/a", 100), dev(2, "", 100), dev(3, "/dev/c", 50)];
    let req = |id| Request {
        device: Some(id),
        ..Request::default()
    };
    let p = plan_from(Path::new("/m"), "f", &devs, None, req(3)).unwrap();
    assert_eq!(p.devices.iter().map(|d| d.devid).collect::<Vec<_>>(), [3]);
    assert!(p.missing.is_empty(), "{:?}", p.missing);
    assert_eq!(p.bytes_left(), 50);
    let e = plan_from(Path::new("/m"), "f", &devs, None, req(2)).unwrap_err();
    assert!(
        e.message().contains("device 2 of /m is missing"),
        "{}",
        e.message()
    );
    let e = plan_from(Path::new("/m"), "f", &devs, None, req(9)).unwrap_err();
    assert!(
        e.message().contains("no device 9 (its devids: 1, 2, 3)"),
        "{}",
        e.message()
    );
}
