//! The `read-test --pid` report (docs/schema/read-test-pid.schema.json),
//! which the text renderer reads too.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;
use crate::readtest::method::Method;
use crate::readtest::report::Ceiling;
use crate::sys::kernel::extents::Layout;
use crate::sys::proc::diskstats::BlockDevice;

/// How a file was read during the window.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReadWay {
    /// Read calls on a descriptor opened with O_DIRECT (fdinfo `flags:`).
    Direct,
    /// Read calls through the page cache (a descriptor without O_DIRECT).
    Buffered,
    /// Pages of a mapping touched (`/proc/PID/smaps` Rss grew).
    Mmap,
}

impl ReadWay {
    /// The name used in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ReadWay::Direct => "O_DIRECT",
            ReadWay::Buffered => "buffered read()",
            ReadWay::Mmap => "mmap",
        }
    }
}

/// One file the process read while it was watched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WatchedFile {
    /// The path, as the process sees it (`/proc/PID/fd`, `/proc/PID/maps`).
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// Inode number.
    pub inode: u64,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Filesystem type (null when the file could not be opened).
    pub fs_type: Option<String>,
    /// btrfs data profiles (empty elsewhere).
    pub data_profiles: Vec<Profile>,
    /// NOCOW (btrfs: no data checksums); null elsewhere or unknown.
    pub nocow: Option<bool>,
    /// Its descriptors in the process.
    pub fds: Vec<u32>,
    /// A descriptor has O_DIRECT.
    pub o_direct: bool,
    /// Bytes of the process's address space mapping it.
    pub mapped_bytes: u64,
    /// How it was read in the window (most bytes first).
    pub ways: Vec<ReadWay>,
    /// Bytes read in the window, as far as they can be told apart per file:
    /// descriptor positions, the read calls of the process, the growth of
    /// its mappings' resident bytes.
    pub bytes_read: u64,
    /// Where `bytes_read` comes from.
    pub bytes_source: String,
    /// `bytes_read` per second of the window.
    pub rate_bytes_per_sec: f64,
    /// Bytes of the file in the page cache at the start and the end
    /// (mincore); null when they could not be counted.
    pub resident_bytes_before: Option<u64>,
    /// At the end.
    pub resident_bytes_after: Option<u64>,
    /// How the bytes are stored (FIEMAP); null where unavailable.
    pub layout: Option<Layout>,
    /// Which members of the btrfs hold its bytes (FIEMAP addresses mapped
    /// through the chunk tree, a copy on each mirror counted on each), most
    /// first; null elsewhere, or without root (the chunk tree is root's).
    #[serde(default)]
    pub members: Option<Vec<MemberShare>>,
    /// Anything else worth saying.
    pub note: Option<String>,
}

/// The bytes of a file one member holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberShare {
    /// btrfs device id.
    pub devid: u64,
    /// Its device path (`/dev/nvme0n1p2`; `missing` when absent).
    pub device: String,
    /// Bytes of the file on it.
    pub bytes: u64,
}

/// One thread of the process in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadActivity {
    /// Thread id.
    pub tid: u32,
    /// Its name.
    pub name: String,
    /// Bytes its read calls returned (`rchar` of task/TID/io).
    pub read_call_bytes: u64,
    /// Bytes it caused to be read from storage (`read_bytes`).
    pub storage_read_bytes: u64,
    /// Page faults (minor + major) it took.
    pub faults: u64,
    /// CPU time used per second of the window, percent (user + system).
    pub cpu_percent: f64,
    /// Share of the samples it was waiting on I/O (state D), percent.
    pub io_wait_percent: f64,
    /// Counted as a reader (read calls, storage reads or faults on a
    /// watched mapping).
    pub reading: bool,
}

/// What the file's block devices delivered in the same window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceWindow {
    /// The devices (every member of a btrfs).
    pub devices: Vec<BlockDevice>,
    /// Bytes they read (`/proc/diskstats`), by anyone.
    pub bytes: u64,
    /// Per second.
    pub rate_bytes_per_sec: f64,
    /// Each device in the window.
    #[serde(default)]
    pub loads: Vec<DeviceLoad>,
}

/// What holds the loader back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Bottleneck {
    /// Nothing read from files in the window.
    NotReading,
    /// The bytes came from the page cache: memory speed, not storage.
    PageCache,
    /// The reading threads are busy on the CPU (copying, checksums).
    Cpu,
    /// The devices deliver what `links` says they can.
    StorageCeiling,
    /// The readers wait on storage, and too few requests are in flight
    /// (one reader, or buffered/mmap readahead) to fill the devices.
    TooFewReaders,
    /// The readers wait on storage with several requests in flight.
    Storage,
    /// None of the above stands out.
    Unclear,
}

impl Bottleneck {
    /// The name used in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::NotReading => "not-reading",
            Bottleneck::PageCache => "page-cache",
            Bottleneck::Cpu => "cpu",
            Bottleneck::StorageCeiling => "storage-ceiling",
            Bottleneck::TooFewReaders => "too-few-readers",
            Bottleneck::Storage => "storage",
            Bottleneck::Unclear => "unclear",
        }
    }
}

/// The setting to change, for a known program or in general.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Setting {
    /// The program it applies to (`llama.cpp`, `LM Studio`,
    /// `fastsafetensors`, `any`).
    pub program: String,
    /// What to change.
    pub change: String,
    /// Where that comes from (docs/loaders.md lists them).
    pub source: String,
    /// What `read-test` measured on the same file against the loader's
    /// rate (with `--saved`): the gain to expect from reading as it did.
    #[serde(default)]
    pub expected_gain: Option<String>,
}

/// The loader recognised (docs/loaders.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoaderSeen {
    /// The reader: `llama.cpp`, `LM Studio`, `fastsafetensors`,
    /// `InstantTensor`, `KvikIO`, `Run:ai Model Streamer`, `safetensors`.
    pub program: String,
    /// The serving engine around it (`vLLM`, `SGLang`).
    pub engine: Option<String>,
    /// The engine's `--load-format`, or llama.cpp's load mode.
    pub format: Option<String>,
    /// The signals it was recognised by (command line, parents, mapped
    /// libraries, environment).
    pub recognised_by: Vec<String>,
    /// Its settings read from the environment it started with
    /// (`KVIKIO_NTHREADS=8`).
    pub environment: Vec<String>,
    /// How it reads by default.
    pub default_way: String,
}

/// One device in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceLoad {
    /// Kernel name (`nvme0n1`, `loop3`).
    pub name: String,
    /// Bytes it read.
    pub bytes: u64,
    /// Read requests it completed.
    pub requests: u64,
    /// Share of the window it had I/O in flight, percent (io_ticks).
    pub busy_percent: f64,
}

/// How the reads were shaped: request sizes and what was in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RequestShape {
    /// Read calls of the process (`syscr`).
    pub read_calls: u64,
    /// Mean bytes a read call returned (null without read calls).
    pub read_call_bytes_avg: Option<u64>,
    /// Read requests the devices completed (by anyone).
    pub device_requests: u64,
    /// Mean bytes of a device request.
    pub device_request_bytes_avg: Option<u64>,
    /// Mean reads in flight on the devices, summed over them (their read
    /// milliseconds divided by the window's).
    pub in_flight: Option<f64>,
    /// `in_flight` × the mean request: bytes in flight.
    pub bytes_in_flight: Option<u64>,
}

/// Where the bytes the loader read came from, in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ByteOrigin {
    /// What the loader read (read calls + mapped in).
    pub loader_bytes: u64,
    /// What it caused to be read from storage (`read_bytes`).
    pub storage_bytes: u64,
    /// What the page cache supplied without storage.
    pub page_cache_bytes: u64,
    /// What the devices of its file read, by anyone (`/proc/diskstats`).
    pub device_bytes: Option<u64>,
    /// Device bytes the loader did not ask for (other readers, readahead
    /// of other files, btrfs metadata).
    pub other_device_bytes: Option<u64>,
}

/// The loader's own figure of its rate, set against where the bytes came
/// from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClaimedRate {
    /// The figure, bytes per second.
    pub rate_bytes_per_sec: f64,
    /// Where it came from: `--claimed`, or the loader's log (its
    /// standard output or error, a regular file) and the line.
    pub source: String,
    /// Share of it the page cache supplied, percent (the window's share).
    pub page_cache_percent: Option<f64>,
    /// What storage delivered to the loader in the window, per second.
    pub storage_rate_bytes_per_sec: f64,
    /// One sentence.
    pub text: String,
}

/// A btrfs-specific trap that applies to this file and this loader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trap {
    /// Short name: `raid1-read-policy`, `checksums`, `compressed`,
    /// `gds-compat-mode`.
    pub name: String,
    /// What it means here.
    pub text: String,
}

/// A saved `read-test --json` run of the same file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SavedRun {
    /// The report it came from.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub report: PathBuf,
    /// Its fastest method.
    pub method: Method,
    /// Its threads (direct, direct-copy).
    pub threads: Option<u32>,
    /// Its median rate.
    pub rate_bytes_per_sec: f64,
    /// The loader's rate divided by it.
    pub loader_ratio: Option<f64>,
}

/// How the window ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WindowEnd {
    /// Watched for the whole time asked.
    Complete,
    /// The process exited first; what was seen until then is reported.
    Exited,
    /// The pid was given to another process (a later start time); what the
    /// first one did until then is reported.
    PidReused,
}

/// `read-test --pid` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WatchReport {
    /// The process.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// Its command line (shortened).
    pub command_line: String,
    /// Start of the window, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Seconds watched (up to the last sample of a process that exited).
    pub seconds: f64,
    /// How the window ended.
    pub window_end: WindowEnd,
    /// One sentence: how it reads, at what rate, what holds it back.
    pub summary: String,
    /// What holds it back.
    pub bottleneck: Bottleneck,
    /// The process exit status that goes with the report (0).
    pub exit_code: u8,
    /// Bytes the process's read calls returned (`rchar`), all threads.
    pub read_call_bytes: u64,
    /// Bytes the process caused to be read from storage (`read_bytes`).
    pub storage_read_bytes: u64,
    /// Bytes its watched mappings gained in resident memory.
    pub mapped_in_bytes: u64,
    /// What the process read from files per second (read calls + mapped in).
    pub rate_bytes_per_sec: f64,
    /// Share of what it read that the page cache supplied without storage,
    /// 0 to 1 (null when it read nothing).
    pub page_cache_share: Option<f64>,
    /// Threads that read.
    pub reading_threads: u32,
    /// Every thread.
    pub threads: Vec<ThreadActivity>,
    /// The files it read, most bytes first.
    pub files: Vec<WatchedFile>,
    /// Regular files open or mapped that were not read in the window.
    pub idle_files: usize,
    /// What the devices of the main file delivered.
    pub devices: Option<DeviceWindow>,
    /// The devices' ceiling from `links` (PCIe NVMe only).
    pub ceiling: Option<Ceiling>,
    /// The program, when it is one of docs/loaders.md.
    pub known_program: Option<String>,
    /// The loader recognised, and by what.
    #[serde(default)]
    pub loader: Option<LoaderSeen>,
    /// Request sizes and what was in flight.
    #[serde(default)]
    pub requests: Option<RequestShape>,
    /// Where the bytes came from.
    #[serde(default)]
    pub origin: Option<ByteOrigin>,
    /// The loader's own rate figure (`--claimed`, or its log), checked.
    #[serde(default)]
    pub claimed: Option<ClaimedRate>,
    /// What to change, most useful first.
    pub settings: Vec<Setting>,
    /// btrfs traps that apply.
    pub traps: Vec<Trap>,
    /// The saved `read-test` run given with `--saved`.
    pub saved_run: Option<SavedRun>,
    /// Things to know.
    pub notes: Vec<String>,
    /// Descriptors that are not regular files (FIFOs, devices, sockets)
    /// or were opened with `O_PATH`: named, never opened nor read.
    #[serde(default)]
    pub skipped_descriptors: Vec<crate::sys::proc::fdinfo::SkippedFd>,
}
