use super::*;
use crate::bench::compare::{compare_many, judge};
use crate::bench::testdata::report;

fn db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("history-test")
        .tempdir()
        .unwrap();
    let path = dir.path().join("bench.sqlite");
    (dir, path)
}

const MACHINE: fn() -> Machine = || Machine {
    machine_id: Some("0123456789abcdef0123456789abcdef".into()),
};

#[test]
fn three_runs_and_a_planted_halving_named_with_the_kernel_change() {
    let (_t, path) = db();
    let mut h = History::open(&path, true).unwrap();
    let a = report(&[2000.0, 2040.0, 1980.0], &[900.0, 910.0, 905.0], false);
    let b = report(&[2010.0, 1990.0, 2030.0], &[905.0, 895.0, 900.0], false);
    let mut c = report(&[1000.0, 1010.0, 990.0], &[900.0, 902.0, 898.0], false);
    c.system.kernel = "6.19.0".into();
    let ids: Vec<i64> = [a, b, c]
        .iter()
        .map(|r| h.save(r, &MACHINE()).unwrap())
        .collect();
    let runs = h.runs(None).unwrap();
    assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    let t = trend(&path, None, &runs);
    assert_eq!(t.runs, 3);
    assert_eq!(t.filesystems.len(), 1);
    let fs = &t.filesystems[0];
    // The read halved at the third run, beside the kernel change; the
    // writes and the second run stayed within their noise.
    assert_eq!(
        fs.changes_beyond_noise,
        [format!(
            "SEQ1M Q8T1 read ×0.50 at #{} since #{} (kernel: 6.18 → 6.19.0)",
            ids[2], ids[1]
        )]
    );
    let read = &fs.tests[0];
    assert_eq!(read.points.len(), 3);
    assert!(read.points[0].change.is_none());
    let second = read.points[1].change.as_ref().unwrap();
    assert!(!second.beyond_noise && second.setup_changes.is_empty());
    let third = read.points[2].change.as_ref().unwrap();
    assert!(third.beyond_noise);
    assert!((third.ratio - 0.5).abs() < 0.01, "{}", third.ratio);
    assert_eq!(fs.runs[2].changes, ["kernel: 6.18 → 6.19.0"]);
    assert!(t.summary.contains("1 change beyond"), "{}", t.summary);
    // A run's whole report comes back for --compare.
    let i = h.input(ids[2]).unwrap();
    assert_eq!(i.name, format!("#{}", ids[2]));
    assert_eq!(i.report.system.kernel, "6.19.0");
    assert!(h.input(ids[2] + 100).is_err());
}

#[test]
fn a_version_1_database_is_migrated_with_its_runs() {
    let (_t, path) = db();
    let r = report(&[2000.0, 2100.0], &[900.0, 950.0], true);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0].sql).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO runs (saved_at, machine_id, hostname, kernel, fio_version, \
             btrfs_lab_version, fs_uuid, mount_point, profile, exit_code, report) \
             VALUES (1764806400, NULL, 'h', '6.18', 'fio-3.33', '0.1.0', ?1, '/mnt', 'default', 3, ?2)",
            params![r.target.uuid, serde_json::to_string(&r).unwrap()],
        )
        .unwrap();
        // A row this btrfs-lab cannot read survives the migration.
        conn.execute(
            "INSERT INTO runs (saved_at, hostname, kernel, fio_version, btrfs_lab_version, \
             mount_point, profile, exit_code, report) \
             VALUES (1764806500, 'h', '6.18', 'fio-3.33', '0.0.1', '/mnt', 'default', 0, '{}')",
            [],
        )
        .unwrap();
    }
    let h = History::open(&path, false).unwrap();
    let v: u32 = h
        .conn()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let runs = h.runs(None).unwrap();
    assert_eq!(runs.len(), 2);
    let s = runs[0].setup.as_ref().expect("setup backfilled");
    assert_eq!(s.btrfs_lab_version.as_deref(), Some("0.1.0"));
    assert_eq!(runs[0].figures.len(), 2);
    assert_eq!(runs[0].figures[0].bytes_per_sec, Some(2050.0e6));
    // The flagged write keeps its status and no figure.
    assert_eq!(runs[0].figures[1].status, Status::Flagged);
    assert_eq!(runs[0].figures[1].bytes_per_sec, None);
    assert!(runs[1].setup.is_none() && runs[1].figures.is_empty());
    assert_eq!(runs[0].time, "2025-12-04T00:00:00Z");
}

#[test]
fn a_newer_layout_is_refused_and_left_alone() {
    let (_t, path) = db();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future (x INTEGER);")
            .unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let e = History::open(&path, false).unwrap_err();
    assert!(e.to_string().contains("made by a newer btrfs-lab"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_missing_database_is_not_created_when_only_read() {
    let (_t, path) = db();
    let e = History::open(&path, false).unwrap_err();
    assert!(e.to_string().contains("there is no bench history"), "{e}");
    assert!(!path.exists());
}

#[test]
fn a_link_in_place_of_the_database_is_refused() {
    let (t, path) = db();
    let target = t.path().join("elsewhere.sqlite");
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    assert!(History::open(&path, true).is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"");
}

#[test]
fn the_noise_rule() {
    let f = |median: f64, min: f64, max: f64, rounds: u32| Figure {
        median,
        min,
        max,
        rounds,
    };
    // Overlapping rounds are never beyond the noise, whatever the medians.
    assert!(!judge(&f(100.0, 60.0, 140.0, 3), &f(70.0, 65.0, 139.0, 3)).beyond);
    // Apart, but within the larger spread (40%).
    let v = judge(&f(100.0, 80.0, 120.0, 3), &f(75.0, 74.0, 76.0, 3));
    assert!(!v.beyond && (v.noise - 0.4).abs() < 1e-9);
    // Apart and beyond it.
    assert!(judge(&f(100.0, 98.0, 102.0, 3), &f(50.0, 49.0, 51.0, 3)).beyond);
    // One round each: MIN_NOISE alone.
    let v = judge(&f(100.0, 100.0, 100.0, 1), &f(96.0, 96.0, 96.0, 1));
    assert!(!v.beyond && v.noise == compare::MIN_NOISE);
    assert!(judge(&f(100.0, 100.0, 100.0, 1), &f(90.0, 90.0, 90.0, 1)).beyond);
}

#[test]
fn compare_many_judges_each_report_against_the_first() {
    let a = report(&[2000.0, 2040.0, 1980.0], &[900.0, 910.0, 905.0], false);
    let b = report(&[2010.0, 1990.0, 2030.0], &[905.0, 895.0, 900.0], true);
    let mut c = report(&[1000.0, 1010.0, 990.0], &[1800.0, 1810.0, 1790.0], false);
    c.system.kernel = "6.19.0".into();
    c.target.mount_options = vec!["rw".into(), "rw".into(), "noatime".into()];
    let input = |name: &str, r| Input {
        name: name.into(),
        history_id: None,
        time: None,
        version: None,
        report: r,
    };
    let cmp = compare_many(&[input("a", a), input("b", b), input("c", c)]);
    assert_eq!(cmp.reports.len(), 3);
    assert!(cmp.reports[1].changes.is_empty());
    assert_eq!(
        cmp.reports[2].changes,
        ["kernel: 6.18 → 6.19.0", "mount options: +rw +noatime"]
    );
    assert_eq!(cmp.reports[2].setup.mount_options, ["rw", "noatime"]);
    let read = &cmp.rows[0];
    assert_eq!(read.figures.len(), 3);
    assert_eq!(read.figures[0].ratio, None);
    assert_eq!(read.figures[1].beyond_noise, Some(false));
    assert_eq!(read.figures[2].beyond_noise, Some(true));
    let write = &cmp.rows[1];
    // b's write is flagged: no figure, no verdict, said why.
    assert_eq!(write.figures[1].note.as_deref(), Some("flagged"));
    assert_eq!(write.figures[1].beyond_noise, None);
    assert_eq!(write.figures[2].beyond_noise, Some(true));
    assert!(write.figures[2].ratio.unwrap() > 1.9);
    // The two-report fields stay as they were.
    assert_eq!((cmp.a.as_str(), cmp.b.as_str()), ("a", "b"));
    assert_eq!(write.note.as_deref(), Some("B: flagged"));
}

/// `--db` when given, else DIR/bench.sqlite of `--state-dir DIR`, else the
/// default state directory's; always absolute.
#[test]
fn the_database_is_in_the_state_directory_and_absolute() {
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        db_path(None, None),
        Path::new("/var/lib/btrfs-lab/bench.sqlite")
    );
    assert_eq!(
        db_path(None, Some(Path::new("/s"))),
        Path::new("/s/bench.sqlite")
    );
    assert_eq!(
        db_path(None, Some(Path::new("st"))),
        cwd.join("st/bench.sqlite")
    );
    assert_eq!(
        db_path(Some(Path::new("x.sqlite")), Some(Path::new("/s"))),
        cwd.join("x.sqlite")
    );
}
