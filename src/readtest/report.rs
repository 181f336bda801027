//! The `read-test` report: the JSON contract (docs/json.md) that the text
//! renderer reads too.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::CacheMode;
use super::analysis::{ChecksumCheck, Hedge, MethodSummary, Situation, Verdict, Winner};
use super::digest::VerifyMode;
use super::method::Method;
use crate::model::profile::Profile;
use crate::sys::kernel::extents::Layout;
use crate::sys::proc::diskstats::BlockDevice;

/// The file and where it lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileInfo {
    /// Canonical path.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The exact bytes of `path` (an array of 0-255), present only when
    /// they are not UTF-8 (`path` then shows U+FFFD in their place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Filesystem type.
    pub fs_type: String,
    /// Its mount point.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub mount_point: PathBuf,
    /// The mount's source.
    pub source: String,
    /// The filesystem keeps files in memory (tmpfs, ramfs).
    pub memory_backed: bool,
    /// btrfs data profiles; empty elsewhere.
    pub data_profiles: Vec<Profile>,
    /// The block devices whose reads are counted (all btrfs members).
    pub devices: Vec<BlockDevice>,
    /// How the bytes are stored (FIEMAP); null where unavailable.
    pub layout: Option<Layout>,
    /// How wide the chunks holding its bytes are striped, against the
    /// array's full width (btrfs with striped data, read as root); null
    /// otherwise.
    #[serde(default)]
    pub stripe_widths: Option<StripeWidths>,
    /// The file's owner.
    pub owner_uid: u32,
    /// Root read a file that the invoking user (`SUDO_UID` if set, else
    /// the real uid) does not own: its size and checksum are shown to
    /// someone who may not be allowed to read it (a note says so).
    pub read_as_root_for_another_user: bool,
}

/// How wide the chunks holding the file are striped (btrfs, striped data
/// profiles: RAID0, RAID10, RAID5/6; read from the chunk tree, root only).
/// Data written before a device was added stays in chunks narrower than
/// the array, and reads of it use fewer devices than there are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StripeWidths {
    /// The striped data profile holding the file's bytes.
    pub profile: Profile,
    /// Stripes a new chunk of it gets on this array (its present members).
    pub full_width: u32,
    /// The file's bytes by the stripe count of the chunks holding them,
    /// narrowest first.
    pub bytes_by_width: Vec<WidthBytes>,
    /// Bytes of the file in chunks narrower than `full_width`.
    pub narrow_bytes: u64,
    /// The devices a read of the file uses, on average over its bytes (each
    /// chunk's data stripes: RAID0's stripes, RAID10's half, RAID5/6 less
    /// parity).
    pub read_stripes: f64,
    /// The devices a read of a full-width chunk uses.
    pub full_read_stripes: u32,
}

/// The file's bytes in chunks of one stripe count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WidthBytes {
    /// Stripes of the chunks (`num_stripes`).
    pub stripes: u32,
    /// The file's bytes in them.
    pub bytes: u64,
}

/// The settings of the test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Parameters {
    /// Methods, in the order of the first round.
    pub methods: Vec<Method>,
    /// Rounds.
    pub rounds: u32,
    /// Threads of direct and direct-copy.
    pub threads: u32,
    /// Bytes per chunk (one pread of a thread).
    pub chunk_bytes: u64,
    /// threads × chunk: bytes direct keeps in flight.
    pub in_flight_bytes: u64,
    /// `--buffer` as given.
    pub buffer_bytes: u64,
    /// Checksum mode.
    pub verify: VerifyMode,
    /// `--drop-caches`.
    pub drop_caches: bool,
    /// Every thread count of direct and direct-copy (`--threads LIST`),
    /// smallest first; `threads` is the largest.
    #[serde(default)]
    pub thread_counts: Vec<u32>,
    /// `cold`, `warm` or `both`: the cache situations measured.
    #[serde(default = "cold_mode")]
    pub cache: CacheMode,
    /// Why, when `--cache` was not given.
    #[serde(default)]
    pub cache_default_reason: Option<String>,
}

fn cold_mode() -> CacheMode {
    CacheMode::Cold
}

/// The knee of a thread sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Knee {
    /// Cold or warm.
    pub cache: Situation,
    /// direct or direct-copy.
    pub method: Method,
    /// The fewest threads within 5 % of the best median.
    pub threads: u32,
    /// The median at those threads.
    pub rate_bytes_per_sec: f64,
    /// The best median of the sweep.
    pub best_rate_bytes_per_sec: f64,
}

/// The read ceiling of the file's devices, as `links` computes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ceiling {
    /// One reader, after line encoding, bytes per second: what the
    /// percentages are of.
    pub bytes_per_sec: u64,
    /// The practical high end (0.9 of it).
    pub practical_high_bytes_per_sec: u64,
    /// The data profile it was computed for.
    pub profile: Profile,
    /// `links`' sentence about it.
    pub summary: String,
}

/// O_DIRECT here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectIo {
    /// direct and direct-copy read with O_DIRECT.
    pub used: bool,
    /// Why not, when not.
    pub note: Option<String>,
    /// Offset and length alignment of O_DIRECT reads.
    pub offset_align_bytes: u64,
    /// Memory alignment.
    pub memory_align_bytes: u64,
    /// `statx` (STATX_DIOALIGN) or `default` (the filesystem does not say).
    pub align_source: String,
}

/// The destination buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Destination {
    /// Bytes (a ring when smaller than the file).
    pub bytes: u64,
    /// Slots of one chunk each.
    pub slots: u64,
    /// What backs it: pages of the kernel's huge page pool when it had
    /// enough free (as fio's `iomem=mmaphuge`), else transparent huge pages.
    pub backing: Backing,
    /// Bytes of it in huge pages (the pool's, or transparent ones); null if
    /// unknown.
    pub huge_page_bytes: Option<u64>,
    /// Seconds it took to map and fault in, before any timing.
    pub prefault_seconds: f64,
    /// Bounce buffers of direct-copy, all threads together.
    pub bounce_bytes: u64,
}

/// What backs the destination buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    /// `MAP_HUGETLB`: pages of the pool `vm.nr_hugepages` reserves.
    HugePagePool,
    /// `MADV_HUGEPAGE` on ordinary memory: huge where the kernel found them.
    TransparentHugePages,
}

impl Backing {
    /// As said in text.
    pub fn describe(self) -> &'static str {
        match self {
            Backing::HugePagePool => "the huge page pool",
            Backing::TransparentHugePages => "transparent",
        }
    }
}

/// How the cache was made cold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheInfo {
    /// `fadvise` (fsync + POSIX_FADV_DONTNEED), `drop-caches` (also
    /// /proc/sys/vm/drop_caches), `none` (memory-backed file) or `skipped`
    /// (test hook).
    pub eviction: String,
    /// `cachestat` (Linux 6.5+) or `mincore` when residency was checked
    /// before each run, else null.
    pub verified_by: Option<String>,
    /// Why it was not checked, when it was not (and not memory-backed).
    pub note: Option<String>,
}

/// Everything `read-test` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReadTestReport {
    /// The file as given.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The process exit status that goes with the report.
    pub exit_code: u8,
    /// One sentence: who won and by how much.
    pub summary: String,
    /// Kernel release.
    pub kernel: String,
    /// The file.
    pub file: FileInfo,
    /// Settings.
    pub parameters: Parameters,
    /// O_DIRECT.
    pub direct_io: DirectIo,
    /// The destination.
    pub destination: Destination,
    /// Cache eviction.
    pub cache: CacheInfo,
    /// One entry per method.
    pub methods: Vec<MethodSummary>,
    /// The fastest method with a result.
    pub winner: Option<Winner>,
    /// Did every method read the same bytes?
    pub checksum: ChecksumCheck,
    /// Things to know, most important first.
    pub notes: Vec<String>,
    /// One entry per method with the whole file in the page cache (empty
    /// unless the warm cache was measured). `methods` is the cold cache.
    #[serde(default)]
    pub warm_methods: Vec<MethodSummary>,
    /// Every thread count of the threaded methods, per cache situation
    /// (empty unless `--threads` listed several counts). The method lists
    /// hold the knee's row.
    #[serde(default)]
    pub sweep: Vec<MethodSummary>,
    /// The knee of each sweep.
    #[serde(default)]
    pub knees: Vec<Knee>,
    /// The fair verdict per cache situation.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    /// What to use when the cache situation cannot be known (both measured).
    #[serde(default)]
    pub hedge: Option<Hedge>,
    /// One line per situation, and the hedge.
    #[serde(default)]
    pub advice: String,
    /// The devices' ceiling from `links` (PCIe NVMe only), null otherwise.
    #[serde(default)]
    pub ceiling: Option<Ceiling>,
}

/// The summary sentence: the verdict of the one situation measured, or
/// the advice over both.
pub fn summary_sentence(
    verdicts: &[Verdict],
    advice: &str,
    checksum: &ChecksumCheck,
    size: u64,
) -> String {
    if !checksum.agree {
        return format!(
            "The methods read different bytes ({}): a figure means nothing until that is explained.",
            checksum.mismatches.join(", ")
        );
    }
    if size == 0 {
        return "The file is empty: there is nothing to measure.".to_owned();
    }
    if verdicts.iter().all(|v| v.method.is_none()) {
        return "No method has a result: every one was flagged or unsupported.".to_owned();
    }
    match verdicts {
        [one] => format!("{}.", capitalise(&one.text)),
        _ => format!("{}.", capitalise(advice)),
    }
}

/// A verdict with one method measured, when that method was swept over
/// thread counts: the sweep compared those, so its result is the verdict
/// ("cold: direct with 4 threads (…), the fewest threads within 5% of the
/// sweep's best (…)") instead of "nothing to compare it with".
pub fn sweep_verdict(v: &mut Verdict, knees: &[Knee]) {
    if v.kind != super::analysis::VerdictKind::Only {
        return;
    }
    if let Some(k) = knees
        .iter()
        .find(|k| k.cache == v.cache && Some(k.method) == v.method)
    {
        use crate::report::rate::{format_both, gib_per_s, number};
        v.text = format!(
            "{}: {} with {}, {}: the fewest threads within 5% of the thread sweep's best, {} GiB/s",
            v.cache.name(),
            k.method,
            crate::report::text::count(u64::from(k.threads), "thread", "threads"),
            format_both(k.rate_bytes_per_sec),
            number(gib_per_s(k.best_rate_bytes_per_sec))
        );
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(agree: bool) -> ChecksumCheck {
        ChecksumCheck {
            mode: VerifyMode::Sampled,
            block_bytes: 4096,
            blocks: 1,
            reference: Some(Method::Buffered),
            digest: None,
            agree,
            direct_matches_buffered: None,
            mismatches: if agree {
                vec![]
            } else {
                vec!["direct round 1".into()]
            },
        }
    }

    #[test]
    fn sentences() {
        let v = crate::readtest::analysis::verdict(Situation::Cold, &[]);
        assert!(
            summary_sentence(std::slice::from_ref(&v), "", &check(false), 1)
                .contains("direct round 1")
        );
        assert!(summary_sentence(&[], "", &check(true), 0).contains("empty"));
        assert!(
            summary_sentence(std::slice::from_ref(&v), "", &check(true), 5).contains("No method")
        );
    }
}
