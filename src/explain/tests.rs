//! explain on composite and hostile pastes.

use super::*;

/// A whole ticket: prose, prompts, quote marks, journal timestamps.
const TICKET: &str = "Hi list,

my RAID1 went read-only last night. Kernel and tools:

$ uname -r
6.1.0-18-amd64
$ btrfs --version
btrfs-progs v6.2

> # btrfs device stats /srv
> [/dev/sdc1].write_io_errs    0
> [/dev/sdc1].read_io_errs     0
> [/dev/sdc1].flush_io_errs    0
> [/dev/sdc1].corruption_errs  0
> [/dev/sdc1].generation_errs  0
> [/dev/sdb1].write_io_errs    12
> [/dev/sdb1].read_io_errs     3
> [/dev/sdb1].flush_io_errs    0
> [/dev/sdb1].corruption_errs  1
> [/dev/sdb1].generation_errs  0

Mar 17 03:01:44 server kernel: BTRFS warning (device sdb1): csum failed root 5 ino 59747 off 1602211840 csum 0xf6f45a1f expected csum 0x0e8a49e7 mirror 2
Mar 17 03:01:44 server kernel: BTRFS error (device sdb1): bdev /dev/sdb1 errs: wr 12, rd 3, flush 0, corrupt 1, gen 0
Mar 17 03:01:45 server kernel: BTRFS: error (device sdb1) in btrfs_commit_transaction:2237: errno=-5 IO failure (Error while writing out transaction)
Mar 17 03:01:45 server kernel: BTRFS info (device sdb1): forced readonly

    Data, RAID1: total=1.00TiB, used=900.00GiB
    System, RAID1: total=32.00MiB, used=160.00KiB
    Metadata, RAID1: total=5.00GiB, used=3.10GiB
    GlobalReserve, single: total=512.00MiB, used=0.00B

UUID:             a5c81116-78a5-4edb-b57c-b08e90e1391b
Scrub started:    Fri Aug  9 16:58:37 2024
Status:           aborted
Duration:         0:02:50
Total to scrub:   407.09GiB
Rate:             2.39GiB/s
Error summary:    csum=1
  Corrected:      1
  Uncorrectable:  0
  Unverified:     0

Balance on '/srv' is paused
35 out of about 101 chunks balanced (466 considered),  65% left

Thanks!
";

fn codes(r: &ExplainReport) -> Vec<&'static str> {
    r.findings.iter().map(|e| e.finding.code.as_str()).collect()
}

#[test]
fn a_whole_ticket_is_read_together() {
    let r = explain(TICKET, "ticket.txt");
    let kinds: Vec<&str> = r.outputs.iter().map(|o| o.format.as_str()).collect();
    assert_eq!(r.outputs.len(), 7, "{kinds:#?}");
    assert_eq!(r.kernel.as_deref(), Some("6.1.0-18-amd64"));
    assert_eq!(r.progs_version.as_deref(), Some("6.2"));
    let c = codes(&r);
    for want in [
        "forced-readonly",
        "device-errors",
        "checksum-errors-logged",
        "scrub-errors",
        "scrub-interrupted",
        "balance-paused",
    ] {
        assert!(c.contains(&want), "{want} not in {c:?}");
    }
    // sdb1's errors come from the stats and the kernel line; sdc1 has none.
    let dev = r
        .findings
        .iter()
        .find(|e| e.finding.code == Code::DeviceErrors)
        .unwrap();
    assert!(dev.finding.title.contains("/dev/sdb1"));
    assert_eq!(dev.from.len(), 2, "{:?}", dev.from);
    assert_eq!(dev.from[0].first, 11);
    // Worst first.
    assert_eq!(
        r.findings[0].finding.severity,
        crate::model::finding::Severity::Critical
    );
    // The considered > about line is explained, not flagged.
    let bal = r
        .findings
        .iter()
        .find(|e| e.finding.code == Code::BalancePaused)
        .unwrap();
    assert!(
        bal.finding
            .evidence
            .iter()
            .any(|e| e.value.contains("considered"))
    );
    // What the paste does not say.
    assert!(r.cannot_tell.iter().any(|c| c.contains("smartctl")));
    assert!(r.cannot_tell.iter().any(|c| c.contains("filesystem usage")));
    // JSON round trip.
    let json = serde_json::to_string(&r).unwrap();
    let back: ExplainReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
}

#[test]
fn single_data_with_errors_is_critical() {
    let t = "Data, single: total=10.00GiB, used=9.00GiB
Metadata, DUP: total=1.00GiB, used=200.00MiB
[/dev/sda].write_io_errs 0
[/dev/sda].read_io_errs 4
[/dev/sda].flush_io_errs 0
[/dev/sda].corruption_errs 0
[/dev/sda].generation_errs 0
";
    let r = explain(t, "-");
    assert!(
        codes(&r).contains(&"device-errors-no-redundancy"),
        "{:?}",
        codes(&r)
    );
}

#[test]
fn a_missing_device_is_named_with_what_it_held() {
    let t = "Label: none  uuid: bddae3c1-2c83-4469-b99b-8bb713ada5a2
\tTotal devices 2 FS bytes used 128.00KiB
\tdevid    1 size 20.00GiB used 2.01GiB path /dev/sda
\tdevid    2 size 0 used 0 path <missing disk> MISSING

[  12.000000] BTRFS warning (device sda): devid 2 uuid 1234 is missing
[  12.000001] BTRFS info (device sda): allowing degraded mounts
";
    let r = explain(t, "-");
    let c = codes(&r);
    assert!(
        c.contains(&"device-missing") && c.contains(&"mount-degraded"),
        "{c:?}"
    );
    let m = r
        .findings
        .iter()
        .find(|e| e.finding.code == Code::DeviceMissing)
        .unwrap();
    assert!(
        m.finding.title.starts_with("1 device(s) of 2"),
        "{}",
        m.finding.title
    );
    assert_eq!(m.from.len(), 2);
}

#[test]
fn nothing_found_is_an_error() {
    assert!(explain_input("hello\nworld\n", "-").is_err());
    assert!(explain_input("", "-").is_err());
}

#[test]
fn hostile_input_is_bounded_and_never_panics() {
    // Megabytes of noise, very long lines, control characters, and
    // thousands of outputs.
    let mut t = String::new();
    for i in 0..20_000 {
        t.push_str(&format!("noise line {i} \u{1b}[31m\u{0}\u{7}BTRFS\r\n"));
    }
    t.push_str(&"x".repeat(3 << 20));
    t.push('\n');
    for _ in 0..2_000 {
        t.push_str("btrfs-progs v6.1\n[1.0] BTRFS warning (device sda): csum failed root 5 ino 1 off 0 csum 1 expected csum 2 mirror 1\n");
    }
    t.push_str(&"{\n\"device-stats\": [\n".repeat(1000));
    t.push_str(&"Overall:\n".repeat(5000));
    t.push_str(&"scrub status for x\n".repeat(5000));
    t.push_str(&"\n".repeat(100_000));
    t.push_str("Label: 'x'  uuid: y\n\tTotal devices 99999999999999999999999 FS bytes used 1\n");
    let r = explain(&t, "-");
    assert!(r.outputs.len() <= MAX_OUTPUTS);
    assert!(r.outputs_left_out > 0);
    assert!(
        r.outputs
            .iter()
            .map(|o| match &o.detail {
                Detail::KernelLog { events } => events.len(),
                _ => 0,
            })
            .sum::<usize>()
            <= MAX_EVENTS
    );
    for e in &r.findings {
        assert!(e.from.len() <= MAX_SPANS);
        assert!(e.finding.evidence.len() <= 64);
    }
    // Arbitrary bytes.
    let mut seed = 7u64;
    let mut junk = String::new();
    for _ in 0..200_000 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let c = char::from_u32((seed >> 33) as u32 % 0x3000).unwrap_or('?');
        junk.push(if seed.is_multiple_of(11) { '\n' } else { c });
    }
    let _ = explain(&junk, "-");
}

/// Any character anywhere in a ticket (multibyte, control): never a panic.
#[test]
fn a_character_inserted_anywhere_never_panics() {
    let extra = "\
scrub status for x
\tscrub started at Sun Feb  5 10:00:01 2017, interrupted after 00:00:09, not running
3.4% done, 0 write errs, 0 uncorr. read errs
Started on 11.Oct 08:55:23, canceled on 11.Oct 08:59:02 at 12.5%, 0 write errs, 0 uncorr. read errs
/dev/sda, ID: 1
   Device size:  1.00GiB
   Data,RAID1:   1.00GiB
Label: 'x'  uuid: y
\tdevid    1 size 20.00GiB used 0.00B path /dev/sda
Id Path      Write errors Read errors Flush errors Corruption errors Generation errors
-- --------- ------------ ----------- ------------ ----------------- -----------------
 1 /dev/sdc1            0           0            0                 0                 0
{
  \"device-stats\": [
    {
      \"device\": \"/dev/vdb\",
      \"read_io_errs\": \"3\"
    }
  ]
}
Overall:
    Device size:\t\t1000.00MiB
";
    let base = format!("{TICKET}{extra}");
    let mut boundaries: Vec<usize> = base.char_indices().map(|(i, _)| i).collect();
    boundaries.push(base.len());
    for (n, at) in boundaries.iter().enumerate() {
        for c in ["é", "\u{1b}", "]", "%", "\n", "❯ "] {
            if n % 3 != 0 && c != "é" {
                continue;
            }
            let mut t = base.clone();
            t.insert_str(*at, c);
            let _ = explain(&t, "-");
        }
    }
}

/// Generated (the shape of `btrfs device stats`, the value one operator's
/// exporter showed): a counter at UINT64_MAX is invalid, not errors, and
/// never summed into an overflow.
#[test]
fn a_pasted_counter_at_uint64_max_is_invalid() {
    let t = "[/dev/nvme0n1p8].write_io_errs    0
[/dev/nvme0n1p8].read_io_errs     0
[/dev/nvme0n1p8].flush_io_errs    0
[/dev/nvme0n1p8].corruption_errs  18446744073709551615
[/dev/nvme0n1p8].generation_errs  0
";
    let r = explain(t, "-");
    let c = codes(&r);
    assert!(c.contains(&"device-stats-invalid"), "{c:?}");
    assert!(!c.iter().any(|x| x.starts_with("device-errors")), "{c:?}");
    let with_real = t.replace("read_io_errs     0", "read_io_errs     2");
    let r = explain(&with_real, "-");
    let c = codes(&r);
    assert!(
        c.contains(&"device-stats-invalid") && c.contains(&"device-errors"),
        "{c:?}"
    );
}
