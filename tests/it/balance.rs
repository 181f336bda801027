//! `balance` on real sandboxes: the seed's array (three drives, raid0 data,
//! raid1c3 metadata, a file written) grown by a fourth drive: `device add`
//! names `balance` as the next step, the plan spreads the narrow chunks,
//! Ctrl-C pauses it after a chunk and the same command goes on, the kernel
//! leaves every device within a chunk of the mean with full-width chunks,
//! every file reads back byte for byte, and a second run has nothing to
//! do. Refusals change nothing.

#[cfg(feature = "test-hooks")]
use btrfs_lab::balance::plan::{Filter, Kind, Spread};
#[cfg(feature = "test-hooks")]
use btrfs_lab::balance::report::{BalancePlan, BalanceRecord, BalanceResult, StatusReport};
#[cfg(feature = "test-hooks")]
use btrfs_lab::balance::run::Outcome;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::admin::fill;
#[cfg(feature = "test-hooks")]
use crate::admin::hashes;
use crate::common::{TestEnv, lose_member, require_root, run};
#[cfg(feature = "test-hooks")]
use crate::common::{typed, typed_lines};

const GIB: u64 = 1 << 30;

#[cfg(feature = "test-hooks")]
fn plan_of(stdout: &str) -> BalancePlan {
    match typed_lines::<BalanceRecord>(stdout).into_iter().next() {
        Some(BalanceRecord::Plan {
            plan: Some(plan), ..
        }) => *plan,
        other => panic!("no plan first: {other:?}\n{stdout}"),
    }
}

#[cfg(feature = "test-hooks")]
fn result_of(stdout: &str) -> BalanceResult {
    match typed_lines::<BalanceRecord>(stdout).pop() {
        Some(BalanceRecord::Result(r)) => r,
        other => panic!("no result last: {other:?}\n{stdout}"),
    }
}

#[cfg(feature = "test-hooks")]
fn data(spread: &[Spread]) -> &Spread {
    spread
        .iter()
        .find(|s| s.kind == Kind::Data)
        .expect("a data spread")
}

#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_drive_added_to_a_striped_array_gets_its_share_of_the_data() {
    if !require_root("balance after device add") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1c3),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 6, 200);
    let before = hashes(&m);

    // device add names balance, not a conversion.
    let spare = env.spare_device("fourth", 2 * GIB);
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "add", "--yes"])
        .arg(&m)
        .arg(&spare));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let next = format!("btrfs-lab balance {}", m.display());
    assert!(stdout.contains(&next), "{stdout}");
    assert!(!stdout.contains("btrfs-lab convert"), "{stdout}");

    // The plan: the 3-wide chunks, nothing else; a dry run changes nothing.
    let (code, stdout, stderr) = run(env.cmd().args(["balance", "--dry-run", "--json"]).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let plan = plan_of(&stdout);
    assert!(plan.refused.is_empty(), "{:?}", plan.refused);
    let [step] = &plan.steps[..] else {
        panic!("one step: {:?}", plan.steps)
    };
    assert_eq!(step.kind, Kind::Data);
    assert_eq!(step.filter, Filter::Stripes { min: 1, max: 3 });
    let now = data(&plan.before);
    assert!(now.widths.iter().all(|w| w.stripes == 3), "{now:?}");
    assert_eq!(step.chunks, now.chunks);
    assert_eq!(
        now.devices
            .iter()
            .find(|d| d.allocated == 0)
            .map(|d| d.devid),
        Some(4),
        "{now:?}"
    );
    assert_eq!(data(&plan.after).full_width, Some(4));
    assert_eq!(
        plan.equivalent_command[..3],
        ["btrfs", "balance", "start"].map(String::from)
    );
    let (_, again, _) = run(env.cmd().args(["balance", "--dry-run", "--json"]).arg(&m));
    assert_eq!(
        plan_of(&again).before,
        plan.before,
        "the dry run changed the chunks"
    );

    // Ctrl-C while the kernel relocates the first chunk: paused after it.
    let (code, stdout, stderr) = crate::common::with_pause_at(
        &env,
        "balance-running",
        &[
            "balance".as_ref(),
            "--yes".as_ref(),
            "--json".as_ref(),
            m.as_os_str(),
        ],
        |pid| {
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid as i32).unwrap(),
                rustix::process::Signal::INT,
            )
            .unwrap();
        },
    );
    assert_eq!(code, 130, "{stdout}{stderr}");
    let paused = result_of(&stdout);
    assert_eq!(paused.outcome, Outcome::Paused, "{stdout}");
    assert!(paused.bytes_remaining.unwrap() > 0, "{paused:?}");
    assert!(stderr.contains("pausing the balance"), "{stderr}");
    let (code, stdout, stderr) = run(env.cmd().args(["balance", "--status", "--json"]).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let status: StatusReport = typed(&stdout);
    assert!(status.balance.is_some_and(|b| b.paused), "{status:?}");

    // The same command resumes it and finishes.
    let (code, stdout, stderr) = run(env.cmd().args(["balance", "--yes", "--json"]).arg(&m));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        plan_of(&stdout).existing,
        Some(btrfs_lab::balance::report::Existing::Resume)
    );
    let done = result_of(&stdout);
    assert_eq!(done.outcome, Outcome::Completed, "{stdout}");
    assert!(done.left.is_empty(), "{:?}", done.left);
    let after = data(&done.after);
    assert!(after.widths.iter().all(|w| w.stripes == 4), "{after:?}");
    // Every device within one chunk's stripe of the mean.
    let mean = after.devices.iter().map(|d| d.allocated).sum::<u64>() / 4;
    let stripe = 1 << 30; // a data chunk's stripe is at most 1 GiB
    for d in &after.devices {
        assert!(d.allocated.abs_diff(mean) <= stripe, "{after:?}");
        assert!(d.allocated > 0, "{after:?}");
    }
    assert_eq!(hashes(&m), before, "a file changed");
    // Its rate is kept for the next plan's time.
    let fsid = btrfs_lab::sys::kernel::btrfs::fsid(&m).unwrap();
    let kept = env.store().dir().join(format!("balance/{fsid}.json"));
    let kept: btrfs_lab::balance::rate::Measured =
        serde_json::from_str(&std::fs::read_to_string(&kept).unwrap()).unwrap();
    assert_eq!(kept.fsid, fsid);
    assert!(kept.bytes > 0 && kept.seconds > 0.0, "{kept:?}");

    // Nothing left to do.
    let (code, stdout, stderr) = run(env.cmd().args(["balance", "--yes"]).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("nothing to balance"), "{stdout}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_missing_device_or_a_user_is_refused_and_nothing_changes() {
    if !require_root("balance refusals") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 2, 32);

    // Not root: one line, nothing read.
    let (code, _, stderr) = run(env.as_nobody(&[&m]).args(["balance", "--yes"]).arg(&m));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("balancing needs root"), "{stderr}");

    // Nothing to balance on an even array; --resume with nothing paused.
    let (code, stdout, _) = run(env.cmd().args(["balance", "--dry-run"]).arg(&m));
    assert_eq!(code, 0);
    assert!(stdout.contains("nothing to balance"), "{stdout}");
    let (code, _, stderr) = run(env.cmd().args(["balance", "--resume", "--yes"]).arg(&m));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no paused balance to resume"), "{stderr}");

    // A member gone: replace or remove it first.
    let devs = sbx.devices();
    lose_member(&m, &devs[0], &devs[2], "degraded");
    let (code, stdout, stderr) = run(env.cmd().args(["balance", "--yes"]).arg(&m));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("is missing: replace it"), "{stderr}");
    // A refused run's record is left out with its stdout: nothing started.
    let (code, stdout, _) = run(env.cmd().args(["balance", "--yes", "--json"]).arg(&m));
    assert_eq!((code, stdout.as_str()), (1, ""));
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn device_add_then_balance_grows_and_spreads_in_one_run() {
    if !require_root("device add --then-balance") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 3, 128);
    let before = crate::admin::hashes(&m);
    let spare = env.spare_device("third", 2 * GIB);
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "add", "--then-balance", "--yes", "--json"])
        .arg(&m)
        .arg(&spare));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let records: Vec<btrfs_lab::balance::report::BalanceRecord> =
        crate::common::typed_lines(&stdout);
    use btrfs_lab::balance::report::BalanceRecord as R;
    let Some(R::Plan {
        plan: Some(planned),
        add: Some(add),
    }) = records.first()
    else {
        panic!("the plan first: {stdout}")
    };
    assert_eq!(add.devices.len(), 1);
    // Planned on the filesystem as it will be: three devices, the narrow
    // chunks relocated.
    assert_eq!(planned.devices.len(), 3);
    assert!(!planned.steps.is_empty(), "{planned:?}");
    assert!(
        records.iter().any(|r| matches!(r, R::Added { .. })),
        "{stdout}"
    );
    let Some(R::Result(done)) = records.last() else {
        panic!("the result last: {stdout}")
    };
    assert_eq!(done.outcome, btrfs_lab::balance::run::Outcome::Completed);
    assert!(done.left.is_empty(), "{done:?}");
    let data = done
        .after
        .iter()
        .find(|s| s.kind == btrfs_lab::balance::plan::Kind::Data)
        .unwrap();
    assert!(data.widths.iter().all(|w| w.stripes == 3), "{data:?}");
    assert_eq!(crate::admin::hashes(&m), before, "a file changed");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn device_remove_names_balance_when_chunks_stay_narrower_than_the_array() {
    if !require_root("device remove's next step") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 2, 128);
    // Two devices added by hand (btrfs-progs), the data left 2 wide; one
    // of them removed again: the chunks are still narrower than the 3.
    let third = env.spare_device("third", 2 * GIB);
    let fourth = env.spare_device("fourth", 2 * GIB);
    for d in [&third, &fourth] {
        let (code, _, stderr) = run(std::process::Command::new("btrfs")
            .args(["device", "add", "--nodiscard"])
            .arg(d)
            .arg(&m));
        assert_eq!(code, 0, "{stderr}");
    }
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "remove", "--yes", "--json"])
        .arg(&m)
        .arg(&fourth));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report = typed_lines_any::<btrfs_lab::device::remove::RemoveReport>(&stdout);
    let next = report.result.and_then(|r| r.next).expect("a next step");
    assert!(
        next.ends_with(&format!("btrfs-lab balance {}", m.display())),
        "{next}"
    );
}

/// The last JSON Lines record of `stdout` of `T`'s document (progress
/// records of their own document between them), as a `T`.
fn typed_lines_any<T: serde::de::DeserializeOwned + btrfs_lab::report::envelope::Document>(
    stdout: &str,
) -> T {
    let mine = format!("\"document\":\"{}\"", T::NAME);
    let last = stdout
        .lines()
        .rfind(|l| l.contains(&mine))
        .unwrap_or_else(|| panic!("no {} record: {stdout}", T::NAME));
    crate::common::typed(last)
}

/// Writes 16 MiB files into `m` until the filesystem is full; returns how
/// many fit.
fn fill_until_full(m: &std::path::Path) -> usize {
    use std::io::Write;
    let block = vec![0x5au8; 1 << 20];
    for n in 0.. {
        let path = m.join(format!("full{n}"));
        let mut f = std::fs::File::create(&path).unwrap();
        let written = (0..16).try_for_each(|_| f.write_all(&block));
        if written.and_then(|()| f.sync_all()).is_err() {
            drop(f);
            let _ = std::fs::remove_file(&path);
            return n;
        }
    }
    unreachable!()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_balance_the_space_cannot_hold_is_refused_with_the_numbers_and_changes_nothing() {
    if !require_root("balance ENOSPC refusal") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    assert!(fill_until_full(&m) > 0);
    // A small third device: room for one copy of a chunk, never for the
    // two a RAID1 chunk needs on different devices.
    let small = env.spare_device("small", 320 << 20);
    let (code, _, stderr) = run(std::process::Command::new("btrfs")
        .args(["device", "add", "--nodiscard"])
        .arg(&small)
        .arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let chunks = || {
        let (_, out, _) = run(env.cmd().args(["balance", "--status", "--json"]).arg(&m));
        let st: btrfs_lab::balance::report::StatusReport = crate::common::typed(&out);
        st.spread
    };
    let before = chunks();
    let (code, stdout, stderr) = run(env.cmd().args(["balance", "--yes"]).arg(&m));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("not enough space to balance"), "{stderr}");
    assert!(stderr.contains("ENOSPC"), "{stderr}");
    assert_eq!(chunks(), before, "a refused balance changed the chunks");
}
