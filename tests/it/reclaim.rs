//! `reclaim` on real sandboxes: a RAID1 filled until ENOSPC, then
//! fragmented (most files deleted, every data chunk keeping some data, no
//! unallocated space left): the plan changes nothing, the run gives the
//! space back and every file left reads back byte for byte; interrupted
//! between steps it stops with the documented status and the same command
//! goes on from where it stopped.

use std::fs;
use std::io::Write;
use std::path::Path;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::reclaim::{Goal, ReclaimOutcome, ReclaimRecord, ReclaimResult};
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, require_root, run, typed_lines};

const MIB: usize = 1 << 20;

/// The bytes of test file `seed` (16 MiB): what it must read back as.
fn content(seed: u32) -> Vec<u8> {
    (0..16 * MIB as u32)
        .map(|i| ((i ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Writes file `seed`; the error of a full filesystem is returned.
fn write(m: &Path, seed: u32) -> std::io::Result<()> {
    let mut f = fs::File::create(m.join(format!("f{seed}")))?;
    f.write_all(&content(seed))?;
    f.sync_all()
}

/// Fills `m` with 16 MiB files until ENOSPC, then deletes them so each
/// data chunk keeps some data: of the first half of the files one in
/// `first` stays, of the second half one in `second`. Returns the files
/// kept.
pub(crate) fn fill_and_fragment(m: &Path, first: u32, second: u32) -> Vec<u32> {
    let mut n = 0u32;
    let err = loop {
        match write(m, n) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 400, "a 2 × 1 GiB RAID1 took more than 6 GiB");
    };
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "the fill ends with ENOSPC: {err}"
    );
    let _ = fs::remove_file(m.join(format!("f{n}")));
    let mut kept = Vec::new();
    for i in 0..n {
        let every = if i < n / 2 { first } else { second };
        if i % every == 0 {
            kept.push(i);
        } else {
            fs::remove_file(m.join(format!("f{i}"))).unwrap();
        }
    }
    sync(m);
    kept
}

fn sync(m: &Path) {
    let st = std::process::Command::new("btrfs")
        .args(["filesystem", "sync"])
        .arg(m)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Every kept file reads back as written.
fn intact(m: &Path, kept: &[u32]) {
    for &i in kept {
        let got = fs::read(m.join(format!("f{i}"))).unwrap();
        assert!(got == content(i), "f{i} changed");
    }
}

/// Unallocated bytes of each device, from the kernel.
fn unallocated(m: &Path) -> Vec<u64> {
    btrfs_lab::sys::kernel::btrfs::devices(m)
        .unwrap()
        .iter()
        .map(|d| d.total_bytes - d.bytes_used)
        .collect()
}

fn no_balance(m: &Path) {
    assert_eq!(
        btrfs_lab::sys::kernel::btrfs::balance_status(m).unwrap(),
        None,
        "no balance is left behind"
    );
}

fn result_of(records: &[ReclaimRecord]) -> ReclaimResult {
    match records.last() {
        Some(ReclaimRecord::Result { result }) => result.clone(),
        other => panic!("the last record is not the result: {other:?}"),
    }
}

pub(crate) fn raid1(env: &TestEnv) -> btrfs_lab::sandbox::Sandbox {
    env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    })
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn reclaim_gives_a_fragmented_filesystem_room_for_metadata_and_data_stays_intact() {
    if !require_root("reclaim on a fragmented filesystem") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1(&env);
    let m = sbx.mount_point().to_path_buf();
    let kept = fill_and_fragment(&m, 4, 4);
    let before = unallocated(&m);

    // The plan: steps with what they free, and nothing changed.
    let (code, out, err) = run(env.cmd().args(["--json", "reclaim", "--dry-run"]).arg(&m));
    assert_eq!(code, 0, "{err}");
    let records: Vec<ReclaimRecord> = typed_lines(&out);
    let plan = match records.as_slice() {
        [ReclaimRecord::Plan { plan }] => plan.clone(),
        other => panic!("--dry-run --json prints the plan only: {other:?}"),
    };
    let Goal::MetadataChunk {
        devices,
        bytes_per_device,
        profile,
    } = plan.goal.clone()
    else {
        panic!("the default goal is a metadata chunk: {:?}", plan.goal);
    };
    assert_eq!((profile, devices), (Profile::Raid1, 2));
    assert!(
        before.iter().filter(|&&u| u >= bytes_per_device).count() < 2,
        "the fill left no room for a metadata chunk: {before:?}, {bytes_per_device}"
    );
    assert!(!plan.goal_reached && !plan.steps.is_empty(), "{plan:?}");
    assert!(
        plan.steps
            .iter()
            .all(|s| s.command[..3] == ["btrfs", "balance", "start"])
    );
    assert!(
        plan.steps
            .iter()
            .all(|s| s.command[3].starts_with("-dusage=")),
        "metadata is never balanced unless asked: {plan:?}"
    );
    assert_eq!(unallocated(&m), before, "--dry-run changed nothing");
    let (code, text, err) = run(env.cmd().args(["reclaim", "--dry-run"]).arg(&m));
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("btrfs balance start -dusage="), "{text}");
    assert!(text.contains("(dry run: nothing was done)"), "{text}");

    // The run: the goal reached, the kernel agrees, every file intact.
    let (code, out, err) = run(env.cmd().args(["--json", "reclaim", "--yes"]).arg(&m));
    assert_eq!(code, 0, "{err}\n{out}");
    let records: Vec<ReclaimRecord> = typed_lines(&out);
    assert!(matches!(records.first(), Some(ReclaimRecord::Plan { .. })));
    assert!(
        records
            .iter()
            .any(|r| matches!(r, ReclaimRecord::Step { .. })),
        "{records:?}"
    );
    let result = result_of(&records);
    assert_eq!(result.outcome, ReclaimOutcome::Reached, "{result:?}");
    let after = unallocated(&m);
    assert!(
        after.iter().filter(|&&u| u >= bytes_per_device).count() >= 2,
        "{after:?}"
    );
    assert_eq!(result.unallocated_after, after.iter().sum::<u64>());
    assert!(result.unallocated_after > result.unallocated_before);
    let run_steps: Vec<_> = result.steps.iter().filter(|s| !s.skipped).collect();
    assert!(!run_steps.is_empty() && run_steps.iter().any(|s| s.chunks_relocated > 0));
    // What the plan predicted, beside what the kernel did.
    eprintln!(
        "reclaim: predicted {} unallocated, got {} ({:?})",
        plan.predicted_unallocated_bytes, result.unallocated_after, result.steps
    );
    no_balance(&m);
    intact(&m, &kept);

    // Again: nothing to do.
    let (code, text, err) = run(env.cmd().args(["reclaim", "--yes"]).arg(&m));
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("nothing to do"), "{text}");
}

#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn reclaim_interrupted_between_steps_stops_and_the_same_command_goes_on() {
    if !require_root("reclaim interrupted and run again") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1(&env);
    let m = sbx.mount_point().to_path_buf();
    // Chunks of two kinds: about 1/8 used and about 1/2 used.
    let kept = fill_and_fragment(&m, 8, 2);
    // A goal no balance reaches: every step runs.
    let args = |c: &mut std::process::Command| {
        c.args(["--json", "reclaim", "--yes", "--goal", "100G"])
            .arg(&m);
    };
    let (code, out, err) = run(env
        .cmd()
        .args(["--json", "reclaim", "--dry-run", "--goal", "100G"])
        .arg(&m));
    assert_eq!(code, 0, "{err}");
    let Some(ReclaimRecord::Plan { plan }) = typed_lines::<ReclaimRecord>(&out).pop() else {
        panic!("{out}");
    };
    assert!(plan.steps.len() >= 2, "{plan:?}");
    assert!(!plan.predicted_to_reach_goal);
    assert!(
        plan.notes.iter().any(|n| n.contains("device add")),
        "{plan:?}"
    );

    // Paused after the first step; SIGINT there.
    let argv: Vec<std::ffi::OsString> = ["reclaim", "--yes", "--goal", "100G"]
        .iter()
        .map(Into::into)
        .chain([m.clone().into_os_string()])
        .collect();
    let argv: Vec<&std::ffi::OsStr> = std::iter::once("--json".as_ref())
        .chain(argv.iter().map(|a| a.as_os_str()))
        .collect();
    let (code, out, err) = crate::common::with_pause_at(&env, "reclaim-stepped", &argv, |pid| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
    });
    assert_eq!(code, 130, "{err}\n{out}");
    let first = result_of(&typed_lines::<ReclaimRecord>(&out));
    assert_eq!(first.outcome, ReclaimOutcome::Interrupted);
    assert_eq!(
        first.steps.len(),
        1,
        "stopped before the second step: {first:?}"
    );
    assert!(
        first.unallocated_after > first.unallocated_before,
        "{first:?}"
    );
    assert!(err.contains("run the same command again"), "{err}");
    no_balance(&m);
    intact(&m, &kept);

    // The same command again: the steps already done find nothing (or
    // little) to move, the later ones run; the goal stays out of reach.
    let mut c = env.cmd();
    args(&mut c);
    let (code, out, err) = run(&mut c);
    assert_eq!(code, 3, "goal-not-reached: {err}\n{out}");
    let second = result_of(&typed_lines::<ReclaimRecord>(&out));
    assert_eq!(second.outcome, ReclaimOutcome::NotReached);
    let last = plan.steps.last().unwrap().usage;
    assert!(
        second
            .steps
            .iter()
            .any(|s| s.usage == last && !s.skipped && s.chunks_relocated > 0),
        "{second:?}"
    );
    assert!(
        second.unallocated_after >= first.unallocated_after,
        "{second:?}"
    );
    assert!(err.contains("add a device"), "{err}");
    no_balance(&m);
    intact(&m, &kept);
}

/// A step that a run ran for nothing is remembered in the state directory,
/// and the next plan on the same chunks does not move them again for
/// nothing (issue 49: `reclaim --goal` beyond reach re-relocated the same
/// chunks on every run). The record is written here as a run that ended
/// with these very chunks would have written it (which steps of a real run
/// free nothing is the kernel's choice); the real run after it must leave
/// behind exactly the steps its result calls fruitless.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_step_that_freed_nothing_is_not_planned_again_on_the_same_chunks() {
    use btrfs_lab::reclaim::{self, Memory, MemoryStore, StepKind, StepRun};
    if !require_root("reclaim's memory of fruitless steps") {
        return;
    }
    let env = TestEnv::new();
    let sbx = raid1(&env);
    let m = sbx.mount_point().to_path_buf();
    let kept = fill_and_fragment(&m, 4, 4);
    let goal = ["--goal", "100G"];
    let plan_of = |env: &TestEnv| {
        let (code, out, err) = run(env
            .cmd()
            .args(["--json", "reclaim", "--dry-run"])
            .args(goal)
            .arg(&m));
        // 3 (goal-not-reached) when no step can help.
        assert!(code == 0 || code == 3, "{code}: {err}");
        match typed_lines::<ReclaimRecord>(&out).as_slice() {
            [ReclaimRecord::Plan { plan }] => (plan.clone(), err),
            other => panic!("--dry-run --json prints the plan only: {other:?}"),
        }
    };
    let (first, _) = plan_of(&env);
    assert!(first.set_aside.is_empty(), "{first:?}");
    let step = first
        .steps
        .first()
        .expect("the fragmented fill plans a step")
        .clone();

    // "A run ran that step, it gained nothing, and left these chunks."
    let (_, facts) = reclaim::open(&btrfs_lab::sys::fs::root::SysRoot::host(), &m, false).unwrap();
    let ran = StepRun {
        kind: StepKind::Data,
        usage: step.usage,
        chunks_relocated: step.chunks as u64,
        skipped: false,
        unallocated_before: 5 << 20,
        unallocated_after: 5 << 20,
    };
    let f = reclaim::fruitless(&ran, true, &facts.data_chunks, 1).unwrap();
    assert_eq!(f.chunks_after.len(), step.chunks, "{f:?}");
    let store = MemoryStore::new(env.store().dir());
    store
        .save(&Memory {
            fsid: first.fsid.clone(),
            fruitless: vec![f.clone()],
        })
        .unwrap();

    let (again, _) = plan_of(&env);
    assert_eq!(again.set_aside, vec![f.clone()]);
    assert!(
        again.steps.iter().all(|s| s.usage > step.usage),
        "no step moves only the chunks that gave nothing: {again:?}"
    );
    assert!(
        again.notes.iter().any(|n| n.contains(&format!(
            "-dusage={} ran here before and freed nothing",
            step.usage
        ))),
        "{:?}",
        again.notes
    );
    let (code, text, err) = run(env.cmd().args(["reclaim", "--dry-run"]).args(goal).arg(&m));
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("ran here before and freed nothing"), "{text}");

    // A memory file that is not ours: a warning, and planned as if new.
    fs::write(
        env.store()
            .dir()
            .join(format!("reclaim/{}.json", first.fsid)),
        "{\"fsid\": \"someone-else\", \"fruitless\": []}",
    )
    .unwrap();
    let (plain, err) = plan_of(&env);
    assert!(plain.set_aside.is_empty());
    assert!(err.contains("is not a reclaim memory of"), "{err}");
    assert_eq!(plain.steps, first.steps);

    // A real run beyond reach: what it leaves behind is what its result
    // calls fruitless, and the files are intact.
    let (_, out, err) = run(env
        .cmd()
        .args(["--json", "reclaim", "--yes"])
        .args(goal)
        .arg(&m));
    let result = result_of(&typed_lines(&out));
    assert_ne!(result.outcome, ReclaimOutcome::Reached, "{err}");
    let remembered = store.load(&first.fsid).unwrap();
    assert_eq!(remembered.fruitless, result.fruitless, "{result:?}");
    for f in &result.fruitless {
        let s = result.steps.iter().find(|s| s.usage == f.usage).unwrap();
        assert!(
            !s.skipped && s.unallocated_after <= s.unallocated_before,
            "{s:?}"
        );
    }
    eprintln!(
        "reclaim beyond reach: {:?}; remembered {:?}",
        result.steps, result.fruitless
    );
    // When the kernel did free nothing at a step (measured here: a chunk
    // 3% used whose data took a new chunk), the next plan sets it aside.
    if !result.fruitless.is_empty() {
        let (next, _) = plan_of(&env);
        assert_eq!(next.set_aside, result.fruitless, "{next:?}");
    }
    no_balance(&m);
    intact(&m, &kept);
}

#[test]
fn reclaim_refuses_bad_input_with_one_line() {
    let env = TestEnv::new();
    // Bad values: a usage error.
    for args in [
        &["reclaim", "/", "--max-usage", "0"][..],
        &["reclaim", "/", "--max-usage", "101"],
        &["reclaim", "/", "--goal", "lots"],
    ] {
        let (code, out, err) = run(env.cmd().args(args));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty() && !err.contains("panicked"), "{err}");
    }
    // Not a btrfs, or not there: one line, exit 1 (or root's refusal).
    for path in ["/proc", "/nonexistent-btrfs-lab"] {
        let (code, _, err) = run(env.cmd().args(["reclaim", path, "--dry-run"]));
        assert_eq!(code, 1, "{path}: {err}");
        assert!(err.trim_end().lines().count() <= 2, "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
