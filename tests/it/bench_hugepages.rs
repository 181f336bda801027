//! `bench --hugepages` on a real loop-device btrfs: the sequential tests'
//! fio buffers in huge pages reserved for the run (vm.nr_hugepages raised,
//! then put back on every exit path), or, when the kernel cannot find the
//! pages, a refusal that changes nothing; without it, a note says what
//! ordinary buffers may cost.

use std::fs;

use btrfs_lab::bench::report::BenchReport;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, listing, require_root, run, typed};

const QUICK: [&str; 9] = [
    "--file-size",
    "64M",
    "--duration",
    "1",
    "--rounds",
    "1",
    "--tests",
    "SEQ1M-Q8T1,RND4K-Q1T1",
    "--no-history",
];

/// The tests here change vm.nr_hugepages: one at a time.
static POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn nr_hugepages() -> u64 {
    fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn hugepages_are_reserved_for_the_run_and_given_back() {
    if !require_root("bench --hugepages") {
        return;
    }
    let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let env = TestEnv::new();
    let sb = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 256 << 20,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    let mnt = sb.mount_point().to_path_buf();
    let before = nr_hugepages();

    // --dry-run names the setting and its way back, and changes nothing.
    let (code, out, err) = run(env
        .cmd()
        .args(["bench", "--hugepages", "--dry-run"])
        .args(QUICK)
        .arg(&mnt));
    assert_eq!(code, 0, "{err}");
    if btrfs_lab::sys::kernel::hugepages::read(&btrfs_lab::sys::fs::root::SysRoot::host())
        .is_some_and(|h| h.available() < 7)
    {
        // Filled to 80 columns: the words, wherever the lines break.
        let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains(&format!("vm.nr_hugepages {before} → ")),
            "{out}"
        );
    }
    assert_eq!(nr_hugepages(), before);

    // No terminal, no --yes: a setting of the whole machine is not
    // changed without asking.
    let (code, _, err) = run(env
        .cmd()
        .args(["bench", "--hugepages"])
        .args(QUICK)
        .arg(&mnt));
    if err.contains("reserve huge pages") {
        assert_eq!(code, 1, "{err}");
        assert_eq!(nr_hugepages(), before);
        assert_eq!(listing(&mnt), Vec::<String>::new());
    }

    let (code, out, err) = run(env
        .cmd()
        .args(["bench", "--json", "--hugepages", "--yes"])
        .args(QUICK)
        .arg(&mnt));
    // Given back whatever happened.
    assert_eq!(nr_hugepages(), before, "vm.nr_hugepages not put back");
    assert_eq!(listing(&mnt), Vec::<String>::new());
    if code == 1 {
        // The kernel found too few free pages (memory fragmented): said,
        // and nothing changed.
        assert!(err.contains("the kernel could reserve only"), "{err}");
        eprintln!("the kernel could not reserve the pages here: {err}");
        return;
    }
    assert!(code == 0 || code == 3, "{err}");
    let r: BenchReport = typed(&out);
    assert!(r.parameters.huge_page_buffers, "{:#?}", r.parameters);
    // The sequential job's buffers are huge pages, the random one's not.
    let seq = r.job_file.split("[SEQ1M-Q8T1-read]").nth(1).unwrap();
    let seq = &seq[..seq.find("\n\n").unwrap_or(seq.len())];
    assert!(seq.contains("iomem=mmaphuge"), "{}", r.job_file);
    let rnd = r.job_file.split("[RND4K-Q1T1-read]").nth(1).unwrap();
    let rnd = &rnd[..rnd.find("\n\n").unwrap_or(rnd.len())];
    assert!(!rnd.contains("iomem="), "{}", r.job_file);
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("--hugepages: vm.nr_hugepages was raised from")),
        "{:#?}",
        r.notes
    );

    // Without --hugepages on a machine without free huge pages: ordinary
    // buffers, and the note says what they may cost.
    if btrfs_lab::sys::kernel::hugepages::read(&btrfs_lab::sys::fs::root::SysRoot::host())
        .is_some_and(|h| h.available() == 0)
    {
        let (code, out, err) = run(env.cmd().args(["bench", "--json"]).args(QUICK).arg(&mnt));
        assert!(code == 0 || code == 3, "{err}");
        let r: BenchReport = typed(&out);
        assert!(!r.parameters.huge_page_buffers);
        assert!(!r.job_file.contains("iomem="), "{}", r.job_file);
        let note = r
            .notes
            .iter()
            .find(|n| {
                n.starts_with(
                    "fio's I/O buffers for the sequential tests were ordinary 4 KiB pages",
                )
            })
            .unwrap_or_else(|| panic!("{:#?}", r.notes));
        // What they cost is measured here, on the test file, not quoted
        // from another machine: the note gives the figures of the report.
        match &r.buffer_cost {
            Some(c) => {
                assert!(note.contains(&c.describe()), "{note}");
                assert_eq!(c.pairs, 3);
                assert!(c.base_pages_bytes_per_sec > 0.0 && c.huge_pages_bytes_per_sec > 0.0);
                assert!(c.ratio_min <= c.ratio && c.ratio <= c.ratio_max, "{c:?}");
                assert_eq!(c.pass_bytes, 64 << 20);
                eprintln!("{}", c.describe());
            }
            None => assert!(note.contains("could not be measured: "), "{note}"),
        }
    }
}

/// Puts vm.nr_hugepages back when dropped (panics included).
struct PoolSetting(u64);

impl Drop for PoolSetting {
    fn drop(&mut self) {
        let _ = fs::write("/proc/sys/vm/nr_hugepages", self.0.to_string());
    }
}

fn available_huge_pages() -> u64 {
    btrfs_lab::sys::kernel::hugepages::read(&btrfs_lab::sys::fs::root::SysRoot::host())
        .map_or(0, |h| h.available())
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn read_test_takes_its_ring_from_the_huge_page_pool_when_it_has_pages_free() {
    if !require_root("read-test's ring from the huge page pool") {
        return;
    }
    let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let env = TestEnv::new();
    let sb = env.sandbox(SandboxRequest {
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let file = sb.mount_point().join("model.bin");
    fs::write(&file, vec![7u8; 100 << 20]).unwrap();
    let read_test = || {
        let (code, out, err) = run(env
            .cmd()
            .args(["read-test", "--json", "--cache", "cold", "--rounds", "1"])
            .args(["--methods", "direct"])
            .arg(&file));
        assert!(code == 0 || code == 3, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["destination"]["bytes"], 64 << 20, "{r:#}");
        r
    };

    // The pool given 64 MiB more than is free (and two pages to spare).
    let before = nr_hugepages();
    let setting = PoolSetting(before);
    let want = before + 34 - available_huge_pages().min(34);
    fs::write("/proc/sys/vm/nr_hugepages", want.to_string()).unwrap();
    if available_huge_pages() < 32 {
        drop(setting);
        eprintln!("the kernel could not reserve 32 huge pages (memory fragmented): not checked");
        return;
    }
    let r = read_test();
    assert_eq!(r["destination"]["backing"], "huge-page-pool", "{r:#}");
    assert_eq!(r["destination"]["huge_page_bytes"], 64 << 20, "{r:#}");
    // Given back when read-test ended.
    assert!(available_huge_pages() >= 32);

    // Pages another btrfs-lab run reserved for itself (its flock) are not
    // taken: transparent huge pages instead.
    {
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/run/btrfs-lab-hugepages.lock")
            .unwrap();
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let r = read_test();
        assert_eq!(
            r["destination"]["backing"], "transparent-huge-pages",
            "{r:#}"
        );
    }

    // With the pool back as it was and nothing free: transparent.
    drop(setting);
    assert_eq!(nr_hugepages(), before);
    if available_huge_pages() < 32 {
        let r = read_test();
        assert_eq!(
            r["destination"]["backing"], "transparent-huge-pages",
            "{r:#}"
        );
    }
}
