//! `btrfs-lab read-test FILE`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use btrfs_lab::error::Result;
use btrfs_lab::model::profile::profile_list;
use btrfs_lab::readtest::analysis::{MethodSummary, Status};
use btrfs_lab::readtest::digest::VerifyMode;
use btrfs_lab::readtest::watch::report::WatchReport;
use btrfs_lab::readtest::watch::{self, WatchOptions};
use btrfs_lab::readtest::{self, CacheMode, Method, ReadTestOptions, ReadTestReport};
use btrfs_lab::report::rate;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;

use super::output::{Output, Paint, field, wrap};
use super::units::{UnitArgs, rate_arg, size, size_arg};

pub const AFTER_HELP: &str = "\
Methods (all by default; each round runs them in a rotating order):
  direct       O_DIRECT, --threads threads take --chunk chunks from a shared
               counter and pread them straight into the destination
  direct-copy  O_DIRECT into a bounce buffer per thread, then memcpy
  buffered     read() through the page cache, one thread, 1 MiB calls
  dontcache    preadv2(RWF_DONTCACHE), one thread, 1 MiB calls (Linux 6.14+)
  mmap         one thread touching every page of a MADV_SEQUENTIAL mapping

Before every run the file's pages are evicted (fsync, POSIX_FADV_DONTNEED) and
mincore proves none stayed. The reads of the file's block devices (every member
of a btrfs) are counted around each run: a method that claims more than the
devices moved plus what the cache, holes and compression explain is flagged, and
its figures are not reported. A checksum shows every method read the same bytes.

Exit status: 0 measured, 3 the methods read different bytes, 1 error, 2 bad
arguments, 130 interrupted.";

#[derive(Debug, Clone, Copy, ValueEnum)]
enum MethodArg {
    Direct,
    DirectCopy,
    Buffered,
    Dontcache,
    Mmap,
}

impl From<MethodArg> for Method {
    fn from(m: MethodArg) -> Self {
        match m {
            MethodArg::Direct => Method::Direct,
            MethodArg::DirectCopy => Method::DirectCopy,
            MethodArg::Buffered => Method::Buffered,
            MethodArg::Dontcache => Method::Dontcache,
            MethodArg::Mmap => Method::Mmap,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CacheArg {
    /// The file's pages evicted before every run (a first load).
    Cold,
    /// The whole file in the page cache before every run (a reload).
    Warm,
    /// Cold, then warm.
    Both,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum VerifyArg {
    /// One 4 KiB block per MiB: cheap enough to leave on.
    Sampled,
    /// Every byte (costs CPU, which the CPU figures then include).
    Full,
}

#[derive(Debug, Args)]
#[command(override_usage = "btrfs-lab read-test [OPTIONS] <FILE>
       btrfs-lab read-test --pid <PID> [--seconds <N>] [OPTIONS]")]
pub struct ReadTestArgs {
    /// The file to read (a model file, a disk image); symbolic links are followed.
    #[arg(required_unless_present = "pid")]
    file: Option<PathBuf>,
    /// Watch a running program instead: how it reads the files it loads,
    /// what holds it back, and which of its settings to change (read-only).
    #[arg(long, value_name = "PID", conflicts_with_all = ["file", "methods", "rounds", "threads", "cache", "chunk", "buffer", "drop_caches", "verify"])]
    pid: Option<u32>,
    /// With --pid: how long to watch, in seconds [default: 10].
    #[arg(long, value_name = "N")]
    seconds: Option<u32>,
    /// With --pid: a saved `read-test FILE --json` run of the same file, set beside the loader's rate.
    #[arg(long, value_name = "SAVED.json")]
    saved: Option<PathBuf>,
    /// With --pid: the rate the loader printed (4GB/s, 850MiB/s): how much of it was page cache.
    #[arg(long, value_name = "RATE", value_parser = rate_arg)]
    claimed: Option<f64>,
    /// Methods to compare, comma-separated [default: all].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    methods: Vec<MethodArg>,
    /// Rounds (the medians decide).
    #[arg(long, default_value_t = readtest::DEFAULT_ROUNDS, value_name = "N")]
    rounds: u32,
    /// Reader threads of direct and direct-copy; a list (1,2,4,8,16) sweeps them and names the knee.
    #[arg(long, value_delimiter = ',', default_value = "4", value_name = "LIST")]
    threads: Vec<u32>,
    /// Cache situations to measure [default: both when the file fits in memory, cold otherwise].
    #[arg(long, value_enum, value_name = "WHICH")]
    cache: Option<CacheArg>,
    /// Bytes per pread of a thread [default: 8M, more below 4 threads so that 32M are in flight].
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    chunk: Option<u64>,
    /// Destination buffer; reused as a ring when the file is larger [default: 2 × threads × chunk, 64M].
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    buffer: Option<u64>,
    /// Also drop the whole page cache before each run (root).
    #[arg(long)]
    drop_caches: bool,
    /// How much of what was read is checksummed.
    #[arg(long, value_enum, default_value = "sampled")]
    verify: VerifyArg,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(args: ReadTestArgs, out: &Output) -> Result<u8> {
    signals::install()?;
    args.units.select();
    if args.pid.is_none()
        && (args.seconds.is_some() || args.saved.is_some() || args.claimed.is_some())
    {
        return Err(btrfs_lab::error::Error::usage(
            "--seconds, --saved and --claimed go with --pid: a read-test of a file is sized with --rounds",
        ));
    }
    let sysroot = SysRoot::from_option(args.sysroot.as_deref(), out);
    let Some(file) = args.file.clone() else {
        let opts = WatchOptions {
            pid: args.pid.unwrap_or(0),
            seconds: args.seconds.unwrap_or(watch::DEFAULT_SECONDS),
            saved: args.saved.clone(),
            claimed: args.claimed,
            sysroot,
        };
        let report = watch::run(&opts, out)?;
        out.report(&report, |r| render_watch(r, out.paint));
        return Ok(report.exit_code);
    };
    let report = readtest::run(&args.options(file, sysroot), out)?;
    out.report(&report, |r| render(r, out.paint));
    Ok(report.exit_code)
}

impl ReadTestArgs {
    /// The options of a read-test of `file`.
    fn options(self, file: PathBuf, sysroot: SysRoot) -> ReadTestOptions {
        let mut opts = ReadTestOptions::new(file);
        if !self.methods.is_empty() {
            opts.methods = self.methods.into_iter().map(Method::from).collect();
        }
        opts.rounds = self.rounds;
        opts.threads = self.threads;
        opts.cache = self.cache.map(|c| match c {
            CacheArg::Cold => CacheMode::Cold,
            CacheArg::Warm => CacheMode::Warm,
            CacheArg::Both => CacheMode::Both,
        });
        opts.chunk = self.chunk;
        opts.buffer = self.buffer;
        opts.drop_caches = self.drop_caches;
        opts.verify = match self.verify {
            VerifyArg::Sampled => VerifyMode::Sampled,
            VerifyArg::Full => VerifyMode::Full,
        };
        opts.sysroot = sysroot;
        opts
    }
}

/// GiB/s with two decimals, three below 0.1 (small files, slow disks).
fn gib_per_s(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| rate::number(rate::gib_per_s(r)))
}

fn status_painted(m: &MethodSummary, paint: Paint) -> String {
    match m.status {
        Status::Ok if m.o_direct == Some(false) => paint.warn("ok, no O_DIRECT"),
        Status::Ok => paint.good("ok"),
        Status::Flagged => paint.bad("flagged"),
        Status::Unsupported => paint.dim("unsupported"),
    }
}

/// The text report.
pub fn render(r: &ReadTestReport, paint: Paint) -> String {
    let mut t = render_heading(r, paint);
    render_tables(&mut t, r, paint);
    render_setup(&mut t, r, paint);
    render_problems_and_notes(&mut t, r, paint);
    t
}

/// The file, where it lives, and the headline.
fn render_heading(r: &ReadTestReport, paint: Paint) -> String {
    let f = &r.file;
    let mut where_ = f.fs_type.clone();
    if f.fs_type == "btrfs" {
        where_.push_str(&format!(" {}", profile_list(&f.data_profiles)));
    }
    if !f.devices.is_empty() {
        let names: Vec<&str> = f.devices.iter().map(|d| d.name.as_str()).collect();
        where_.push_str(&format!(" on {}", names.join(", ")));
    }
    let mut t = field(
        &format!("{} ", paint.bold("read-test")),
        &format!(
            "{} ({}, {where_})",
            btrfs_lab::report::text::escape_path(&f.path),
            size(f.size_bytes)
        ),
        "  ",
        str::to_owned,
    );
    let summary = btrfs_lab::report::text::escape_control(&r.summary);
    t.push_str(&field("", &summary, "  ", |s| {
        if r.checksum.agree {
            s.to_owned()
        } else {
            paint.bad(s)
        }
    }));
    t.push('\n');

    t
}

/// The method tables (cold, warm), the thread sweep, the ceiling and the
/// verdicts the headline did not say.
fn render_tables(t: &mut String, r: &ReadTestReport, paint: Paint) {
    let has_ceiling = r.ceiling.is_some();
    let tables: Vec<(&str, &[MethodSummary])> = [
        ("cold cache", r.methods.as_slice()),
        (
            "warm cache (whole file resident)",
            r.warm_methods.as_slice(),
        ),
    ]
    .into_iter()
    .filter(|(_, l)| !l.is_empty())
    .collect();
    let several = tables.len() > 1;
    for (title, list) in &tables {
        if several || r.parameters.cache != CacheMode::Cold {
            t.push_str(&format!("  {}\n", paint.bold(title)));
        }
        t.push_str(&method_table(list, has_ceiling, paint));
        t.push('\n');
    }
    if !r.sweep.is_empty() {
        t.push_str(&format!("  {}\n", paint.bold("thread sweep")));
        t.push_str(&sweep_table(r, paint));
        t.push('\n');
    }
    if let Some(c) = &r.ceiling {
        t.push_str(&wrap_labelled(
            "ceiling",
            &format!(
                "{} for one reader ({}, from links): % is of it",
                rate::format_both(c.bytes_per_sec as f64),
                c.profile
            ),
        ));
    }
    // Each sentence once: what the headline says is not repeated.
    let said = |text: &str| r.summary.to_lowercase().contains(&text.to_lowercase());
    for v in &r.verdicts {
        if !said(&v.text) {
            t.push_str(&wrap_labelled("verdict", &v.text));
        }
    }
    if r.verdicts.len() > 1 && !said(&r.advice) {
        t.push_str(&wrap_labelled("advice", &r.advice));
    }
}

/// How the runs were made: checksums, O_DIRECT, threads, destination,
/// cache, rounds.
fn render_setup(t: &mut String, r: &ReadTestReport, paint: Paint) {
    let f = &r.file;
    let c = &r.checksum;
    let (checksum, mismatch) = if c.blocks == 0 {
        ("nothing to compare (empty file)".to_owned(), false)
    } else if c.agree {
        let mut s = format!(
            "every run read the same bytes ({}: {} blocks of {} per run)",
            c.mode.name(),
            c.blocks,
            size(c.block_bytes)
        );
        if c.direct_matches_buffered == Some(true) {
            s.push_str("; direct = buffered");
        }
        (s, false)
    } else {
        (
            format!(
                "MISMATCH: {} differ from {}",
                c.mismatches.join(", "),
                c.reference.map_or("the first run", Method::name)
            ),
            true,
        )
    };
    t.push_str(&field(
        &format!("  {:<12} ", "checksum"),
        &checksum,
        LABELLED,
        |s| {
            if mismatch { paint.bad(s) } else { s.to_owned() }
        },
    ));
    let d = &r.direct_io;
    let direct = if d.used {
        format!(
            "used, {}-byte alignment ({})",
            d.offset_align_bytes,
            if d.align_source == "statx" {
                "statx"
            } else {
                "default: the filesystem does not say"
            }
        )
    } else {
        "not used (see notes)".to_owned()
    };
    t.push_str(&wrap_labelled("O_DIRECT", &direct));
    let p = &r.parameters;
    t.push_str(&wrap_labelled(
        "threads",
        &format!(
            "{}{} × {} chunks = {} in flight",
            if p.thread_counts.len() > 1 {
                format!(
                    "swept {}; at most ",
                    p.thread_counts
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            } else {
                String::new()
            },
            p.threads,
            size(p.chunk_bytes),
            size(p.in_flight_bytes)
        ),
    ));
    let dest = &r.destination;
    let huge = dest.huge_page_bytes.map_or_else(
        || "huge pages unknown".to_owned(),
        |h| format!("{} in huge pages ({})", size(h), dest.backing.describe()),
    );
    let kind = if dest.bytes < f.size_bytes {
        format!("ring of {} slots", dest.slots)
    } else {
        "holds the whole file".to_owned()
    };
    t.push_str(&wrap_labelled(
        "destination",
        &format!(
            "{} ({kind}), {huge}, prefaulted in {:.2} s",
            size(dest.bytes),
            dest.prefault_seconds
        ),
    ));
    let checked = if let Some(by) = &r.cache.verified_by {
        match (r.methods.is_empty(), r.warm_methods.is_empty()) {
            (_, true) => format!("{by} found it cold"),
            (true, false) => {
                format!("warm runs: the file read in first, {by} found every page resident")
            }
            (false, false) => {
                format!(
                    "{by} found it cold (warm runs: read in first, {by} found every page resident)"
                )
            }
        }
    } else {
        "NOT checked (see notes)".to_owned()
    };
    let cache = match r.cache.eviction.as_str() {
        "none" => "nothing to evict: the file lives in memory".to_owned(),
        "skipped" => "NOT evicted and NOT checked (test hook)".to_owned(),
        "drop-caches" => {
            format!("fsync, fadvise DONTNEED and drop_caches before each run; {checked}")
        }
        _ => format!("fsync and fadvise DONTNEED before each run; {checked}"),
    };
    t.push_str(&wrap_labelled("cache", &cache));
    t.push_str(&wrap_labelled(
        "rounds",
        &format!(
            "{}, methods in rotating order; kernel {}",
            p.rounds, r.kernel
        ),
    ));
}

/// The methods not reported, and the notes.
fn render_problems_and_notes(t: &mut String, r: &ReadTestReport, paint: Paint) {
    let problems: Vec<String> = r
        .methods
        .iter()
        .filter_map(|m| m.reason.as_ref().map(|why| format!("{}: {why}", m.method)))
        .collect();
    if !problems.is_empty() {
        t.push_str(&format!("\n{}\n", paint.bold("not reported")));
        for p in &problems {
            t.push_str(&wrap_item(p));
        }
    }
    if !r.notes.is_empty() {
        t.push_str(&format!("\n{}\n", paint.bold("notes")));
        for n in &r.notes {
            t.push_str(&wrap_item(&btrfs_lab::report::text::escape_control(n)));
        }
    }
}

/// The columns of one method table.
fn method_table(list: &[MethodSummary], has_ceiling: bool, paint: Paint) -> String {
    let mut t = format!("  {}\n", paint.dim(&table_header(has_ceiling)));
    for m in list {
        t.push_str(&method_row(m, &method_name(m), has_ceiling, paint));
    }
    t
}

fn method_name(m: &MethodSummary) -> String {
    match m.threads {
        Some(n) => format!("{}×{n}", m.method.name()),
        None => m.method.name().to_owned(),
    }
}

fn method_row(m: &MethodSummary, name: &str, has_ceiling: bool, paint: Paint) -> String {
    let spread = match (m.rate_bytes_per_sec_min, m.rate_bytes_per_sec_max) {
        (Some(a), Some(b)) => format!("{}–{}", gib_per_s(Some(a)), gib_per_s(Some(b))),
        _ => "-".to_owned(),
    };
    let cpu = m
        .cpu_seconds_per_gib_median
        .map_or_else(|| "-".to_owned(), |c| format!("{c:.3}"));
    let moved = m
        .device_read_bytes_median
        .map_or_else(|| "-".to_owned(), size);
    let pct = if has_ceiling {
        format!(
            " {:>6}",
            m.percent_of_ceiling
                .map_or_else(|| "-".to_owned(), |p| format!("{p:.0}%"))
        )
    } else {
        String::new()
    };
    let line = format!(
        "  {:<14} {:>6}{pct}  {:<11} {:>9}  {:>10}  {}",
        name,
        gib_per_s(m.rate_bytes_per_sec_median),
        spread,
        cpu,
        moved,
        status_painted(m, paint)
    );
    format!("{}\n", line.trim_end())
}

/// The sweep: one row per method, situation and thread count; the knee
/// marked.
fn sweep_table(r: &ReadTestReport, paint: Paint) -> String {
    let has_ceiling = r.ceiling.is_some();
    let mut t = format!(
        "  {}\n",
        paint.dim(&format!("cache  {}", table_header(has_ceiling)))
    );
    for m in &r.sweep {
        let knee = r
            .knees
            .iter()
            .any(|k| k.cache == m.cache && k.method == m.method && Some(k.threads) == m.threads);
        let row = method_row(m, &method_name(m), has_ceiling, paint);
        let row = format!("  {:<5}{}", m.cache.name(), row.trim_end_matches('\n'));
        t.push_str(&row);
        if knee {
            t.push_str(&format!("  {}", paint.good("← knee")));
        }
        t.push('\n');
    }
    for k in &r.knees {
        t.push_str(&format!(
            "  knee: {} {} at {} thread{} ({} GiB/s; best {} GiB/s)\n",
            k.cache.name(),
            k.method,
            k.threads,
            if k.threads == 1 { "" } else { "s" },
            gib_per_s(Some(k.rate_bytes_per_sec)),
            gib_per_s(Some(k.best_rate_bytes_per_sec))
        ));
    }
    t
}

/// The header of a method table: the median in GiB/s (the headline and
/// the verdicts say both units), the slowest and fastest run, CPU seconds
/// per GiB, the bytes the devices read; 80 columns with the ceiling's %.
fn table_header(has_ceiling: bool) -> String {
    format!(
        "{:<14} {:>6}{}  {:<11} {:>9}  {:>10}  status",
        "method",
        "GiB/s",
        if has_ceiling { " % ceil" } else { "" },
        "range",
        "CPU s/GiB",
        "dev read"
    )
}

/// Where the text of a labelled line begins.
const LABELLED: &str = "               ";

/// `  verdict      text` filled to the output's width, continuation lines
/// under the text.
fn wrap_labelled(label: &str, text: &str) -> String {
    field(&format!("  {label:<12} "), text, LABELLED, str::to_owned)
}

/// A bullet wrapped at 88 columns, continuation lines indented.
fn wrap_item(text: &str) -> String {
    let body = wrap(text, "    ");
    format!("  -{}", body.strip_prefix("   ").unwrap_or(&body))
}

fn percent(share: f64) -> String {
    format!("{:.0} %", 100.0 * share)
}

/// The text report of `--pid`.
pub fn render_watch(r: &WatchReport, paint: Paint) -> String {
    use btrfs_lab::report::text::{escape_control, escape_path};
    let mut t = field(
        &format!("{} ", paint.bold("read-test")),
        &format!(
            "--pid {} ({}), {:.1} s",
            r.pid,
            escape_control(&r.command_line),
            r.seconds
        ),
        "  ",
        str::to_owned,
    );
    t.push_str(&field("", &escape_control(&r.summary), "  ", str::to_owned));
    t.push('\n');
    t.push_str(&wrap_labelled(
        "process",
        &format!(
            "read calls {}, from storage {}, mapped in {}: {}",
            size(r.read_call_bytes),
            size(r.storage_read_bytes),
            size(r.mapped_in_bytes),
            rate::format_both(r.rate_bytes_per_sec)
        ),
    ));
    if let Some(s) = r.page_cache_share {
        t.push_str(&format!(
            "  page cache   supplied {} of what it read\n",
            percent(s)
        ));
    }
    if let Some(o) = &r.origin {
        let devices = o.device_bytes.map_or_else(String::new, |d| {
            format!(
                "; its devices read {}{}",
                size(d),
                o.other_device_bytes
                    .filter(|x| *x > 0)
                    .map_or_else(String::new, |x| format!(" ({} not for it)", size(x)))
            )
        });
        t.push_str(&wrap_labelled(
            "origin",
            &format!(
                "{} read: {} from storage, {} from the page cache{devices}",
                size(o.loader_bytes),
                size(o.storage_bytes.min(o.loader_bytes)),
                size(o.page_cache_bytes)
            ),
        ));
    }
    if let Some(c) = &r.claimed {
        t.push_str(&wrap_labelled(
            "claimed",
            &format!("{} [{}]", c.text, escape_control(&c.source)),
        ));
    }
    if let Some(q) = &r.requests {
        let mut parts = Vec::new();
        if let Some(a) = q.read_call_bytes_avg.filter(|_| q.read_calls > 0) {
            parts.push(format!(
                "{} read calls of {} on average",
                q.read_calls,
                size(a)
            ));
        }
        if let Some(a) = q.device_request_bytes_avg {
            parts.push(format!(
                "{} device requests of {}",
                q.device_requests,
                size(a)
            ));
        }
        if let (Some(n), Some(b)) = (q.in_flight, q.bytes_in_flight) {
            parts.push(format!("{n:.1} in flight ({})", size(b)));
        }
        if !parts.is_empty() {
            t.push_str(&wrap_labelled("requests", &parts.join(", ")));
        }
    }
    for f in &r.files {
        let ways: Vec<&str> = f.ways.iter().map(|w| w.name()).collect();
        t.push_str(&wrap_labelled(
            "file",
            &format!(
                "{} ({}, {})",
                escape_path(&f.path),
                size(f.size_bytes),
                f.fs_type.as_deref().unwrap_or("?")
            ),
        ));
        t.push_str(&wrap_labelled(
            "",
            &format!(
                "{} read by {}: {} ({})",
                size(f.bytes_read),
                ways.join(" + "),
                rate::format_both(f.rate_bytes_per_sec),
                f.bytes_source
            ),
        ));
        if let (Some(a), Some(b)) = (f.resident_bytes_before, f.resident_bytes_after) {
            t.push_str(&wrap_labelled(
                "",
                &format!("in the page cache: {} before, {} after", size(a), size(b)),
            ));
        }
        if let Some(l) = &f.layout {
            t.push_str(&wrap_labelled(
                "",
                &format!(
                    "layout: {} extents, {} compressed{}",
                    l.extents,
                    size(l.encoded_bytes),
                    if f.data_profiles.is_empty() {
                        String::new()
                    } else {
                        format!(", data {}", profile_list(&f.data_profiles))
                    }
                ),
            ));
        }
        if let Some(m) = &f.members {
            let held: Vec<String> = m
                .iter()
                .map(|s| {
                    let name = s.device.rsplit('/').next().unwrap_or(&s.device);
                    format!("{name} {}", size(s.bytes))
                })
                .collect();
            let held = if held.is_empty() {
                "none (no extent on a data chunk yet)".to_owned()
            } else {
                held.join(", ")
            };
            t.push_str(&wrap_labelled("", &format!("on members: {held}")));
        }
        if let Some(n) = &f.note {
            t.push_str(&field(LABELLED, n, LABELLED, |s| paint.dim(s)));
        }
    }
    if r.idle_files > 0 {
        t.push_str(&wrap_labelled(
            "idle",
            &format!(
                "{} other file(s) open or mapped, not read in the window",
                r.idle_files
            ),
        ));
    }
    t.push_str(&wrap_labelled(
        "threads",
        &format!("{} of {} reading", r.reading_threads, r.threads.len()),
    ));
    for th in r.threads.iter().filter(|th| th.reading) {
        t.push_str(&format!(
            "    {:>7} {:<13} read {:>8}  storage {:>8}  CPU {:>3.0}%  iowait {:>3.0}%\n",
            th.tid,
            escape_control(&th.name),
            size(th.read_call_bytes),
            size(th.storage_read_bytes),
            th.cpu_percent,
            th.io_wait_percent
        ));
    }
    if let Some(d) = &r.devices {
        let names: Vec<&str> = d.devices.iter().map(|x| x.name.as_str()).collect();
        t.push_str(&wrap_labelled(
            "devices",
            &format!(
                "{} read {} in the window: {}",
                names.join(", "),
                size(d.bytes),
                rate::format_both(d.rate_bytes_per_sec)
            ),
        ));
    }
    if let Some(c) = &r.ceiling {
        t.push_str(&wrap_labelled(
            "ceiling",
            &format!(
                "{} for one reader ({}, from links)",
                rate::format_both(c.bytes_per_sec as f64),
                c.profile
            ),
        ));
    }
    if let Some(s) = &r.saved_run {
        let th = s.threads.map_or_else(String::new, |n| format!(" × {n}"));
        t.push_str(&wrap_labelled(
            "read-test",
            &format!(
                "{}{th}: {} (saved in {})",
                s.method.name(),
                rate::format_both(s.rate_bytes_per_sec),
                escape_path(&s.report)
            ),
        ));
    }
    t.push_str(&wrap_labelled("bottleneck", r.bottleneck.name()));
    if let Some(l) = &r.loader {
        let engine = l
            .engine
            .as_deref()
            .map_or_else(String::new, |e| format!(" in {e}"));
        let format = l
            .format
            .as_deref()
            .map_or_else(String::new, |f| format!(", {}", escape_control(f)));
        t.push_str(&wrap_labelled(
            "program",
            &format!(
                "{}{engine}{format} (docs/loaders.md), recognised by {}",
                l.program,
                escape_control(&l.recognised_by.join("; "))
            ),
        ));
        t.push_str(&wrap_labelled(
            "",
            &format!("reads by default: {}", l.default_way),
        ));
    } else if let Some(k) = &r.known_program {
        t.push_str(&wrap_labelled("program", &format!("{k} (docs/loaders.md)")));
    }
    for s in &r.settings {
        t.push_str(&wrap_labelled(
            "change",
            &format!("{}: {} [{}]", s.program, s.change, s.source),
        ));
        if let Some(g) = &s.expected_gain {
            t.push_str(&wrap_labelled("", &format!("expected gain: {g}")));
        }
    }
    for tr in &r.traps {
        t.push_str(&wrap_labelled(
            "btrfs",
            &format!("{}: {}", tr.name, tr.text),
        ));
    }
    for n in &r.notes {
        t.push_str(&wrap_item(n));
    }
    t
}

use super::page::{BAD, INT, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["read-test"],
    documents: &["read-test", "read-test-pid"],
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::OK,
            "measured (read the report for flagged methods).",
        ),
        row(
            status::CHECKSUM_MISMATCH,
            "the methods read different bytes (checksum mismatch): no figure means \
             anything until that is explained.",
        ),
        row(
            status::ERROR,
            "refused or failed (a warm cache that cannot be made or proven, a file that \
             cannot be read).",
        ),
        BAD,
        INT,
    ],
    examples: &[
        (
            "Fastest way to read a model file, cold cache.",
            "btrfs-lab read-test /mnt/models/model.bin",
        ),
        (
            "Two methods, several thread counts.",
            "btrfs-lab read-test --methods direct,buffered --threads 1,2,4 /mnt/models/model.bin",
        ),
        (
            "Watch a running vLLM worker (its pid: pgrep -n -f VLLM::EngineCore) load its model for 20 s, and check the rate its progress bar printed.",
            "btrfs-lab read-test --pid 4242 --seconds 20 --claimed 4GB/s",
        ),
    ],
    see_also: &["fio(1)"],
    ..super::page::Declared::NONE
}];
