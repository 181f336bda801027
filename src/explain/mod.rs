//! `btrfs-lab explain`: what a pasted ticket says. The paste is cut into
//! the outputs it holds ([`crate::parse::paste::segment`]); `fi df` and `fi
//! usage` go to the readers of `df --parse` and `usage --parse`, the rest to
//! the parsers of [`crate::parse`]. Then the facts of all of them are read
//! together into the findings of the one catalog
//! ([`crate::model::finding`]), each with the lines it comes from, and what
//! cannot be told without the machine is said.
//!
//! Pure but for [`read_paste`]; bounded whatever the input: at most
//! [`MAX_OUTPUTS`] outputs and [`MAX_EVENTS`] kernel events are kept (the
//! rest counted), and the reader holds a bounded window of lines.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::finding::{Code, Finding, rules};
use crate::model::profile::Profile;
use crate::model::space::{BgProfile, BgType};
use crate::parse::balance_status::{BalanceState, BalanceStatus};
use crate::parse::dev_stats::{DevStats, DeviceCounters, StatsForm};
use crate::parse::dev_usage::{DeviceUsage, profile_of};
use crate::parse::fi_df::ParseOptions;
use crate::parse::fi_show::FiShow;
use crate::parse::kernel_log::KernelEvent;
use crate::parse::paste::{Block, Found, segment};
use crate::parse::replace_status::{ReplaceState, ReplaceStatus};
use crate::parse::scrub::{ScrubReport, ScrubState, ScrubStyle};
use crate::space::{DfReport, ParsedUsageDocument};

/// Outputs kept in a report; more are counted in `outputs_left_out`.
pub const MAX_OUTPUTS: usize = 500;
/// Kernel events kept in a report; more are counted.
pub const MAX_EVENTS: usize = 500;
/// Line spans kept per finding.
const MAX_SPANS: usize = 50;
/// Input read at most (larger input is refused).
pub const MAX_INPUT: u64 = 16 << 20;

/// Lines of the paste.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Span {
    /// First line (1-based).
    pub first: usize,
    /// Last line.
    pub last: usize,
}

/// One kernel log line explain uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoggedEvent {
    /// Its line.
    pub line: usize,
    /// What it says.
    pub event: KernelEvent,
}

/// What an output holds, typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Detail {
    /// `btrfs filesystem df`, read as `df --parse` reads it.
    FiDf {
        /// The report of `df --parse --json`.
        report: Box<DfReport>,
    },
    /// `btrfs filesystem usage`, read as `usage --parse` reads it.
    FiUsage {
        /// The report of `usage --parse --json`.
        report: Box<ParsedUsageDocument>,
    },
    /// `btrfs filesystem show`.
    FiShow {
        /// The filesystem listed.
        show: FiShow,
    },
    /// `btrfs device stats`.
    DeviceStats {
        /// The counters.
        stats: DevStats,
    },
    /// `btrfs device usage`.
    DeviceUsage {
        /// The devices.
        devices: Vec<DeviceUsage>,
    },
    /// `btrfs scrub status` or `scrub start -B`.
    Scrub {
        /// The filesystem's report, then each device's (`-d`).
        reports: Vec<ScrubReport>,
    },
    /// `btrfs balance status`.
    BalanceStatus {
        /// The status.
        status: BalanceStatus,
    },
    /// `btrfs replace status`.
    ReplaceStatus {
        /// The status.
        status: ReplaceStatus,
    },
    /// `dmesg` / `journalctl -k` BTRFS lines.
    KernelLog {
        /// The lines explain uses (others are not listed).
        events: Vec<LoggedEvent>,
    },
    /// Versions: `btrfs --version`, `uname -r`, `uname -a`, the kernel's
    /// `Linux version` line, or prose naming them.
    Versions {
        /// btrfs-progs (`6.6.3`).
        progs: Option<String>,
        /// The kernel release (`6.8.0-31-generic`).
        kernel: Option<String>,
    },
}

/// One output found in the paste.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FoundOutput {
    /// Where it is.
    pub lines: Span,
    /// Which output and format, in words (`scrub status, key-value style
    /// (btrfs-progs 5.2 on)`).
    pub format: String,
    /// What it says, in one line.
    pub summary: String,
    /// Its content.
    pub detail: Detail,
}

/// A finding and the lines of the paste it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Explained {
    /// The finding (doctor's catalog).
    #[serde(flatten)]
    pub finding: Finding,
    /// The lines it comes from.
    pub from: Vec<Span>,
}

/// `explain --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExplainReport {
    /// File name, or `-` for stdin.
    pub input: String,
    /// Outputs found, in the paste's order.
    pub outputs: Vec<FoundOutput>,
    /// Outputs found beyond the [`MAX_OUTPUTS`] kept.
    pub outputs_left_out: usize,
    /// Kernel events found beyond the [`MAX_EVENTS`] kept.
    pub events_left_out: usize,
    /// btrfs-progs version, when pasted.
    pub progs_version: Option<String>,
    /// Kernel release, when pasted.
    pub kernel: Option<String>,
    /// What the outputs mean together, worst first.
    pub findings: Vec<Explained>,
    /// What the paste cannot tell, and what to run on the machine for it.
    pub cannot_tell: Vec<String>,
}

/// Reads the paste: `-` is stdin, else a file read through
/// [`crate::sys::fs::input::read_user_text`]; at most [`MAX_INPUT`] bytes,
/// invalid UTF-8 replaced.
pub fn read_paste(name: &str) -> Result<String> {
    use std::io::Read;
    let too_large = || {
        Error::new(
            ErrorKind::Parse,
            format!("{name}: more than 16MiB; paste the outputs, not a whole log"),
        )
        .with_hint("cut the paste to the command outputs and the kernel lines around the problem")
    };
    if name == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {name}: {e}")))?;
        if bytes.len() as u64 > MAX_INPUT {
            return Err(too_large());
        }
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    crate::sys::fs::input::read_user_text(std::path::Path::new(name), MAX_INPUT).map_err(|e| {
        if e.kind() == ErrorKind::Usage {
            too_large()
        } else {
            e
        }
    })
}

/// What is gathered while the paste is read.
#[derive(Default)]
struct Facts {
    outputs: Vec<FoundOutput>,
    outputs_left_out: usize,
    events_kept: usize,
    events_left_out: usize,
    progs: Option<String>,
    kernel: Option<String>,
    /// Findings of the `df`/`usage` readers, with their block.
    space: Vec<(Finding, Span)>,
    /// (type, profile) in use, from df, usage and device usage.
    profiles: Vec<(BgType, Profile)>,
    space_seen: bool,
    usage_seen: bool,
    /// Device → the largest counters seen and where.
    counters: BTreeMap<String, (DeviceCounters, Vec<Span>)>,
    stats_seen: bool,
    /// Missing devids (`None`: unnamed) and where.
    missing: Vec<(Option<u64>, Span)>,
    total_devices: Option<u64>,
    degraded: Vec<Span>,
    scrubs: Vec<(ScrubReport, Span)>,
    balances: Vec<(BalanceStatus, Span)>,
    replaces: Vec<(ReplaceStatus, Span)>,
    csum: Vec<(KernelEvent, Span)>,
    csum_count: usize,
    unrepaired: Vec<Span>,
    repaired: usize,
    mount_failed: Vec<Span>,
    readonly: Vec<Span>,
    aborts: Vec<(Option<i64>, Span)>,
    damage: Vec<(String, Span)>,
}

fn push_span(v: &mut Vec<Span>, s: Span) {
    if v.len() < MAX_SPANS && !v.contains(&s) {
        v.push(s);
    }
}

fn one(line: usize) -> Span {
    Span {
        first: line,
        last: line,
    }
}

impl Facts {
    fn counters(&mut self, c: &DeviceCounters, span: Span) {
        let e = self
            .counters
            .entry(c.device.clone())
            .or_insert_with(|| (c.clone(), Vec::new()));
        let d = &mut e.0;
        d.write = d.write.max(c.write);
        d.read = d.read.max(c.read);
        d.flush = d.flush.max(c.flush);
        d.corruption = d.corruption.max(c.corruption);
        d.generation = d.generation.max(c.generation);
        d.devid = d.devid.or(c.devid);
        if c.any() {
            push_span(&mut e.1, span);
        }
    }

    fn profile(&mut self, t: BgType, p: BgProfile) {
        if let BgProfile::Known(p) = p
            && t != BgType::GlobalReserve
            && !self.profiles.contains(&(t, p))
        {
            self.profiles.push((t, p));
        }
    }

    fn block(&mut self, b: Block, input: &str) {
        let span = Span {
            first: b.first,
            last: b.last,
        };
        let out = match b.found {
            Found::FiDf(text) => {
                let Ok(r) = crate::space::df_from_text(&text, input, ParseOptions::default())
                else {
                    return;
                };
                self.space_seen = true;
                for rec in &r.records {
                    if rec.total_bytes > 0 {
                        self.profile(rec.bg_type, rec.profile);
                    }
                }
                for f in &r.interpretation.findings {
                    self.space.push((f.clone(), span));
                }
                let summary = r
                    .interpretation
                    .percentages
                    .iter()
                    .filter(|p| p.bg_type != BgType::GlobalReserve)
                    .map(|p| {
                        format!(
                            "{} {} {:.0}% used",
                            p.bg_type.progs_name(),
                            p.profile.progs_name(),
                            p.used_percent
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let json = matches!(
                    r.source,
                    crate::space::DfSource::Parsed {
                        format: crate::parse::fi_df::InputFormat::Json,
                        ..
                    }
                );
                (
                    if json {
                        "btrfs --format json filesystem df (btrfs-progs 5.19 on)".to_owned()
                    } else {
                        format!(
                            "btrfs filesystem df ({})",
                            r.units
                                .as_ref()
                                .map_or("text".to_owned(), |u| df_units(u.basis))
                        )
                    },
                    summary,
                    Detail::FiDf {
                        report: Box::new(r),
                    },
                )
            }
            Found::FiUsage(text) => {
                let Ok(r) = crate::space::usage_from_text(&text, input) else {
                    return;
                };
                self.space_seen = true;
                self.usage_seen = true;
                for bg in &r.report.block_groups {
                    self.profile(bg.bg_type, bg.profile);
                }
                if let Some(u) = &r.report.unallocated
                    && !u.is_empty()
                {
                    let n = u.len() as u64;
                    self.total_devices = Some(self.total_devices.map_or(n, |t| t.max(n)));
                }
                for f in &r.interpretation.findings {
                    self.space.push((f.clone(), span));
                }
                let mut summary = String::new();
                if let Some(o) = &r.report.overall {
                    summary = format!(
                        "{} of {} allocated, {} unallocated",
                        size(o.device_allocated),
                        size(o.device_size),
                        size(o.device_unallocated.max(0) as u64)
                    );
                    // Without root, btrfs-progs before 5.15 printed the
                    // device size as missing (btrfs-progs#395).
                    if o.device_missing > 0 && o.device_missing < o.device_size {
                        self.missing.push((None, span));
                        summary.push_str(&format!(", {} missing", size(o.device_missing)));
                    }
                }
                let table = text.contains("\nId ") || text.starts_with("Id ");
                (
                    format!(
                        "btrfs filesystem usage{} ({})",
                        if table { " -T" } else { "" },
                        df_units(r.units.basis)
                    ),
                    summary,
                    Detail::FiUsage {
                        report: Box::new(r),
                    },
                )
            }
            Found::FiShow(s) => {
                self.total_devices = s.total_devices.or(self.total_devices);
                let marked: Vec<&crate::parse::fi_show::ShowDevice> =
                    s.devices.iter().filter(|d| d.missing).collect();
                for d in &marked {
                    self.missing.push((Some(d.devid), span));
                }
                if marked.is_empty() && s.missing() > 0 {
                    self.missing.push((None, span));
                }
                let summary = format!(
                    "{} of {} device(s) listed{}",
                    s.devices.len(),
                    s.total_devices.map_or("?".to_owned(), |t| t.to_string()),
                    if s.missing() > 0 {
                        format!(", {} missing", s.missing())
                    } else {
                        String::new()
                    }
                );
                let format = if s.some_missing {
                    "btrfs filesystem show (`*** Some devices missing`: every version, a filesystem not mounted)"
                } else if marked.is_empty() {
                    "btrfs filesystem show (every version)"
                } else {
                    "btrfs filesystem show (`MISSING` rows: btrfs-progs 5.19 on, mounted)"
                };
                (format.to_owned(), summary, Detail::FiShow { show: s })
            }
            Found::DevStats(s) => {
                self.stats_seen = true;
                for d in &s.devices {
                    self.counters(d, span);
                }
                let bad: Vec<String> = s
                    .devices
                    .iter()
                    .filter(|d| d.any())
                    .map(|d| format!("{} ({})", d.device, counters_text(d)))
                    .collect();
                let summary = if bad.is_empty() {
                    format!("{} device(s), every counter 0", s.devices.len())
                } else {
                    format!("errors on {}", bad.join("; "))
                };
                let format = match s.form {
                    StatsForm::Text => "btrfs device stats (every version)",
                    StatsForm::Table => "btrfs device stats -T (btrfs-progs 5.19 on)",
                    StatsForm::Json => "btrfs --format json device stats (btrfs-progs 5.10 on)",
                };
                (format.to_owned(), summary, Detail::DeviceStats { stats: s })
            }
            Found::DevUsage(devices) => {
                for d in &devices {
                    if d.missing() {
                        self.missing.push((Some(d.devid), span));
                    }
                    for (label, _) in &d.chunks {
                        if let Some((ty, p)) = profile_of(label)
                            && let Some(t) = BgType::from_progs_name(ty)
                        {
                            self.profile(t, BgProfile::Known(p));
                        }
                    }
                }
                let summary = format!("{} device(s)", devices.len());
                (
                    "btrfs device usage (btrfs-progs 3.18 on)".to_owned(),
                    summary,
                    Detail::DeviceUsage { devices },
                )
            }
            Found::Scrub(reports) => {
                let r0 = &reports[0];
                let summary = scrub_summary(r0);
                for r in &reports {
                    self.scrubs.push((r.clone(), span));
                }
                let what = if r0.done {
                    "btrfs scrub start -B"
                } else {
                    "btrfs scrub status"
                };
                let style = match r0.style {
                    ScrubStyle::Classic => "classic style, btrfs-progs up to 5.1",
                    ScrubStyle::KeyValue => "key-value style, btrfs-progs 5.2 on",
                };
                let per_device = if reports.iter().any(|r| r.device.is_some()) {
                    " -d"
                } else {
                    ""
                };
                (
                    format!("{what}{per_device} ({style})"),
                    summary,
                    Detail::Scrub { reports },
                )
            }
            Found::Balance(s) => {
                let summary = match (s.state, s.balanced, s.about) {
                    (BalanceState::None, ..) => "no balance".to_owned(),
                    (st, Some(d), Some(a)) => format!(
                        "{}: {d} of about {a} chunks{}{}",
                        balance_state(st),
                        s.considered.map_or(String::new(), |c| format!(
                            " ({c} considered: every chunk the filters looked at)"
                        )),
                        s.left_percent
                            .map_or(String::new(), |p| format!(", {p}% left"))
                    ),
                    (st, ..) => balance_state(st).to_owned(),
                };
                self.balances.push((s.clone(), span));
                (
                    format!(
                        "btrfs balance status{} (every version)",
                        if s.filters.is_empty() { "" } else { " -v" }
                    ),
                    summary,
                    Detail::BalanceStatus { status: s },
                )
            }
            Found::Replace(s) => {
                let summary = format!(
                    "{}{}, {} write error(s), {} uncorrectable read error(s)",
                    match s.state {
                        ReplaceState::Running => "running",
                        ReplaceState::Finished => "finished",
                        ReplaceState::Canceled => "cancelled",
                        ReplaceState::Suspended => "suspended (it resumes at the next mount)",
                        ReplaceState::NeverStarted => "never started",
                    },
                    s.percent
                        .filter(|_| s.state != ReplaceState::Finished)
                        .map_or(String::new(), |p| format!(" at {p:.1}%")),
                    s.write_errors,
                    s.uncorrectable_read_errors
                );
                self.replaces.push((s.clone(), span));
                (
                    "btrfs replace status (every version)".to_owned(),
                    summary,
                    Detail::ReplaceStatus { status: s },
                )
            }
            Found::Kernel(events) => {
                let mut kept = Vec::new();
                let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
                for (line, e) in events {
                    let at = one(line);
                    *kinds.entry(event_name(&e)).or_default() += 1;
                    match &e {
                        KernelEvent::DeviceErrors { device, counters } => {
                            let c = DeviceCounters {
                                device: device.clone(),
                                devid: None,
                                write: counters[0],
                                read: counters[1],
                                flush: counters[2],
                                corruption: counters[3],
                                generation: counters[4],
                            };
                            self.counters(&c, at);
                        }
                        KernelEvent::ChecksumFailed { .. } => {
                            self.csum_count += 1;
                            if self.csum.len() < MAX_SPANS {
                                self.csum.push((e.clone(), at));
                            }
                        }
                        KernelEvent::Unrepaired { .. } => push_span(&mut self.unrepaired, at),
                        KernelEvent::DeviceMissing { devid } => self.missing.push((*devid, at)),
                        KernelEvent::Degraded => push_span(&mut self.degraded, at),
                        KernelEvent::ForcedReadonly => push_span(&mut self.readonly, at),
                        KernelEvent::TransactionAborted { errno } => {
                            if self.aborts.len() < MAX_SPANS {
                                self.aborts.push((*errno, at));
                            }
                        }
                        KernelEvent::MetadataDamage { what } => {
                            if self.damage.len() < MAX_SPANS {
                                self.damage.push((what.clone(), at));
                            }
                        }
                        KernelEvent::Repaired => self.repaired += 1,
                        KernelEvent::MountFailed => push_span(&mut self.mount_failed, at),
                        KernelEvent::Other => {}
                    }
                    if self.events_kept < MAX_EVENTS {
                        self.events_kept += 1;
                        kept.push(LoggedEvent { line, event: e });
                    } else {
                        self.events_left_out += 1;
                    }
                }
                let summary = if kinds.is_empty() {
                    "nothing explain uses (informational lines)".to_owned()
                } else {
                    kinds
                        .iter()
                        .map(|(k, n)| format!("{n} {k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                (
                    "kernel log, BTRFS lines (dmesg, journalctl -k, syslog)".to_owned(),
                    summary,
                    Detail::KernelLog { events: kept },
                )
            }
            Found::Versions { progs, kernel } => {
                if progs.is_some() {
                    self.progs.clone_from(&progs);
                }
                if kernel.is_some() {
                    self.kernel.clone_from(&kernel);
                }
                let summary = [
                    progs.as_ref().map(|v| format!("btrfs-progs {v}")),
                    kernel.as_ref().map(|k| format!("Linux {k}")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
                (
                    "versions (btrfs --version, uname -r/-a, Linux version, prose)".to_owned(),
                    summary,
                    Detail::Versions { progs, kernel },
                )
            }
        };
        if self.outputs.len() >= MAX_OUTPUTS {
            self.outputs_left_out += 1;
            return;
        }
        self.outputs.push(FoundOutput {
            lines: span,
            format: out.0,
            summary: out.1,
            detail: out.2,
        });
    }
}

fn size(b: u64) -> String {
    crate::report::units::pretty_size(b, crate::report::units::UnitMode::default())
}

fn df_units(b: crate::parse::fi_df::UnitBasis) -> String {
    use crate::parse::fi_df::UnitBasis as U;
    match b {
        U::Bytes => "bytes, -b",
        U::Iec => "IEC units, btrfs-progs 3.x on",
        U::Si => "SI units, --si",
        U::LegacyBinary => "KB/MB/GB of btrfs-progs before 3.x",
        U::Ambiguous => "MB/GB: old binary or --si",
    }
    .to_owned()
}

fn counters_text(d: &DeviceCounters) -> String {
    d.kinds()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn balance_state(s: BalanceState) -> &'static str {
    match s {
        BalanceState::Running => "running",
        BalanceState::PauseRequested => "running, pause requested",
        BalanceState::CancelRequested => "running, cancel requested",
        BalanceState::Paused => "paused",
        BalanceState::None => "no balance",
    }
}

fn scrub_state(s: ScrubState) -> &'static str {
    match s {
        ScrubState::Finished => "finished",
        ScrubState::Running => "running",
        ScrubState::Aborted => "aborted",
        ScrubState::Interrupted => "interrupted",
        ScrubState::Unknown => "state not shown",
    }
}

fn scrub_summary(r: &ScrubReport) -> String {
    let mut s = scrub_state(r.state).to_owned();
    if r.resumed {
        s.push_str(" (resumed)");
    }
    if let Some(b) = &r.bytes {
        s.push_str(&format!(", {b}"));
    }
    if r.errors == 0 {
        s.push_str(", no errors");
    } else {
        s.push_str(&format!(", {} error(s)", r.errors));
        if let Some(c) = r.corrected {
            s.push_str(&format!(", {c} corrected"));
        }
        if let Some(u) = r.uncorrectable {
            s.push_str(&format!(", {u} uncorrectable"));
        }
    }
    s
}

fn event_name(e: &KernelEvent) -> &'static str {
    match e {
        KernelEvent::DeviceErrors { .. } => "device error counter line(s)",
        KernelEvent::ChecksumFailed { .. } => "checksum failure(s)",
        KernelEvent::Unrepaired { .. } => "unrepaired block(s)",
        KernelEvent::Repaired => "repaired block(s)",
        KernelEvent::DeviceMissing { .. } => "missing-device line(s)",
        KernelEvent::Degraded => "degraded mount(s)",
        KernelEvent::ForcedReadonly => "forced read-only",
        KernelEvent::TransactionAborted { .. } => "transaction abort(s)",
        KernelEvent::MetadataDamage { .. } => "metadata damage line(s)",
        KernelEvent::MountFailed => "failed mount(s)",
        KernelEvent::Other => "other line(s)",
    }
}

/// Errno names the kernel prints with transaction aborts.
fn errno_name(e: i64) -> &'static str {
    match e.abs() {
        28 => "ENOSPC: no space for metadata",
        5 => "EIO: a device returned an I/O error",
        12 => "ENOMEM: out of memory",
        30 => "EROFS: already read-only",
        117 => "EUCLEAN: metadata found corrupt",
        2 => "ENOENT: an item the kernel expected was not found (corruption)",
        17 => "EEXIST: an item already existed (corruption)",
        _ => "see errno(3)",
    }
}

/// Reads `text` (named `input` in the report).
pub fn explain(text: &str, input: &str) -> ExplainReport {
    let mut f = Facts::default();
    segment(text, |b| f.block(b, input));
    let findings = findings(&f);
    let cannot_tell = cannot_tell(&f);
    ExplainReport {
        input: input.to_owned(),
        outputs: f.outputs,
        outputs_left_out: f.outputs_left_out,
        events_left_out: f.events_left_out,
        progs_version: f.progs,
        kernel: f.kernel,
        findings,
        cannot_tell,
    }
}

/// `explain`: the report, or an error when the paste holds no output.
pub fn explain_input(text: &str, input: &str) -> Result<ExplainReport> {
    let r = explain(text, input);
    if r.outputs.is_empty() {
        return Err(Error::new(
            ErrorKind::Parse,
            format!("{input}: no btrfs-progs output or BTRFS kernel line found"),
        )
        .with_hint(
            "paste the output of btrfs filesystem usage -T, device stats, scrub status, balance status, replace status, filesystem show, or dmesg lines with BTRFS",
        ));
    }
    Ok(r)
}

fn redundant(p: Profile) -> bool {
    !matches!(p, Profile::Single | Profile::Raid0)
}

fn findings(f: &Facts) -> Vec<Explained> {
    let mut out: Vec<Explained> = Vec::new();
    let mut add = |finding: Finding, from: Vec<Span>| {
        // One finding per code and title: the same one from two outputs
        // lists both places.
        if let Some(e) = out
            .iter_mut()
            .find(|e| e.finding.code == finding.code && e.finding.title == finding.title)
        {
            for s in from {
                push_span(&mut e.from, s);
            }
            return;
        }
        out.push(Explained { finding, from });
    };
    for (fi, span) in &f.space {
        add(fi.clone(), vec![*span]);
    }
    let mount = "MOUNT";
    let list = |kinds: &[BgType]| -> Vec<Profile> {
        let mut v: Vec<Profile> = f
            .profiles
            .iter()
            .filter(|(t, _)| kinds.contains(t))
            .map(|(_, p)| *p)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    // Missing devices.
    if !f.missing.is_empty() {
        let mut devids: Vec<u64> = f.missing.iter().filter_map(|m| m.0).collect();
        devids.sort_unstable();
        devids.dedup();
        let count = devids.len().max(1) as u32;
        let total = f.total_devices.unwrap_or(u64::from(count));
        let mut fi = crate::model::finding::device_missing(
            count,
            &devids,
            total.max(u64::from(count)),
            &list(&[BgType::Data, BgType::DataMetadata]),
            &list(&[BgType::Metadata, BgType::DataMetadata]),
            mount,
        );
        if f.total_devices.is_none() {
            // How many members there are is not in the paste.
            fi.title = format!("{count} device(s) missing");
            fi.evidence.retain(|e| e.name != "devices");
        }
        if list(&[BgType::Data, BgType::Metadata, BgType::DataMetadata]).is_empty() {
            fi.why = "which profiles lost a copy is not in the paste: single or RAID0 chunks lost data, RAID1 and the like keep one copy less; never put degraded in fstab, and do not convert while a device is missing".to_owned();
        }
        let mut from = Vec::new();
        for (_, s) in &f.missing {
            push_span(&mut from, *s);
        }
        add(fi, from);
    }
    if !f.degraded.is_empty() {
        add(
            Finding::new(
                Code::MountDegraded,
                "the kernel log shows a degraded mount",
                "new chunks are written without redundancy while mounted degraded: replace or remove the missing device, then balance with -dconvert=...,soft to restore the profile",
            ),
            f.degraded.clone(),
        );
    }
    // Device error counters.
    let without: Vec<Profile> = f
        .profiles
        .iter()
        .map(|(_, p)| *p)
        .filter(|p| !redundant(*p))
        .collect();
    for (dev, (c, from)) in &f.counters {
        // One rule with doctor's: a counter at UINT64_MAX is invalid, left
        // out of the errors (and of every sum: no overflow).
        let e = crate::doctor::facts::ErrorCounts {
            write: c.write,
            read: c.read,
            flush: c.flush,
            corruption: c.corruption,
            generation: c.generation,
        };
        let invalid = e.invalid_kinds();
        if !invalid.is_empty() {
            add(
                Finding::new(
                    Code::DeviceStatsInvalid,
                    format!(
                        "device {dev}: its {} counter{} 18446744073709551615, not a count",
                        invalid.join(" and "),
                        if invalid.len() == 1 { " reads" } else { "s read" }
                    ),
                    "UINT64_MAX is no number of errors a device reaches: the counter item on disk is damaged or was written wrongly; it is left out of the error counts; scrub to learn whether there are real errors, then reset the counters",
                )
                .with_evidence("invalid counters", invalid.join(", "))
                .with_command(format!(
                    "btrfs scrub start -Bd {mount}  (then btrfs device stats -z {mount})"
                )),
                from.clone(),
            );
        }
        if e.total() == 0 {
            continue;
        }
        let damaging = e.sum_of(&["read", "write", "corruption", "generation"]) > 0;
        let mut fi = if damaging && !without.is_empty() {
            let mut names: Vec<&str> = without.iter().map(|p| p.name()).collect();
            names.sort_unstable();
            names.dedup();
            Finding::new(
                Code::DeviceErrorsNoRedundancy,
                format!(
                    "device {dev} has errors on a filesystem with {} chunks",
                    names.join("/")
                ),
                "a block in a chunk without redundancy has no good copy: scrub cannot repair it; the files the kernel log names are damaged and must be restored from a backup, and the drive checked",
            )
        } else {
            Finding::new(
                Code::DeviceErrors,
                format!("device {dev} has errors"),
                "the counters only grow: a drive, cable or controller problem, or silent corruption; on a redundant profile scrub repairs bad copies from the good ones",
            )
        };
        for (k, n) in e.valid_kinds() {
            if n > 0 {
                fi = fi.with_evidence(&format!("{k} errors"), n.to_string());
            }
        }
        fi = fi.with_command(format!(
            "btrfs scrub start -Bd {mount}  (then btrfs device stats -z {mount}; check the drive: smartctl -a {dev})"
        ));
        add(fi, from.clone());
    }
    // Scrub.
    let fs_scrubs: Vec<&(ScrubReport, Span)> = {
        let whole: Vec<_> = f
            .scrubs
            .iter()
            .filter(|(r, _)| r.device.is_none())
            .collect();
        if whole.is_empty() {
            f.scrubs.iter().collect()
        } else {
            whole
        }
    };
    let sum = |g: fn(&ScrubReport) -> u64| fs_scrubs.iter().map(|(r, _)| g(r)).sum::<u64>();
    let (found, corrected, uncorrectable) = (
        sum(|r| r.errors),
        sum(|r| r.corrected.unwrap_or(0)),
        sum(|r| r.uncorrectable.unwrap_or(0)),
    );
    let repair_shown = fs_scrubs
        .iter()
        .any(|(r, _)| r.corrected.is_some() || r.uncorrectable.is_some());
    if found > 0 {
        let critical = uncorrectable > 0;
        let mut fi = Finding::new(
            Code::ScrubErrors,
            if critical {
                format!("the scrub found {uncorrectable} error(s) it could not repair")
            } else if !repair_shown {
                format!("the scrub found {found} error(s); whether it repaired them is not in the paste")
            } else {
                format!("the scrub found and repaired {} error(s)", corrected.max(found))
            },
            if !repair_shown {
                "paste the whole `btrfs scrub status -d MOUNT`: its Corrected and Uncorrectable lines tell"
            } else if critical {
                "blocks without a good copy: the files the kernel log names (dmesg, `checksum error at ... (path: ...)`) are damaged; restore them from a backup"
            } else {
                "a good copy repaired them; errors that come back point at the drive or its cabling"
            },
        )
        .with_evidence("errors found", found.to_string());
        if repair_shown {
            fi = fi
                .with_evidence("corrected", corrected.to_string())
                .with_evidence("uncorrectable", uncorrectable.to_string());
        }
        fi = fi
            .with_severity(rules::scrub_errors(uncorrectable))
            .with_command(format!("btrfs scrub status -d {mount}"));
        let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
        for (r, _) in &fs_scrubs {
            for (k, n) in &r.error_details {
                let e = kinds.entry(k.as_str()).or_default();
                *e = e.saturating_add(*n);
            }
        }
        for (k, n) in kinds {
            fi = fi.with_evidence(&format!("{k} errors"), n.to_string());
        }
        add(fi, fs_scrubs.iter().map(|(_, s)| *s).collect());
    }
    let stopped: Vec<Span> = f
        .scrubs
        .iter()
        .filter(|(r, _)| matches!(r.state, ScrubState::Aborted | ScrubState::Interrupted))
        .map(|(_, s)| *s)
        .collect();
    if !stopped.is_empty() {
        add(
            Finding::new(
                Code::ScrubInterrupted,
                "the scrub was cancelled or interrupted",
                "part of the filesystem was not checked",
            )
            .with_command(format!("btrfs scrub resume {mount}")),
            stopped,
        );
    }
    // Balance.
    for (b, span) in &f.balances {
        let considered = match (b.considered, b.about) {
            (Some(c), Some(a)) if c > a => Some(format!(
                "{c} considered > about {a}: \"considered\" counts every chunk the filters looked at, \"about\" the ones they matched; nothing is wrong"
            )),
            _ => None,
        };
        let fi = match b.state {
            BalanceState::Paused => Finding::new(
                Code::BalancePaused,
                "a balance is paused",
                "part of the filesystem keeps its old profiles until it is resumed or cancelled",
            )
            .with_command(format!("btrfs balance resume {mount}")),
            BalanceState::None => continue,
            _ => Finding::new(
                Code::BalanceRunning,
                "a balance is running",
                "throughput is lower until it ends",
            )
            .with_command(format!("btrfs balance status -v {mount}")),
        };
        let fi = match considered {
            Some(c) => fi.with_evidence("chunks", c),
            None => fi,
        };
        add(fi, vec![*span]);
    }
    // Kernel log.
    if f.csum_count > 0 {
        let mut fi = Finding::new(
            Code::ChecksumErrorsLogged,
            format!("the kernel logged {} checksum failure(s)", f.csum_count),
            if f.unrepaired.is_empty() {
                "data read back did not match its checksum; with a second copy (DUP, RAID1...) the read was served from it and the bad copy rewritten, without one the read failed with EIO and the file is damaged"
            } else {
                "scrub could not fix some of them (no good copy): the files named are damaged; restore them from a backup"
            },
        )
        .with_severity(rules::checksum_errors_logged(!f.unrepaired.is_empty()));
        if f.repaired > 0 {
            fi = fi.with_evidence(
                "rewritten from a good copy (read error corrected, fixed up)",
                f.repaired.to_string(),
            );
        }
        if !f.unrepaired.is_empty() {
            fi = fi.with_evidence(
                "not repaired (unable to fixup)",
                f.unrepaired.len().to_string(),
            );
        }
        let mut inode = None;
        for (e, _) in f.csum.iter().take(10) {
            if let KernelEvent::ChecksumFailed {
                root,
                inode: ino,
                offset,
                path,
                ..
            } = e
            {
                let mut v = String::new();
                if let Some(p) = path {
                    v.push_str(&format!("path {p}, "));
                }
                if let Some(r) = root {
                    v.push_str(&format!("root {r}, "));
                }
                if let Some(i) = ino {
                    inode = inode.or(Some(*i));
                    v.push_str(&format!("inode {i}, "));
                }
                if let Some(o) = offset {
                    v.push_str(&format!("offset {o}"));
                }
                fi = fi.with_evidence("failed", v.trim_end_matches(", ").to_owned());
            }
        }
        if let Some(i) = inode {
            fi = fi.with_command(format!(
                "btrfs inspect-internal inode-resolve {i} {mount}  (names the file; inside the subvolume the root id is)"
            ));
        }
        let mut from: Vec<Span> = f.csum.iter().map(|(_, s)| *s).collect();
        for s in &f.unrepaired {
            push_span(&mut from, *s);
        }
        add(fi, from);
    }
    if !f.readonly.is_empty() || !f.aborts.is_empty() {
        let mut fi = Finding::new(
            Code::ForcedReadonly,
            if f.readonly.is_empty() {
                "the kernel aborted a transaction"
            } else {
                "the kernel forced the filesystem read-only"
            },
            "after an abort btrfs refuses every write until it is unmounted; what the last transaction held is lost; the errno says why (no space, an I/O error, corruption found)",
        );
        let mut from = f.readonly.clone();
        let mut errnos: Vec<i64> = Vec::new();
        for (e, s) in &f.aborts {
            push_span(&mut from, *s);
            if let Some(e) = e
                && !errnos.contains(e)
            {
                errnos.push(*e);
            }
        }
        for e in &errnos {
            fi = fi.with_evidence("errno", format!("{e} ({})", errno_name(*e)));
        }
        fi = fi.with_command(if errnos.iter().any(|e| e.abs() == 28) {
            format!("btrfs filesystem usage -T {mount}  (after a remount: is metadata full?)")
        } else {
            "btrfs check --readonly DEVICE  (unmounted; before any repair)".to_owned()
        });
        from.sort_by_key(|s| s.first);
        add(fi, from);
    }
    if !f.damage.is_empty() {
        let mut fi = Finding::new(
            Code::MetadataDamageLogged,
            "the kernel logged damaged metadata",
            "a tree block did not pass the kernel's checks (a lost or misdirected write, a device that does not honour flushes, bad RAM): with a second copy the kernel reads that one; otherwise do not write to the filesystem before a read-only check",
        );
        let mut seen: Vec<&str> = Vec::new();
        for (w, _) in &f.damage {
            if !seen.contains(&w.as_str()) {
                seen.push(w);
                fi = fi.with_evidence("message", w.clone());
            }
        }
        fi = fi.with_command("btrfs check --readonly DEVICE  (unmounted; before any repair)");
        add(fi, f.damage.iter().map(|(_, s)| *s).collect());
    }
    out.sort_by_key(|e| e.finding.severity);
    out
}

fn cannot_tell(f: &Facts) -> Vec<String> {
    let mut v = Vec::new();
    if f.outputs.is_empty() {
        return v;
    }
    v.push("whether anything changed since: every figure is as of when it was pasted".to_owned());
    let errors = f.counters.values().any(|(c, _)| c.any());
    if errors {
        v.push("when the errors happened: the counters have no dates and only grow (`btrfs device stats -z MOUNT` after a repair makes new ones stand out)".to_owned());
        v.push(
            "whether the drive itself is failing: `smartctl -a DEVICE` on the machine".to_owned(),
        );
        if f.profiles.is_empty() {
            v.push("whether the chunks with errors have a second copy: paste `btrfs filesystem usage -T MOUNT`".to_owned());
        }
        if f.scrubs.is_empty() {
            v.push("whether a scrub repaired them: paste `btrfs scrub status -d MOUNT`".to_owned());
        }
    }
    if f.csum_count > 0 {
        v.push("which files the inodes are: `btrfs inspect-internal inode-resolve INODE MOUNT` on the machine (in the subvolume of the root id)".to_owned());
    }
    if f.space_seen && !f.usage_seen {
        v.push("how much unallocated space the devices have, and so whether new chunks fit: paste `btrfs filesystem usage -T MOUNT`".to_owned());
    }
    if (!f.readonly.is_empty() || !f.aborts.is_empty() || !f.damage.is_empty()) && !f.usage_seen {
        v.push("whether metadata ran full or the metadata is damaged: paste `btrfs filesystem usage -T MOUNT` (after a read-only mount) and `btrfs check --readonly DEVICE`".to_owned());
    }
    if !f.mount_failed.is_empty() {
        v.push(format!(
            "why the mount failed (line {}): a missing device{} or damage; `btrfs filesystem show` and a `mount -o ro,degraded` attempt on the machine tell",
            f.mount_failed[0].first,
            if f.missing.is_empty() { "" } else { " (one is named missing above)" }
        ));
    }
    if !f.missing.is_empty() && f.profiles.is_empty() {
        v.push("what the missing device held: paste `btrfs filesystem usage -T MOUNT` (mounted -o degraded,ro)".to_owned());
    }
    if f.kernel.is_none() {
        v.push(
            "the kernel version (kernel bugs and features depend on it): paste `uname -r`"
                .to_owned(),
        );
    }
    if f.progs.is_none() {
        v.push("the btrfs-progs version: paste `btrfs --version`".to_owned());
    }
    v
}

#[cfg(test)]
mod tests;
