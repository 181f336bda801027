//! `btrfs-lab usage MOUNT`.

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::model::units::{UnitMode, pretty_size, pretty_size_signed};
use btrfs_lab::space::usage::{DeviceShare, UsageDocument, UsageReport};
use btrfs_lab::space::{self};
use btrfs_lab::sys::root::SysRoot;

use super::output::Output;
use super::units::UnitArgs;

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// A path inside a mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    #[command(flatten)]
    units: UnitArgs,
    /// Read /sys and /proc under DIR (default: $BTRFS_LAB_SYSROOT or /).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
}

pub fn run(args: UsageArgs, out: &Output) -> Result<u8> {
    let root = SysRoot::from_option(args.sysroot.as_deref());
    let (target, report) = space::usage(&root, &args.mount)?;
    let doc = UsageDocument {
        path: target.path.clone(),
        mount_point: target.mount.mount_point.clone(),
        uuid: target.fsid.clone(),
        report,
    };
    out.report(&doc, |d| render(&d.report, args.units.mode()));
    for n in &doc.report.notes {
        out.note(n);
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
