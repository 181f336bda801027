//! `btrfs-lab usage MOUNT` and `btrfs-lab usage --parse [FILE|-]`.

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::model::units::{UnitMode, pretty_size, pretty_size_signed};
use btrfs_lab::parse::fi_df::UnitBasis;
use btrfs_lab::space::usage::{DeviceShare, UsageReport};
use btrfs_lab::space::{self};
use btrfs_lab::sys::root::SysRoot;

use super::output::Output;
use super::units::UnitArgs;

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// A path inside a mounted btrfs; with --parse, the file to parse
    /// (`-` or nothing: stdin).
    #[arg(required_unless_present = "parse", value_name = "MOUNT|FILE")]
    mount: Option<PathBuf>,
    /// Parse captured `btrfs filesystem usage` output (any version, `-b`,
    /// `-T`, `--si`) instead of reading a mounted filesystem.
    #[arg(long)]
    parse: bool,
    #[command(flatten)]
    units: UnitArgs,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: UsageArgs, out: &Output) -> Result<u8> {
    if args.parse {
        return run_parse(&args, out);
    }
    let root = SysRoot::from_option(args.sysroot.as_deref());
    let mount = args.mount.clone().unwrap_or_default();
    let doc = space::usage_document(&root, &mount)?;
    out.report(&doc, |d| render(&d.report, args.units.mode()));
    for n in &doc.report.notes {
        out.note(n);
    }
    // Stdout stays btrfs-progs' layout; what the figures mean goes to
    // stderr (and into the JSON document).
    if let Some(i) = &doc.interpretation {
        super::df::findings_to_stderr(out, i);
    }
    Ok(exit::OK)
}

fn run_parse(args: &UsageArgs, out: &Output) -> Result<u8> {
    let name = args
        .mount
        .as_ref()
        .map_or_else(|| "-".to_owned(), |p| p.display().to_string());
    let doc = space::usage_from_text(&super::df::read_input(&name)?, &name)?;
    let mode = args.units.mode();
    out.report(&doc, |d| {
        let mut text = render(&d.report, mode);
        text.push('\n');
        text.push_str(&super::df::render_interpretation(&d.interpretation));
        text
    });
    for s in &doc.skipped {
        if s.damaged {
            out.warning_with_hint(
                &format!("line {}: {} ('{}')", s.line, s.reason, s.text),
                "those figures are missing from the result; ask for the output again (`btrfs filesystem usage -T PATH`)",
            );
        } else {
            out.note(&format!(
                "line {} skipped: {} ('{}')",
                s.line, s.reason, s.text
            ));
        }
    }
    for n in &doc.report.notes {
        out.note(n);
    }
    if doc.units.basis == UnitBasis::Si {
        out.note(&format!("units: {}", doc.units.rule));
    }
    if !out.json && !doc.exact {
        out.note(&format!(
            "the input was rounded (human-readable units): each size is within {} of the figure shown",
            pretty_size(doc.max_error_bytes, UnitMode::default())
        ));
    }
    if out.json {
        super::df::findings_to_stderr(out, &doc.interpretation);
    }
    Ok(exit::OK)
}

fn devices(text: &mut String, shares: &[DeviceShare], mode: UnitMode) {
    for d in shares {
        text.push_str(&format!(
            "   {}\t{:>10}\n",
            d.path,
            pretty_size_signed(d.bytes, mode)
        ));
    }
}

/// The report in `btrfs filesystem usage` layout.
pub fn render(r: &UsageReport, mode: UnitMode) -> String {
    let mut t = String::new();
    let w = if matches!(mode, UnitMode::Human(_)) {
        10
    } else {
        18
    };
    if let Some(o) = &r.overall {
        let s = |v: u64| pretty_size(v, mode);
        t.push_str("Overall:\n");
        t.push_str(&format!("    Device size:\t\t{:>w$}\n", s(o.device_size)));
        t.push_str(&format!(
            "    Device allocated:\t\t{:>w$}\n",
            s(o.device_allocated)
        ));
        t.push_str(&format!(
            "    Device unallocated:\t\t{:>w$}\n",
            pretty_size_signed(o.device_unallocated, mode)
        ));
        t.push_str(&format!(
            "    Device missing:\t\t{:>w$}\n",
            s(o.device_missing)
        ));
        t.push_str(&format!("    Device slack:\t\t{:>w$}\n", s(o.device_slack)));
        t.push_str(&format!("    Used:\t\t\t{:>w$}\n", s(o.used)));
        t.push_str(&format!(
            "    Free (estimated):\t\t{:>w$}\t(min: {})\n",
            s(o.free_estimated),
            s(o.free_estimated_min)
        ));
        t.push_str(&format!(
            "    Free (statfs, df):\t\t{:>w$}\n",
            s(o.free_statfs)
        ));
        t.push_str(&format!("    Data ratio:\t\t\t{:>w$.2}\n", o.data_ratio));
        t.push_str(&format!(
            "    Metadata ratio:\t\t{:>w$.2}\n",
            o.metadata_ratio
        ));
        t.push_str(&format!(
            "    Global reserve:\t\t{:>w$}\t(used: {})\n",
            s(o.global_reserve),
            s(o.global_reserve_used)
        ));
        if o.multiple_profiles {
            let types: Vec<&str> = o
                .multiple_profile_types
                .iter()
                .map(|t| match t.json_name() {
                    "global_reserve" => "globalreserve",
                    n => n,
                })
                .collect();
            t.push_str(&format!(
                "    Multiple profiles:\t\t{:>w$}\t({})\n",
                "yes",
                types.join(", ")
            ));
        } else {
            t.push_str(&format!("    Multiple profiles:\t\t{:>w$}\n", "no"));
        }
        t.push('\n');
    }
    for b in &r.block_groups {
        t.push_str(&format!(
            "{},{}: Size:{}, Used:{} ({:.2}%)\n",
            b.bg_type.progs_name(),
            b.profile.progs_name(),
            pretty_size(b.size_bytes, mode),
            pretty_size(b.used_bytes, mode),
            b.used_percent
        ));
        if let Some(d) = &b.devices {
            devices(&mut t, d, mode);
        }
        t.push('\n');
    }
    if let Some(u) = &r.unallocated {
        t.push_str("Unallocated:\n");
        devices(&mut t, u, mode);
    }
    t
}
