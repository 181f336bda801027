//! `bench` history on a real loop-device btrfs: three real runs stored in
//! the SQLite database, a set-up change (a remount) named, a planted 2×
//! regression named with the (planted) kernel change beside it, `--compare`
//! over history ids and a file, `--no-history` and `--dry-run`.

use std::fs;
use std::path::Path;

use btrfs_lab::bench::compare::Comparison;
use btrfs_lab::bench::history::HistoryReport;
use btrfs_lab::bench::plan::BenchPlan;
use btrfs_lab::bench::report::BenchReport;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, remount, require_root, run, typed};

const QUICK: [&str; 8] = [
    "--file-size",
    "64M",
    "--duration",
    "1",
    "--rounds",
    "2",
    "--tests",
    "SEQ1M-Q8T1",
];

fn bench(env: &TestEnv, dir: &Path, extra: &[&str]) -> BenchReport {
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["bench", "--json", "--yes"])
        .args(QUICK)
        .args(extra)
        .arg(dir));
    assert!(code == 0 || code == 3, "bench failed ({code}): {stderr}");
    typed(&stdout)
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn three_runs_stored_and_a_planted_regression_named_beside_the_kernel_change() {
    if !require_root("bench history") {
        return;
    }
    let env = TestEnv::new();
    let sb = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 256 << 20,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    let mnt = sb.mount_point().to_path_buf();
    let db = env.store().dir().join("bench.sqlite");

    // --dry-run names the database and saves nothing.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["bench", "--json", "--dry-run"])
        .args(QUICK)
        .arg(&mnt));
    assert_eq!(code, 0, "{stderr}");
    let plan: BenchPlan = typed(&stdout);
    assert!(
        plan.steps
            .iter()
            .any(|s| s.contains("save the run in the bench history") && s.contains("bench.sqlite")),
        "{plan:#?}"
    );
    assert!(!db.exists(), "--dry-run made the database");

    // Three real runs, the second after a remount (a real set-up change).
    let r1 = bench(&env, &mnt, &[]);
    remount(&mnt, "noatime");
    let r2 = bench(&env, &mnt, &[]);
    let r3 = bench(&env, &mnt, &[]);
    let ids: Vec<i64> = [&r1, &r2, &r3]
        .iter()
        .map(|r| {
            let h = r.history.as_ref().expect("saved in the history");
            assert_eq!(h.db, db);
            h.id
        })
        .collect();
    assert_eq!(ids, [1, 2, 3]);
    // --no-history: not saved.
    let r4 = bench(&env, &mnt, &["--no-history"]);
    assert!(r4.history.is_none());

    // Planted, so the outcome does not depend on this machine's noise: run
    // 2's rounds made tight around its median, run 3's read exactly half
    // of it, and run 3's kernel renamed (one machine has one kernel).
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "UPDATE figures SET bytes_per_sec_min = bytes_per_sec * 0.99, \
             bytes_per_sec_max = bytes_per_sec * 1.01 \
             WHERE run_id = 2 AND test = 'SEQ1M Q8T1' AND direction = 'read'",
            [],
        )
        .unwrap();
        conn.execute(
            "UPDATE figures SET \
             bytes_per_sec = (SELECT bytes_per_sec / 2 FROM figures WHERE run_id = 2 AND test = 'SEQ1M Q8T1' AND direction = 'read'), \
             bytes_per_sec_min = (SELECT bytes_per_sec / 2 * 0.99 FROM figures WHERE run_id = 2 AND test = 'SEQ1M Q8T1' AND direction = 'read'), \
             bytes_per_sec_max = (SELECT bytes_per_sec / 2 * 1.01 FROM figures WHERE run_id = 2 AND test = 'SEQ1M Q8T1' AND direction = 'read') \
             WHERE run_id = 3 AND test = 'SEQ1M Q8T1' AND direction = 'read'",
            [],
        )
        .unwrap();
        conn.execute(
            "UPDATE runs SET kernel = '7.3.0-planted', setup = json_set(setup, '$.kernel', '7.3.0-planted'), \
             report = json_set(report, '$.system.kernel', '7.3.0-planted') WHERE id = 3",
            [],
        )
        .unwrap();
    }

    let (code, stdout, stderr) = run(env.cmd().args(["bench", "--json", "--history"]).arg(&mnt));
    assert_eq!(code, 0, "{stderr}");
    let h: HistoryReport = typed(&stdout);
    assert_eq!(h.runs, 3, "{h:#?}");
    assert_eq!(h.filesystems.len(), 1);
    let fs_h = &h.filesystems[0];
    assert_eq!(fs_h.fs_uuid, r1.target.uuid);
    // The remount is named between runs 1 and 2.
    assert!(
        fs_h.runs[1]
            .changes
            .iter()
            .any(|c| c.starts_with("mount options:") && c.contains("+noatime")),
        "{:#?}",
        fs_h.runs[1]
    );
    let kernel = &r1.system.kernel;
    assert_eq!(
        fs_h.runs[2].changes,
        [format!("kernel: {kernel} → 7.3.0-planted")]
    );
    let read = fs_h
        .tests
        .iter()
        .find(|t| t.test == "SEQ1M Q8T1" && t.direction.as_str() == "read")
        .unwrap();
    let c = read.points[2].change.as_ref().expect("compared with run 2");
    assert_eq!(c.since_run_id, 2);
    assert!(c.beyond_noise, "{c:#?}");
    assert!((c.ratio - 0.5).abs() < 1e-6, "{}", c.ratio);
    assert_eq!(
        c.setup_changes,
        [format!("kernel: {kernel} → 7.3.0-planted")]
    );
    assert!(
        fs_h.changes_beyond_noise.contains(&format!(
            "SEQ1M Q8T1 read ×0.50 at #3 since #2 (kernel: {kernel} → 7.3.0-planted)"
        )),
        "{:#?}",
        fs_h.changes_beyond_noise
    );
    // The text says the same.
    let (code, text, _) = run(env.cmd().args(["bench", "--history"]));
    assert_eq!(code, 0);
    // Filled to 80 columns: the words, wherever the lines break.
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(&format!(
            "×0.50 beyond the noise (5%): kernel: {kernel} → 7.3.0-planted"
        )),
        "{text}"
    );

    // --compare over history ids and a saved file: run 3 against run 2.
    let file = env.path().join("r1.json");
    fs::write(&file, serde_json::to_string(&r1).unwrap()).unwrap();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["bench", "--json", "--compare", "2", "#3"])
        .arg(&file));
    assert_eq!(code, 0, "{stderr}");
    let cmp: Comparison = typed(&stdout);
    assert_eq!(cmp.reports.len(), 3);
    assert_eq!(cmp.reports[0].history_id, Some(2));
    assert_eq!(cmp.reports[2].history_id, None);
    assert!(
        cmp.reports[1]
            .changes
            .contains(&format!("kernel: {kernel} → 7.3.0-planted"))
    );
    // --compare reads each run's whole stored report (its own figures:
    // only the trend's figures were planted).
    assert_eq!(cmp.rows[0].figures.len(), 3);
    assert_eq!(
        cmp.rows[0].figures[1].bytes_per_sec,
        r3.results[0].bytes_per_sec
    );
    // An id that is not there, and a database that is not there.
    let (code, _, stderr) = run(env.cmd().args(["bench", "--compare", "2", "99"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("has no run #99"), "{stderr}");
    let (code, _, stderr) = run(env
        .cmd()
        .args(["bench", "--history", "--db"])
        .arg(env.path().join("none.sqlite")));
    assert_eq!(code, 1);
    assert!(stderr.contains("there is no bench history"), "{stderr}");
}

/// `--state-dir DIR` (before or after the subcommand, relative or not):
/// the history is DIR/bench.sqlite, named by its absolute path; `--db`
/// wins; the global help says the same (issue 52 item 11: the help gave
/// the state directory two defaults, and the database not at all).
#[test]
fn the_history_lives_in_the_state_directory_given() {
    let env = TestEnv::new();
    let cwd = env.path().join("cwd");
    fs::create_dir(&cwd).unwrap();
    let bare = || {
        let mut c = std::process::Command::new(crate::common::bin());
        c.current_dir(&cwd)
            .env_remove("BTRFS_LAB_STATE_DIR")
            .env("NO_COLOR", "1");
        c
    };
    let db = cwd.join("st").join("bench.sqlite");
    // Nothing there yet: the error names where it looked.
    let (code, _, stderr) = run(bare().args(["--state-dir", "st", "bench", "--history"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("there is no bench history at {}", db.display())),
        "{stderr}"
    );
    // A history there is the one read, the option after the subcommand too.
    fs::create_dir(cwd.join("st")).unwrap();
    drop(btrfs_lab::bench::history::History::open(&db, true).unwrap());
    let (code, stdout, stderr) = run(bare().args(["bench", "--history", "--state-dir", "st"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("bench history  {}\n", db.display())),
        "{stdout}"
    );
    let (code, stdout, _) = run(bare().args(["--json", "--state-dir", "st", "bench", "--history"]));
    assert_eq!(code, 0);
    let h: HistoryReport = typed(&stdout);
    assert_eq!(h.db, db);
    // --db wins over the state directory.
    let (code, _, stderr) = run(bare().args([
        "--state-dir",
        "st",
        "bench",
        "--history",
        "--db",
        "elsewhere.sqlite",
    ]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&cwd.join("elsewhere.sqlite").display().to_string()),
        "{stderr}"
    );
    // One default for the state directory, and the database under it.
    let (_, help, _) = run(bare().arg("--help"));
    let text = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(
            "State directory [default: /var/lib/btrfs-lab]: the bench history in DIR/bench.sqlite"
        ),
        "{text}"
    );
}
