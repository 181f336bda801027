//! `btrfs-lab rescue MOUNT [--copy-to DIR [--partial]] [--list]`.

use std::path::PathBuf;

use btrfs_lab::sys::fs::state::STATE_DIR;
use clap::Args;

use btrfs_lab::error::Result;
use btrfs_lab::operation::{self, Confirm, View};
use btrfs_lab::report::text::{escape_control as esc, wrap_hanging};
use btrfs_lab::report::units::{UnitMode, pretty_size};
use btrfs_lab::rescue::operation::RescueCopy;
use btrfs_lab::rescue::report::{FileRecord, FileState, RescueReport};
use btrfs_lab::rescue::{self, RescueRequest};

use super::output::{Output, Paint, TargetArgs};
use super::units::UnitArgs;

pub const AFTER_HELP: &str = "\
For a btrfs whose data is RAID0 (or single) and a device of which is gone:
mirrored metadata keeps the file list, so the files with no byte on the lost
device are whole. MOUNT must be mounted read-only:
  mount -o degraded,ro DEVICE MOUNT   (never put degraded in /etc/fstab)
  mount -o remount,ro MOUNT           (already mounted read-write)
Every file of every subvolume below MOUNT is mapped (FIEMAP, the chunk
tree) and reported intact, damaged (the byte ranges), lost (no byte left:
never written, not even by --partial) or unknown; with
--copy-to every byte copied is read from the disk and checked against the
checksum tree (by the kernel, and again by rescue: a sector that does not
match is never copied as good); a re-run with the same arguments resumes
(rescue-manifest.jsonl in root's state directory, never in DIR). DIR must
be root's alone (no other user owns or can write it or a directory on its
path) unless --allow-untrusted-target.

Exit status: 0 every file intact; 3 some files damaged, unknown or failed;
1 refused or failed (a full target: the same command resumes); 2 bad
command line; 130 interrupted (the manifest is consistent; re-run resumes).";

#[derive(Debug, Args)]
pub struct RescueArgs {
    /// A directory of the degraded, read-only btrfs (its mount point).
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// Copy the intact files into DIR (on another filesystem; empty, or an earlier rescue's to resume).
    #[arg(long = "copy-to", value_name = "DIR")]
    copy_to: Option<PathBuf>,
    /// With --copy-to: also the readable parts of damaged files, as NAME.partial (holes for the rest; a file with no readable byte is not written).
    #[arg(long, requires = "copy_to")]
    partial: bool,
    #[command(flatten)]
    target: TargetArgs,
    /// Every file's record as it is judged (JSON Lines with --json), then the summary.
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    units: UnitArgs,
}

/// Files not intact that the text output names before it counts the rest.
const TEXT_LISTED: usize = 20;
/// The same in the JSON report (`--list` streams every file).
const JSON_LISTED: usize = 1000;

pub fn run(args: RescueArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    if args.target.allow_untrusted_target && args.copy_to.is_none() {
        return Err(btrfs_lab::error::Error::usage(
            "--allow-untrusted-target is about the directory of --copy-to: give --copy-to DIR too",
        ));
    }
    let req = request(&args, out, state_dir);
    let text = Text {
        out,
        mode: args.units.mode(),
        list: args.list,
    };
    let mut each = |r: &FileRecord| {
        if text.list {
            out.report_line(r, |r| file_line(r, text.mode, out.paint));
        }
    };
    if req.copy_to.is_some() {
        let mut op = RescueCopy::new(req, &mut each);
        return operation::run(&mut op, Confirm::default(), out, &text);
    }
    let report = rescue::run(&req, out, &mut each)?;
    text.say(&report);
    Ok(report.exit_status())
}

/// rescue's report as text (or its JSON).
struct Text<'a> {
    out: &'a Output,
    mode: UnitMode,
    list: bool,
}

impl Text<'_> {
    fn say(&self, report: &RescueReport) {
        let out = self.out;
        // --list and --copy-to stream JSON Lines (file records, progress
        // records): the report is their last line.
        if (self.list || report.copy.is_some()) && out.json {
            out.json_line(report);
        } else {
            out.report(report, |r| render(r, self.mode, out.paint, !self.list));
        }
    }
}

impl View<RescueCopy<'_>> for Text<'_> {
    /// Not shown ([`btrfs_lab::operation::PlanShown::Not`]).
    fn plan(&self, _report: &RescueReport) -> String {
        String::new()
    }
    fn result(&self, _plan: &RescueReport, report: &RescueReport) {
        self.say(report);
    }
}

fn request(args: &RescueArgs, out: &Output, state_dir: Option<PathBuf>) -> RescueRequest {
    RescueRequest {
        mount: args.mount.clone(),
        copy_to: args.copy_to.clone(),
        partial: args.partial,
        listed_limit: if out.json { JSON_LISTED } else { TEXT_LISTED },
        state_dir: state_dir.unwrap_or_else(|| PathBuf::from(STATE_DIR)),
        allow_untrusted_target: args.target.allow_untrusted_target,
    }
}

fn state_word(s: FileState, paint: Paint) -> String {
    match s {
        FileState::Intact => paint.good("intact"),
        FileState::Damaged => paint.bad("damaged"),
        FileState::Lost => paint.bad("lost"),
        FileState::Unknown => paint.warn("unknown"),
        FileState::Failed => paint.bad("failed"),
    }
}

/// One file: state, path, and for a damaged one what is lost.
fn file_line(r: &FileRecord, mode: UnitMode, paint: Paint) -> String {
    let lead = format!("{:<8} ", state_word(r.state, paint));
    let mut t = esc(&r.path).into_owned();
    if r.state == FileState::Lost {
        t.push_str(&format!(
            "  (all {} lost: nothing to save)",
            pretty_size(r.size, mode)
        ));
    } else if r.damaged_bytes > 0 {
        let ranges: Vec<String> = r
            .damaged_ranges
            .iter()
            .take(4)
            .map(|x| format!("{}+{}", x.offset, x.length))
            .collect();
        let more = r.damaged_ranges.len().saturating_sub(4);
        t.push_str(&format!(
            "  ({} of {} lost: {}{})",
            pretty_size(r.damaged_bytes, mode),
            pretty_size(r.size, mode),
            ranges.join(", "),
            if more > 0 {
                format!(", {more} more ranges")
            } else {
                String::new()
            }
        ));
    }
    if let Some(s) = &r.saved
        && r.state != FileState::Intact
    {
        t.push_str(&format!("  saved as {}", esc(&s.path)));
    }
    if let Some(e) = &r.error {
        t.push_str(&format!("  [{}]", esc(e)));
    }
    if r.state == FileState::Unknown
        && let Some(j) = r.judged.iter().find(|j| j.contains("may reach"))
    {
        t.push_str(&format!("  [{}]", esc(j)));
    }
    // Filled under the path (state words are at most 8 columns).
    wrap_hanging(&t, &lead, "         ")
}

fn render(r: &RescueReport, mode: UnitMode, paint: Paint, with_files: bool) -> String {
    let mut t = String::new();
    let missing: Vec<String> = r
        .devices
        .iter()
        .filter(|d| d.missing)
        .map(|d| format!("devid {}", d.devid))
        .collect();
    let profiles = |v: &[btrfs_lab::model::profile::Profile]| {
        v.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("+")
    };
    t.push_str(&wrap_hanging(
        &format!(
            "{} ({}): data {}, metadata {}",
            esc(&r.mount),
            r.fsid,
            profiles(&r.data_profiles),
            profiles(&r.metadata_profiles),
        ),
        "",
        "  ",
    ));
    t.push_str(&format!(
        "missing: {}\n",
        if missing.is_empty() {
            "none".to_owned()
        } else {
            paint.bad(&missing.join(", "))
        }
    ));
    if with_files && !r.listed.is_empty() {
        t.push('\n');
        for f in &r.listed {
            t.push_str(&file_line(f, mode, paint));
        }
        if r.not_listed > 0 {
            t.push_str(&format!(
                "... and {} more files not intact (--list shows every file)\n",
                r.not_listed
            ));
        }
        t.push('\n');
    }
    t.push_str(&wrap_hanging(
        &format!(
            "{} intact, {} damaged, {} lost, {} unknown, {} failed",
            r.files.intact, r.files.damaged, r.files.lost, r.files.unknown, r.files.failed,
        ),
        "files: ",
        "       ",
    ));
    t.push_str(&wrap_hanging(
        &format!(
            "({} symlinks, {} directories, {} subvolumes)",
            r.walked.symlinks, r.walked.directories, r.walked.subvolumes
        ),
        "       ",
        "       ",
    ));
    t.push_str(&wrap_hanging(
        &format!(
            "{} in files = {} intact + {} readable in damaged files + {} lost + {} unknown",
            pretty_size(r.bytes.total, mode),
            pretty_size(r.bytes.intact, mode),
            pretty_size(r.bytes.readable, mode),
            pretty_size(r.bytes.lost, mode),
            pretty_size(r.bytes.unknown, mode)
        ),
        "bytes: ",
        "       ",
    ));
    match &r.copy {
        Some(c) => {
            t.push_str(&wrap_hanging(&format!(
                "copied to {}: {} files ({} partial), {} already there from an earlier run, {} saved; manifest {}",
                esc(&c.dir),
                c.copied,
                c.partial_copies,
                c.resumed,
                pretty_size(r.bytes.saved, mode),
                esc(&c.manifest)
            ), "", "  "));
            if !c.not_fitted.is_empty() {
                t.push_str(&wrap_hanging(&format!(
                    "did not fit in {} (not saved; free space there, then run the same command again): {}",
                    esc(&c.dir),
                    c.not_fitted.iter().map(|p| esc(p)).collect::<Vec<_>>().join(", ")
                ), "", "  "));
            }
        }
        None if r.not_intact() > 0 || r.files.intact > 0 => t.push_str(&wrap_hanging(
            "nothing copied: --copy-to DIR copies the intact files (--partial also what is readable of the others)",
            "",
            "  ",
        )),
        None => {}
    }
    for n in &r.notes {
        t.push_str(&wrap_hanging(&esc(n), "note: ", "      "));
    }
    t
}

use super::page::{BAD, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["rescue"],
    documents: &["rescue", "rescue-file", "progress", "error"],
    output: super::page::Shape::Lines,
    exits: &[
        row(
            status::OK,
            "every file is intact (and, with --copy-to, copied and verified).",
        ),
        row(
            status::ERROR,
            "refused or failed: not root, not a read-only btrfs, a target directory on the \
             same filesystem or not empty, or that another user owns or can write (or a \
             directory on its path; without --allow-untrusted-target); a target where no \
             directory can be made (what was saved is in the manifest: the same command \
             resumes).",
        ),
        BAD,
        NOT_WRITTEN,
        row(
            status::FILES_LOST,
            "files-lost: some files are damaged or lost (bytes on a missing device), unknown \
             or failed (read errors), or did not fit in the target (named at the end, the copy \
             went on past them); the report lists them.",
        ),
        row(
            status::INTERRUPTED,
            "interrupted by SIGINT, SIGTERM or SIGHUP: stopped after the current file, the \
             manifest is consistent, the same command resumes (a second signal stops at \
             once; the file being copied had no name yet).",
        ),
    ],
    examples: &[
        (
            "Which files of a degraded, read-only mount are intact.",
            "btrfs-lab rescue /mnt/data",
        ),
        (
            "Copy them out, with the readable parts of the damaged ones.",
            "btrfs-lab rescue /mnt/data --copy-to /media/usb/rescued --partial",
        ),
    ],
    see_also: &["btrfs-rescue(8)", "btrfs-restore(8)", "mount(8)"],
    ..super::page::Declared::NONE
}];
