//! `btrfs-lab df MOUNT` and `btrfs-lab df --parse [FILE|-]`.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::space::describe_mixed;
use btrfs_lab::model::units::{UnitMode, pretty_size};
use btrfs_lab::space::{self, DfReport};
use btrfs_lab::sys::root::SysRoot;

use super::output::Output;
use super::units::UnitArgs;

#[derive(Debug, Args)]
pub struct DfArgs {
    /// A path inside a mounted btrfs; with --parse, the file to parse
    /// (`-` or nothing: stdin).
    #[arg(required_unless_present = "parse", value_name = "MOUNT|FILE")]
    path: Option<String>,
    /// Parse captured `btrfs filesystem df` output (any unit form, or its
    /// JSON) instead of reading a mounted filesystem.
    #[arg(long)]
    parse: bool,
    #[command(flatten)]
    units: UnitArgs,
    /// Read /sys and /proc under DIR (default: $BTRFS_LAB_SYSROOT or /).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
}

/// Input larger than this is not a `fi df` capture.
const MAX_INPUT: u64 = 16 << 20;

fn read_input(name: &str) -> Result<String> {
    let mut bytes = Vec::new();
    let result = if name == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut bytes)
    } else {
        let path = PathBuf::from(name);
        let meta =
            std::fs::metadata(&path).map_err(|e| Error::from_io(&e, "cannot read", &path))?;
        if meta.is_dir() {
            return Err(Error::new(ErrorKind::WrongTarget, format!("{name} is a directory"))
                .with_hint("--parse takes a file with captured `btrfs filesystem df` output; to read a mounted filesystem, give it without --parse"));
        }
        std::fs::File::open(&path)
            .map_err(|e| Error::from_io(&e, "cannot read", &path))?
            .take(MAX_INPUT + 1)
            .read_to_end(&mut bytes)
    };
    result.map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {name}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT {
        return Err(Error::new(
            ErrorKind::Parse,
            format!("{name}: more than 16MiB; this is not `btrfs filesystem df` output"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!(
                "{name}: not text (invalid UTF-8 at byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

pub fn run(args: DfArgs, out: &Output) -> Result<u8> {
    let report = if args.parse {
        let input = args.path.as_deref().unwrap_or("-");
        space::df_from_text(&read_input(input)?, input)?
    } else {
        let mount = PathBuf::from(args.path.as_deref().unwrap_or_default());
        space::df_from_kernel(&SysRoot::from_option(args.sysroot.as_deref()), &mount)?
    };
    if out.json {
        out.json_doc(&report);
    } else {
        out.text(&render(&report, args.units.mode()));
        if report.records.iter().any(|r| !r.exact) {
            out.note("the input was rounded (human-readable units); --json gives each value's error bound");
        }
    }
    // One warning (and one hint) for all the types a conversion left mixed.
    if !report.mixed_profiles.is_empty() {
        let mixed: Vec<String> = report.mixed_profiles.iter().map(describe_mixed).collect();
        out.warning_with_hint(
            &format!(
                "more than one profile for one type: {}",
                mixed.join("; ")
            ),
            "a conversion (balance with a convert filter) did not finish; run it again with the `soft` filter to complete it",
        );
    }
    for row in &report.inconsistencies {
        out.warning_with_hint(
            &format!("{row}: the input is inconsistent"),
            "check that the capture was not edited or cut; the figures of this row mean nothing",
        );
    }
    Ok(exit::OK)
}

/// The records in `btrfs filesystem df` format.
pub fn render(report: &DfReport, mode: UnitMode) -> String {
    let mut text = String::new();
    for r in &report.records {
        text.push_str(&format!(
            "{}, {}: total={}, used={}",
            r.bg_type.progs_name(),
            r.profile.progs_name(),
            pretty_size(r.total_bytes, mode),
            pretty_size(r.used_bytes, mode)
        ));
        if let Some(z) = r.zone_unusable_bytes {
            text.push_str(&format!(", zone_unusable={}", pretty_size(z, mode)));
        }
        text.push('\n');
    }
    text
}
