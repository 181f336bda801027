//! `--quiet` is silent: for every subcommand, a successful run prints
//! nothing on stderr (errors only), and stdout holds only the report (with
//! `--json`) or nothing. Run on a real sandbox btrfs (loop devices this
//! test makes), with the environment overrides root ignores set, so that
//! every "ignored as root" note the library could print is provoked.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::common::{TestEnv, require_root, run};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// One run with `--quiet`: what it printed, for the verdict at the end.
struct Quiet<'a> {
    env: &'a TestEnv,
    /// Every run that said something it should not have.
    noisy: Vec<String>,
    /// How many runs were checked.
    runs: usize,
}

impl<'a> Quiet<'a> {
    fn cmd(&self) -> Command {
        let mut c = self.env.cmd();
        // Root ignores these, each with a note: --quiet must hide the notes.
        c.env("BTRFS_LAB_SYSROOT", self.env.path().join("no-such-sysroot"))
            .env("BTRFS_LAB_STATE_DIR", self.env.path().join("no-such-state"))
            .env(
                "BTRFS_LAB_SANDBOX_ROOT",
                self.env.path().join("no-such-root"),
            )
            .arg("--quiet");
        c
    }

    /// Runs `args` with `--quiet`; the exit status must be one of `codes`
    /// (a verdict's documented status), stderr empty, and stdout empty
    /// (`--json` absent) or one JSON document (`--json` given).
    fn check(&mut self, args: &[&str], codes: &[i32]) {
        let json = args.contains(&"--json");
        let (code, stdout, stderr) = run(self.cmd().args(args));
        self.runs += 1;
        assert!(
            codes.contains(&code),
            "{args:?} --quiet failed ({code}): {stderr}"
        );
        if !stderr.is_empty() {
            self.noisy
                .push(format!("{args:?}: stderr not empty:\n{stderr}"));
        }
        if json {
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
                panic!("{args:?}: stdout is not one JSON document ({e}): {stdout}")
            });
            assert!(v.is_object(), "{args:?}: {stdout}");
        } else if !stdout.is_empty() {
            self.noisy
                .push(format!("{args:?}: stdout not empty:\n{stdout}"));
        }
    }
}

fn write_file(path: &Path, len: u64) {
    let mut f = fs::File::create_new(path).unwrap();
    let block: Vec<u8> = (0..MIB).map(|i| (i * 7 % 251) as u8).collect();
    for _ in 0..len / MIB {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn every_subcommand_is_silent_with_quiet() {
    if !require_root("--quiet on every subcommand") {
        return;
    }
    let env = TestEnv::new();
    let mut q = Quiet {
        env: &env,
        noisy: Vec::new(),
        runs: 0,
    };
    let sbx_dir = env.path().join("sbx");
    let sbx = sbx_dir.to_str().unwrap();
    let mnt_path = sbx_dir.join("mnt");
    let mnt = mnt_path.to_str().unwrap();
    let spare = env.spare_device("spare", GIB);
    let spare = spare.to_str().unwrap();

    // sandbox: plan, up, list (text and JSON).
    let up = ["sandbox", "up", "--name", "quiet", "--dir", sbx];
    q.check(
        &[&up[..], &["--device-size", "1G", "--dry-run"]].concat(),
        &[0],
    );
    q.check(&[&up[..], &["--device-size", "1G"]].concat(), &[0]);
    q.check(&["sandbox", "list"], &[0]);
    q.check(&["sandbox", "list", "--json"], &[0]);

    // The space readers, text and JSON.
    for cmd in ["df", "usage", "show"] {
        q.check(&[cmd, mnt], &[0]);
        q.check(&[cmd, "--json", mnt], &[0]);
    }

    // device add, then a conversion over both devices.
    q.check(&["device", "add", "--dry-run", mnt, spare], &[0]);
    q.check(&["device", "add", "--yes", mnt, spare], &[0]);
    q.check(
        &[
            "convert",
            "--yes",
            mnt,
            "--data",
            "raid0",
            "--metadata",
            "raid1",
        ],
        &[0],
    );
    q.check(&["convert", "--status", mnt], &[0]);

    // links on this machine (no NVMe here: exit 0 either way).
    q.check(&["links"], &[0]);

    // nocow: set up, audit, migrate.
    let vm = mnt_path.join("vm");
    q.check(&["nocow", "--yes", vm.to_str().unwrap()], &[0]);
    q.check(&["nocow", "--check", vm.to_str().unwrap()], &[0]);
    let db = mnt_path.join("db");
    fs::create_dir(&db).unwrap();
    write_file(&db.join("table"), 2 * MIB);
    q.check(&["nocow", "--migrate", "--yes", db.to_str().unwrap()], &[0]);

    // probe-dio: a verdict's status (0 direct, 3 buffered-fallback,
    // 4 profile-forced, 5 inconclusive) is a success.
    q.check(&["probe-dio", "--file-size", "32M", mnt], &[0, 3, 4, 5]);

    // read-test on a file of its own.
    let model = mnt_path.join("model.bin");
    write_file(&model, 32 * MIB);
    q.check(
        &[
            "read-test",
            "--rounds",
            "1",
            "--methods",
            "direct,buffered",
            model.to_str().unwrap(),
        ],
        &[0],
    );

    // bench: the suite (3: a figure flagged), the sustained write, small files.
    q.check(
        &[
            "bench",
            "--file-size",
            "64M",
            "--rounds",
            "1",
            "--duration",
            "1",
            "--tests",
            "SEQ1M-Q8T1",
            mnt,
        ],
        &[0, 3],
    );
    q.check(&["bench", "--sustained", "256M", "--yes", mnt], &[0, 3]);
    q.check(
        &[
            "bench",
            "--small-files",
            "--files",
            "300",
            "--threads",
            "1",
            mnt,
        ],
        &[0, 3],
    );

    // doctor: 0-3 are its verdicts (OK, WARNING, CRITICAL, UNKNOWN).
    q.check(&["doctor", mnt], &[0, 1, 2, 3]);
    q.check(&["doctor", "--json", mnt], &[0, 1, 2, 3]);

    // demo: its own sandbox, made and removed.
    q.check(&["demo", "--file-size", "16M", "--rounds", "1"], &[0]);

    // Text generators: with --quiet nothing, with --json their document.
    q.check(&["completions", "bash"], &[0]);
    q.check(&["man", "df"], &[0]);

    // And away: down, by name.
    q.check(&["sandbox", "down", "--dry-run", "quiet"], &[0]);
    q.check(&["sandbox", "down", "--yes", "quiet"], &[0]);
    q.check(&["sandbox", "list"], &[0]);

    assert!(
        q.noisy.is_empty(),
        "{} of {} --quiet runs were not silent:\n{}",
        q.noisy.len(),
        q.runs,
        q.noisy.join("\n")
    );
    assert!(
        !mnt_path.join("vm").exists(),
        "the sandbox is still mounted at {mnt}"
    );
}
