//! The pure part of `read-test --pid`: from what was counted in the window,
//! how each file was read, how many threads read and how busy they were,
//! the page cache's share, what holds the loader back, and what to change.

use crate::model::profile::Profile;
use crate::readtest::report::Ceiling;
use crate::report::rate;

use super::loaders::{self, Recognised};
use super::report::{
    Bottleneck, ByteOrigin, ClaimedRate, DeviceWindow, ReadWay, RequestShape, SavedRun,
    ThreadActivity, Trap, WatchedFile,
};

/// Below this a file (or a process) did not read in the window.
pub(crate) const MIN_READ_BYTES: u64 = 1 << 20;
/// Faults of a thread in the window that make it a reader of a mapping.
pub(crate) const MIN_READER_FAULTS: u64 = 64;
/// A reading thread this busy on the CPU is CPU-bound.
pub(crate) const CPU_BOUND_PERCENT: f64 = 80.0;
/// Readers waiting on I/O this much of the time are storage-bound.
pub(crate) const IO_BOUND_PERCENT: f64 = 40.0;
/// The page cache supplied this share: a warm read.
pub(crate) const WARM_SHARE: f64 = 0.8;
/// The devices at this share of `links`' ceiling are the limit.
pub(crate) const AT_CEILING: f64 = 0.85;
/// A member busy this share of the window is at its limit...
pub(crate) const MEMBER_BUSY_PERCENT: f64 = 90.0;
/// ...when the others, on average, are below this.
pub(crate) const OTHERS_IDLE_PERCENT: f64 = 60.0;
/// `read-test` faster than the loader by this factor: a gain worth saying.
pub(crate) const GAIN_WORTH_SAYING: f64 = 1.2;

/// Counters of one thread at the start and the end of the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct ThreadDelta {
    /// rchar delta.
    pub(crate) read_call_bytes: u64,
    /// read_bytes delta.
    pub(crate) storage_read_bytes: u64,
    /// minflt + majflt delta.
    pub(crate) faults: u64,
    /// utime + stime delta, seconds.
    pub(crate) cpu_seconds: f64,
    /// Samples in state D, of all samples.
    pub(crate) d_samples: u32,
    /// Samples taken.
    pub(crate) samples: u32,
}

/// Per-thread activity from the deltas. A thread reads when its read calls
/// or storage reads passed [`MIN_READ_BYTES`], or, when a mapping was read,
/// it took [`MIN_READER_FAULTS`] faults.
pub(crate) fn thread_activity(
    tid: u32,
    name: String,
    d: &ThreadDelta,
    seconds: f64,
    mapping_read: bool,
) -> ThreadActivity {
    let reading = d.read_call_bytes >= MIN_READ_BYTES
        || d.storage_read_bytes >= MIN_READ_BYTES
        || (mapping_read && d.faults >= MIN_READER_FAULTS);
    ThreadActivity {
        tid,
        name,
        read_call_bytes: d.read_call_bytes,
        storage_read_bytes: d.storage_read_bytes,
        faults: d.faults,
        cpu_percent: if seconds > 0.0 {
            100.0 * d.cpu_seconds / seconds
        } else {
            0.0
        },
        io_wait_percent: if d.samples > 0 {
            100.0 * f64::from(d.d_samples) / f64::from(d.samples)
        } else {
            0.0
        },
        reading,
    }
}

/// What the page cache supplied: the share of the bytes read (read calls
/// plus mapped in) that did not come from storage. O_DIRECT bytes count on
/// both sides (read calls and storage reads), so a direct reader's share
/// is 0. None when nothing was read.
pub(crate) fn page_cache_share(read_calls: u64, mapped_in: u64, storage: u64) -> Option<f64> {
    let logical = read_calls.saturating_add(mapped_in);
    (logical >= MIN_READ_BYTES).then(|| (1.0 - storage as f64 / logical as f64).clamp(0.0, 1.0))
}

/// Everything the verdict looks at.
#[derive(Debug, Clone)]
pub(crate) struct Observed<'a> {
    /// pid and command for the sentence.
    pub(crate) pid: u32,
    /// `comm`.
    pub(crate) command: &'a str,
    /// Read files, most bytes first.
    pub(crate) files: &'a [WatchedFile],
    /// Every thread.
    pub(crate) threads: &'a [ThreadActivity],
    /// Rate of the process (read calls + mapped in).
    pub(crate) rate: f64,
    /// Bytes read in the window.
    pub(crate) logical_bytes: u64,
    /// The page cache's share.
    pub(crate) page_cache_share: Option<f64>,
    /// The devices of the main file.
    pub(crate) devices: Option<&'a DeviceWindow>,
    /// `links`' ceiling.
    pub(crate) ceiling: Option<&'a Ceiling>,
    /// The loader recognised (or none).
    pub(crate) loader: &'a Recognised,
    /// Members of the main file's btrfs (with a path), when known.
    pub(crate) fs_members: Option<usize>,
    /// It maps libcufile.
    pub(crate) cufile: bool,
    /// A saved read-test of the same file.
    pub(crate) saved: Option<&'a SavedRun>,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    /// What holds it back.
    pub(crate) bottleneck: Bottleneck,
    /// One sentence.
    pub(crate) summary: String,
    /// What to change.
    pub(crate) settings: Vec<super::report::Setting>,
    /// btrfs traps.
    pub(crate) traps: Vec<Trap>,
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = v.fold((0u32, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / f64::from(n))
}

/// The bottleneck from the numbers.
pub(crate) fn bottleneck(o: &Observed<'_>) -> Bottleneck {
    if o.logical_bytes < MIN_READ_BYTES {
        return Bottleneck::NotReading;
    }
    let way = o.files.first().and_then(|f| f.ways.first().copied());
    let readers: Vec<&ThreadActivity> = o.threads.iter().filter(|t| t.reading).collect();
    let cpu = mean(readers.iter().map(|t| t.cpu_percent)).unwrap_or(0.0);
    let wait = mean(readers.iter().map(|t| t.io_wait_percent)).unwrap_or(0.0);
    if way != Some(ReadWay::Direct) && o.page_cache_share.is_some_and(|s| s >= WARM_SHARE) {
        return Bottleneck::PageCache;
    }
    if let (Some(d), Some(c)) = (o.devices, o.ceiling)
        && c.bytes_per_sec > 0
        && d.rate_bytes_per_sec >= AT_CEILING * c.bytes_per_sec as f64
    {
        return Bottleneck::StorageCeiling;
    }
    if cpu >= CPU_BOUND_PERCENT && wait < IO_BOUND_PERCENT {
        return Bottleneck::Cpu;
    }
    // Not CPU-bound, below the ceiling: one reader, or readahead behind
    // buffered reads and faults, keeps too little in flight.
    if readers.len() <= 1 || way != Some(ReadWay::Direct) {
        return Bottleneck::TooFewReaders;
    }
    if wait >= IO_BOUND_PERCENT {
        return Bottleneck::Storage;
    }
    Bottleneck::Unclear
}

/// The btrfs traps for the main file.
pub(crate) fn traps(o: &Observed<'_>, b: Bottleneck) -> Vec<Trap> {
    let mut out = Vec::new();
    let Some(f) = o.files.first() else {
        return out;
    };
    let btrfs = f.fs_type.as_deref() == Some("btrfs");
    let readers = o.threads.iter().filter(|t| t.reading).count();
    let trap = |name: &str, text: String| Trap {
        name: name.to_owned(),
        text,
    };
    if btrfs
        && readers <= 1
        && f.data_profiles
            .iter()
            .any(|p| p.duplicates_data() && *p != Profile::Dup)
    {
        out.push(trap(
            "raid1-read-policy",
            "btrfs picks the RAID1 mirror by the reading thread's pid (read_policy `pid`): one loader thread reads one mirror, a fraction of the array; read with several threads, or set /sys/fs/btrfs/FSID/read_policy to round-robin where the kernel offers it".to_owned(),
        ));
    }
    if btrfs && f.nocow != Some(true) && matches!(b, Bottleneck::Cpu) {
        out.push(trap(
            "checksums",
            "the file carries data checksums: every block read is verified on the CPU (crc32c by default), which a CPU-bound loader pays for".to_owned(),
        ));
    }
    if let Some(l) = f.layout.filter(|l| l.encoded_bytes > 0) {
        let pct = 100.0 * l.encoded_bytes as f64 / f.size_bytes.max(1) as f64;
        out.push(trap(
            "compressed",
            format!("{pct:.0} % of the file is in compressed extents: they are decompressed on the CPU, and O_DIRECT cannot read them at full speed; store model files uncompressed (rewrite them with compression off)"),
        ));
    }
    if let Some(d) = o.devices
        && d.loads.len() > 1
        && matches!(
            b,
            Bottleneck::Storage
                | Bottleneck::StorageCeiling
                | Bottleneck::TooFewReaders
                | Bottleneck::Unclear
        )
        && let Some(busiest) = d
            .loads
            .iter()
            .max_by(|a, b| a.busy_percent.total_cmp(&b.busy_percent))
    {
        let others = mean(
            d.loads
                .iter()
                .filter(|l| l.name != busiest.name)
                .map(|l| l.busy_percent),
        )
        .unwrap_or(0.0);
        if busiest.busy_percent >= MEMBER_BUSY_PERCENT && others < OTHERS_IDLE_PERCENT {
            out.push(trap(
                "one-member-busy",
                format!(
                    "{} was busy {:.0} % of the window, the other members {others:.0} % on average: that one device is the limit (its share of the file's bytes, or another reader on it)",
                    crate::report::text::escape_control(&busiest.name),
                    busiest.busy_percent
                ),
            ));
        }
    }
    if btrfs
        && let (Some(m), Some(total)) = (&f.members, o.fs_members)
        && !m.is_empty()
        && m.len() < total
        && f.data_profiles.iter().any(|p| p.stripes_all_devices())
    {
        out.push(trap(
            "narrow-chunks",
            format!(
                "its bytes lie on {} of the filesystem's {total} members: its chunks were allocated before the others were added (or while they were full), so a read of it can use only those; `btrfs-lab balance` spreads them",
                m.len()
            ),
        ));
    }
    if btrfs && o.cufile {
        out.push(trap(
            "gds-compat-mode",
            "the process uses cuFile (GPUDirect Storage): on btrfs it runs in compatibility mode (nvidia-fs supports ext4 and XFS), reading with POSIX calls into host memory".to_owned(),
        ));
    }
    out
}

fn file_name(f: &WatchedFile) -> String {
    let name = f
        .path
        .file_name()
        .unwrap_or(f.path.as_os_str())
        .to_string_lossy()
        .into_owned();
    crate::report::text::escape_control(&name).into_owned()
}

/// The verdict: bottleneck, sentence, settings, traps.
pub(crate) fn verdict(o: &Observed<'_>) -> Verdict {
    let b = bottleneck(o);
    let readers: Vec<&ThreadActivity> = o.threads.iter().filter(|t| t.reading).collect();
    let n = readers.len();
    let who = format!("pid {} ({})", o.pid, o.command);
    let way = o.files.first().and_then(|f| f.ways.first().copied());
    let summary = match (o.files.first(), way) {
        _ if b == Bottleneck::NotReading => {
            format!("{who} read nothing from files while it was watched.")
        }
        (Some(f), Some(w)) => {
            let how = match w {
                ReadWay::Direct => "with O_DIRECT",
                ReadWay::Buffered => "through the page cache (read calls)",
                ReadWay::Mmap => "through a memory mapping",
            };
            let threads = if n == 1 {
                "1 thread".to_owned()
            } else {
                format!("{n} threads")
            };
            let busy = mean(readers.iter().map(|t| t.cpu_percent)).unwrap_or(0.0);
            let wait = mean(readers.iter().map(|t| t.io_wait_percent)).unwrap_or(0.0);
            let busy_text = if n == 1 {
                format!("that thread {busy:.0} % busy on the CPU, {wait:.0} % waiting on I/O")
            } else {
                format!(
                    "those threads {busy:.0} % busy on the CPU on average, {wait:.0} % waiting on I/O"
                )
            };
            let cause = match b {
                Bottleneck::PageCache => format!(
                    "{:.0} % came from the page cache: memory speed, not storage",
                    100.0 * o.page_cache_share.unwrap_or(0.0)
                ),
                Bottleneck::Cpu => "CPU-bound, not storage-bound".to_owned(),
                Bottleneck::StorageCeiling => {
                    "the devices deliver their ceiling: storage-bound at the limit".to_owned()
                }
                Bottleneck::TooFewReaders => {
                    "waiting on storage with too little in flight (one reader, or the readahead of buffered reads and faults): not the devices' limit".to_owned()
                }
                Bottleneck::Storage => "storage-bound below the ceiling".to_owned(),
                Bottleneck::Unclear | Bottleneck::NotReading => {
                    "no single bottleneck stands out".to_owned()
                }
            };
            let mut s = format!(
                "{who} reads {} {how} with {threads} at {}, {busy_text}: {cause}",
                file_name(f),
                rate::format_both(o.rate)
            );
            if let Some(d) = o.devices.filter(|_| b != Bottleneck::PageCache) {
                s.push_str(&format!(
                    "; its devices delivered {}",
                    rate::format_both(d.rate_bytes_per_sec)
                ));
            }
            if let Some(saved) = o.saved {
                let t = saved
                    .threads
                    .map_or_else(String::new, |t| format!(" × {t} threads"));
                s.push_str(&format!(
                    "; read-test measured {} with {}{t} on this file",
                    rate::format_both(saved.rate_bytes_per_sec),
                    saved.method.name()
                ));
            }
            s.push('.');
            s
        }
        _ => format!(
            "{who} read {} but no file can be named for it.",
            crate::parse::size::format_iec(o.logical_bytes)
        ),
    };
    let mut settings = loaders::settings(o.loader, way, b, n as u32, o.cufile);
    if let Some(saved) = o.saved
        && let Some(ratio) = saved.loader_ratio.filter(|r| *r > 0.0)
        && 1.0 / ratio >= GAIN_WORTH_SAYING
        && let Some(first) = settings.first_mut()
    {
        let t = saved
            .threads
            .map_or_else(String::new, |t| format!(" × {t} threads"));
        first.expected_gain = Some(format!(
            "read-test's {}{t} read this file at {}: {:.1}× the loader's rate",
            saved.method.name(),
            rate::format_both(saved.rate_bytes_per_sec),
            1.0 / ratio
        ));
    }
    Verdict {
        bottleneck: b,
        summary,
        settings,
        traps: traps(o, b),
    }
}

/// Request sizes and what was in flight: the process's read calls
/// (`syscr`, `rchar`) and its devices' requests over `seconds`.
pub(crate) fn request_shape(
    read_calls: u64,
    read_call_bytes: u64,
    devices: Option<&DeviceWindow>,
    device_read_ms: u64,
    seconds: f64,
) -> RequestShape {
    let avg = |bytes: u64, n: u64| (n > 0).then(|| bytes / n);
    let requests: u64 = devices.map_or(0, |d| d.loads.iter().map(|l| l.requests).sum());
    let device_avg = devices.and_then(|d| avg(d.bytes, requests));
    let in_flight = (devices.is_some() && seconds > 0.0 && requests > 0)
        .then(|| device_read_ms as f64 / (seconds * 1000.0));
    RequestShape {
        read_calls,
        read_call_bytes_avg: avg(read_call_bytes, read_calls),
        device_requests: requests,
        device_request_bytes_avg: device_avg,
        in_flight,
        bytes_in_flight: in_flight
            .zip(device_avg)
            .map(|(q, b)| (q * b as f64) as u64),
    }
}

/// Where the loader's bytes came from.
pub(crate) fn origin(logical: u64, storage: u64, devices: Option<&DeviceWindow>) -> ByteOrigin {
    let from_storage = storage.min(logical);
    ByteOrigin {
        loader_bytes: logical,
        storage_bytes: storage,
        page_cache_bytes: logical - from_storage,
        device_bytes: devices.map(|d| d.bytes),
        other_device_bytes: devices.map(|d| d.bytes.saturating_sub(storage)),
    }
}

/// The loader's own figure set against the window: how much of it the
/// page cache supplied, and what storage delivered.
pub(crate) fn claimed(
    rate_bytes_per_sec: f64,
    source: String,
    share: Option<f64>,
    storage_rate: f64,
    devices: Option<&DeviceWindow>,
) -> ClaimedRate {
    let pct = share.map(|s| 100.0 * s);
    let mut text = match pct {
        Some(p) => format!(
            "the loader's own figure of {} was {p:.0} % page cache: storage delivered {} to it in the window",
            rate::format_both(rate_bytes_per_sec),
            rate::format_both(storage_rate)
        ),
        None => format!(
            "the loader's own figure of {}: it read nothing from files in the window, so where those bytes came from cannot be told",
            rate::format_both(rate_bytes_per_sec)
        ),
    };
    if let Some(d) = devices
        && pct.is_some()
        && rate_bytes_per_sec > 1.2 * d.rate_bytes_per_sec
    {
        text.push_str(&format!(
            "; its devices delivered {} in all: the rest is memory speed, not the drives'",
            rate::format_both(d.rate_bytes_per_sec)
        ));
    }
    ClaimedRate {
        rate_bytes_per_sec,
        source,
        page_cache_percent: pct,
        storage_rate_bytes_per_sec: storage_rate,
        text,
    }
}

/// The last rate a loader printed in `text` (its log's tail): `12.3 GB/s`,
/// `850MB/s`, `1.2 GiB/s` (tqdm's and the loaders' own progress lines),
/// in bytes per second, with the line it is on.
pub(crate) fn last_printed_rate(text: &str) -> Option<(f64, String)> {
    // Progress bars rewrite their line with \r: each piece is a line.
    for line in text.rsplit(['\n', '\r']) {
        let b = line.as_bytes();
        let mut best: Option<(usize, f64)> = None;
        for (u, mult) in rate::RATE_UNITS {
            let mut from = 0;
            while let Some(i) = line[from..].find(u) {
                let at = from + i;
                from = at + u.len();
                let mut j = at;
                while j > 0 && b[j - 1] == b' ' {
                    j -= 1;
                }
                let end = j;
                while j > 0 && (b[j - 1].is_ascii_digit() || b[j - 1] == b'.') {
                    j -= 1;
                }
                if let Ok(v) = line[j..end].parse::<f64>()
                    && v.is_finite()
                    && v > 0.0
                    && best.is_none_or(|(p, _)| at > p)
                {
                    best = Some((at, v * mult));
                }
            }
        }
        if let Some((_, v)) = best {
            let shown: String = line.trim().chars().take(200).collect();
            return Some((v, shown));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file(way: ReadWay, profiles: Vec<Profile>, nocow: Option<bool>) -> WatchedFile {
        WatchedFile {
            path: PathBuf::from("/m/model.gguf"),
            inode: 257,
            size_bytes: 54 << 30,
            fs_type: Some("btrfs".into()),
            data_profiles: profiles,
            nocow,
            fds: vec![3],
            o_direct: way == ReadWay::Direct,
            mapped_bytes: 0,
            ways: vec![way],
            bytes_read: 10 << 30,
            bytes_source: "read calls".into(),
            rate_bytes_per_sec: 5.9e9,
            resident_bytes_before: None,
            resident_bytes_after: None,
            layout: None,
            members: None,
            note: None,
        }
    }

    static NO_LOADER: Recognised = Recognised {
        known: None,
        engine: None,
        format: None,
        evidence: Vec::new(),
        env: Vec::new(),
    };

    #[test]
    fn printed_rates_shapes_origins_and_claims() {
        let log = "Loading safetensors using InstantTensor loader: 40% | 2/5 [00:02<00:03, 3.1GB/s]\rLoading safetensors using InstantTensor loader: 60% | 3/5 [00:03<00:02, 4.2GB/s]\n";
        let (r, line) = last_printed_rate(log).unwrap();
        assert!((r - 4.2e9).abs() < 1.0, "{r}");
        assert!(line.contains("60%"), "{line}");
        assert_eq!(
            last_printed_rate("read 512 MiB/s\nnothing here\n").map(|x| x.0),
            Some(512.0 * (1u64 << 20) as f64)
        );
        assert_eq!(last_printed_rate("no rate\n.GB/s 0 GB/s"), None);
        let long = "x".repeat(1 << 20) + " 1.5 GB/s";
        assert!(last_printed_rate(&long).is_some());

        let d = DeviceWindow {
            devices: vec![],
            bytes: 400 << 20,
            rate_bytes_per_sec: 100e6,
            loads: vec![
                super::super::report::DeviceLoad {
                    name: "loop1".into(),
                    bytes: 200 << 20,
                    requests: 50,
                    busy_percent: 95.0,
                },
                super::super::report::DeviceLoad {
                    name: "loop2".into(),
                    bytes: 200 << 20,
                    requests: 50,
                    busy_percent: 20.0,
                },
            ],
        };
        let shape = request_shape(100, 400 << 20, Some(&d), 8_000, 2.0);
        assert_eq!(shape.read_call_bytes_avg, Some(4 << 20));
        assert_eq!(shape.device_request_bytes_avg, Some(4 << 20));
        assert_eq!(shape.in_flight, Some(4.0));
        assert_eq!(shape.bytes_in_flight, Some(16 << 20));
        let o = origin(1 << 30, 256 << 20, Some(&d));
        assert_eq!(o.page_cache_bytes, 768 << 20);
        assert_eq!(o.other_device_bytes, Some(144 << 20));
        let c = claimed(4e9, "--claimed".into(), Some(0.93), 0.28e9, Some(&d));
        assert!(c.text.contains("was 93 % page cache"), "{}", c.text);
        assert!(c.text.contains("memory speed"), "{}", c.text);

        // One busy member among idle ones is named; so are narrow chunks.
        let mut f = file(ReadWay::Direct, vec![Profile::Raid0], Some(true));
        f.members = Some(vec![super::super::report::MemberShare {
            devid: 1,
            device: "/dev/loop1".into(),
            bytes: 1 << 30,
        }]);
        let files = [f];
        let four = [thread(10.0, 90.0, true), thread(10.0, 90.0, true)];
        let mut o = observed(&files, &four, 0.0);
        o.devices = Some(&d);
        o.fs_members = Some(2);
        let v = verdict(&o);
        let names: Vec<&str> = v.traps.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["one-member-busy", "narrow-chunks"], "{:?}", v.traps);
    }

    fn thread(cpu: f64, wait: f64, reading: bool) -> ThreadActivity {
        ThreadActivity {
            tid: 1,
            name: "t".into(),
            read_call_bytes: if reading { 1 << 30 } else { 0 },
            storage_read_bytes: 0,
            faults: 0,
            cpu_percent: cpu,
            io_wait_percent: wait,
            reading,
        }
    }

    fn observed<'a>(
        files: &'a [WatchedFile],
        threads: &'a [ThreadActivity],
        share: f64,
    ) -> Observed<'a> {
        Observed {
            pid: 42,
            command: "strata",
            files,
            threads,
            rate: 5.9e9,
            logical_bytes: 10 << 30,
            page_cache_share: Some(share),
            devices: None,
            ceiling: None,
            loader: &NO_LOADER,
            fs_members: None,
            cufile: false,
            saved: None,
        }
    }

    #[test]
    fn the_seed_one_buffered_thread_copying_is_cpu_bound() {
        let files = [file(ReadWay::Buffered, vec![Profile::Raid0], Some(false))];
        let threads = [thread(96.0, 2.0, true), thread(0.0, 0.0, false)];
        let v = verdict(&observed(&files, &threads, 0.0));
        assert_eq!(v.bottleneck, Bottleneck::Cpu);
        assert!(
            v.summary.contains("through the page cache"),
            "{}",
            v.summary
        );
        assert!(v.summary.contains("1 thread"), "{}", v.summary);
        assert!(
            v.summary.contains("CPU-bound, not storage-bound"),
            "{}",
            v.summary
        );
        assert!(v.traps.iter().any(|t| t.name == "checksums"));
        assert!(v.settings.iter().any(|s| s.change.contains("O_DIRECT")));
        assert!(v.settings.iter().all(|s| s.expected_gain.is_none()));
        // With a saved read-test of the same file 3× faster: the gain.
        let saved = SavedRun {
            report: "saved.json".into(),
            method: crate::readtest::method::Method::Direct,
            threads: Some(4),
            rate_bytes_per_sec: 17.7e9,
            loader_ratio: Some(5.9 / 17.7),
        };
        let mut o = observed(&files, &threads, 0.0);
        o.saved = Some(&saved);
        let v = verdict(&o);
        let gain = v.settings[0].expected_gain.as_deref().unwrap();
        assert!(gain.contains("direct × 4 threads"), "{gain}");
        assert!(gain.contains("3.0× the loader's rate"), "{gain}");
    }

    #[test]
    fn warm_cache_direct_threads_and_raid1() {
        let files = [file(ReadWay::Mmap, vec![Profile::Raid1], None)];
        let one = [thread(30.0, 60.0, true)];
        let v = verdict(&observed(&files, &one, 0.95));
        assert_eq!(v.bottleneck, Bottleneck::PageCache);
        let v = verdict(&observed(&files, &one, 0.0));
        assert_eq!(v.bottleneck, Bottleneck::TooFewReaders);
        assert!(
            v.traps.iter().any(|t| t.name == "raid1-read-policy"),
            "{:?}",
            v.traps
        );
        let direct = [file(ReadWay::Direct, vec![Profile::Raid0], Some(true))];
        let four = [
            thread(10.0, 90.0, true),
            thread(10.0, 90.0, true),
            thread(10.0, 90.0, true),
            thread(10.0, 90.0, true),
        ];
        let v = verdict(&observed(&direct, &four, 0.0));
        assert_eq!(v.bottleneck, Bottleneck::Storage);
        assert!(v.summary.contains("4 threads"), "{}", v.summary);
        assert!(v.traps.is_empty());
        let mut o = observed(&direct, &four, 0.0);
        o.logical_bytes = 0;
        assert_eq!(verdict(&o).bottleneck, Bottleneck::NotReading);
        assert!(verdict(&o).summary.contains("read nothing"));
    }

    #[test]
    fn shares_and_threads() {
        assert_eq!(page_cache_share(0, 0, 0), None);
        assert_eq!(page_cache_share(100 << 20, 0, 100 << 20), Some(0.0));
        assert_eq!(page_cache_share(0, 100 << 20, 0), Some(1.0));
        assert_eq!(page_cache_share(100 << 20, 0, 200 << 20), Some(0.0));
        let d = ThreadDelta {
            faults: 100,
            cpu_seconds: 1.5,
            d_samples: 5,
            samples: 20,
            ..ThreadDelta::default()
        };
        let t = thread_activity(7, "x".into(), &d, 3.0, true);
        assert!(t.reading);
        assert!((t.cpu_percent - 50.0).abs() < 1e-9);
        assert!((t.io_wait_percent - 25.0).abs() < 1e-9);
        assert!(!thread_activity(7, "x".into(), &d, 3.0, false).reading);
    }
}
