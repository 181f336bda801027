//! `btrfs-lab usage MOUNT` and `btrfs-lab usage --parse [FILE|-]`.

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::parse::fi_df::UnitBasis;
use btrfs_lab::report::progs_json;
use btrfs_lab::report::text::escape_control as esc;
use btrfs_lab::report::units::{UnitMode, pretty_size, pretty_size_signed};
use btrfs_lab::space::usage::{DeviceShare, UsageReport};
use btrfs_lab::space::{self};
use btrfs_lab::sys::fs::root::SysRoot;

use super::output::{Output, ProgsFormat};
use super::units::UnitArgs;

#[derive(Debug, Args)]
#[command(
    override_usage = "btrfs-lab usage [OPTIONS] <MOUNT>\n       btrfs-lab usage --parse [OPTIONS] [FILE]"
)]
pub struct UsageArgs {
    /// A path inside a mounted btrfs; with --parse, the file to parse
    /// (`-` or nothing: stdin).
    #[arg(required_unless_present = "parse", value_name = "MOUNT|FILE")]
    mount: Option<PathBuf>,
    /// Parse captured `btrfs filesystem usage` output (any version, `-b`,
    /// `-T`, `--si`) instead of reading a mounted filesystem.
    #[arg(long)]
    parse: bool,
    /// Show the allocation as a table of devices by type and profile, with
    /// each device's unallocated space, total and slack (btrfs-progs' `-T`).
    #[arg(short = 'T')]
    tabular: bool,
    #[command(flatten)]
    units: UnitArgs,
    /// Output format (`--json` gives the typed report).
    #[arg(long, value_enum, value_name = "FORMAT", conflicts_with = "parse")]
    format: Option<ProgsFormat>,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: UsageArgs, out: &Output, state_dir: Option<std::path::PathBuf>) -> Result<u8> {
    args.units.select();
    if args.parse {
        return run_parse(&args, out);
    }
    let root = SysRoot::from_option(args.sysroot.as_deref(), out);
    let mount = args.mount.clone().unwrap_or_default();
    let progs = ProgsFormat::progs_json(args.format, out)?;
    let state_dir = btrfs_lab::sys::fs::state::state_dir_of(&root, state_dir);
    let doc = space::usage_document(&root, &mount, &state_dir)?;
    if progs {
        // btrfs device usage's shape: each device with its chunks.
        out.document_text(&progs_json::to_text(&progs_json::device_usage(
            &doc.report,
        )?)?);
        return Ok(exit::OK);
    }
    out.report(&doc, |d| render(&d.report, args.units.mode(), args.tabular));
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
    let doc = space::usage_from_text(&space::read_input(&name, "btrfs filesystem usage")?, &name)?;
    let mode = args.units.mode();
    out.report(&doc, |d| {
        let mut text = render(&d.report, mode, args.tabular);
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
    if !doc.exact {
        out.text_note(&format!(
            "the input was rounded (human-readable units): each size is within {} of the figure shown",
            pretty_size(doc.max_error_bytes, UnitMode::default())
        ));
    }
    out.aside(true, |out| {
        super::df::findings_to_stderr(out, &doc.interpretation)
    });
    Ok(exit::OK)
}

fn devices(text: &mut String, shares: &[DeviceShare], mode: UnitMode) {
    for d in shares {
        text.push_str(&format!(
            "   {}\t{:>10}\n",
            esc(&d.path),
            pretty_size_signed(d.bytes, mode)
        ));
    }
}

/// The report in `btrfs filesystem usage` layout (`-T`: tabular).
pub fn render(r: &UsageReport, mode: UnitMode, tabular: bool) -> String {
    let mut t = render_overall(r, mode);
    if tabular {
        t.push_str(&render_table(r, mode));
    } else {
        t.push_str(&render_linear(r, mode));
    }
    t
}

fn render_overall(r: &UsageReport, mode: UnitMode) -> String {
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
    t
}

fn render_linear(r: &UsageReport, mode: UnitMode) -> String {
    let mut t = String::new();
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

/// One cell of the `-T` table, as btrfs-progs' string table has them
/// (common/string-table.c): left- or right-aligned text, or a rule of `-`
/// as wide as the column.
enum Cell {
    Empty,
    Left(String),
    Right(String),
    Rule,
}

/// The `btrfs filesystem usage -T` table (`_cmd_filesystem_usage_tabular`
/// in cmds/filesystem-usage.c): a column per type and profile, then
/// Unallocated, Total and Slack; a row per device, then the Total and
/// Used rows. Columns are as wide as their widest text and separated by
/// one space; nothing is trimmed, as btrfs-progs trims nothing.
fn render_table(r: &UsageReport, mode: UnitMode) -> String {
    let s = |v: u64| pretty_size(v, mode);
    let groups = &r.block_groups;
    // Devices: with their sizes when read from the kernel; from parsed text
    // only the unallocated list names them, and size = unallocated + allocated.
    // Per (column, devid) and per devid, summed once: a table of many
    // devices stays linear.
    let mut cell: std::collections::HashMap<(usize, u64), i64> = std::collections::HashMap::new();
    let mut per_device: std::collections::HashMap<u64, i64> = std::collections::HashMap::new();
    for (i, b) in groups.iter().enumerate() {
        for d in b.devices.iter().flatten() {
            *cell.entry((i, d.devid)).or_default() += d.bytes;
            *per_device.entry(d.devid).or_default() += d.bytes;
        }
    }
    let allocated = |devid: u64| -> i64 { per_device.get(&devid).copied().unwrap_or(0) };
    let rows: Vec<(u64, String, i64, Option<u64>)> = if r.devices.is_empty() {
        r.unallocated
            .iter()
            .flatten()
            .map(|u| {
                // Linear text gives only the total slack: when it is zero,
                // so is every device's.
                let slack = r
                    .overall
                    .as_ref()
                    .filter(|o| o.device_slack == 0)
                    .map(|_| 0);
                (u.devid, u.path.clone(), u.bytes + allocated(u.devid), slack)
            })
            .collect()
    } else {
        r.devices
            .iter()
            .map(|d| {
                (
                    d.devid,
                    d.path.clone(),
                    d.size_bytes as i64,
                    Some(d.slack_bytes),
                )
            })
            .collect()
    };
    let ncols = groups.len() + 5;
    let (unalloc_col, total_col, slack_col) =
        (groups.len() + 2, groups.len() + 3, groups.len() + 4);
    let mut table: Vec<Vec<Cell>> = Vec::new();
    let blank = || (0..ncols).map(|_| Cell::Empty).collect::<Vec<Cell>>();
    let mut types = blank();
    let mut profiles = blank();
    for (i, b) in groups.iter().enumerate() {
        types[i + 2] = Cell::Left(b.bg_type.progs_name().to_owned());
        profiles[i + 2] = Cell::Left(b.profile.progs_name().to_owned());
    }
    profiles[0] = Cell::Left("Id".into());
    profiles[1] = Cell::Left("Path".into());
    profiles[unalloc_col] = Cell::Left("Unallocated".into());
    profiles[total_col] = Cell::Left("Total".into());
    profiles[slack_col] = Cell::Left("Slack".into());
    table.push(types);
    table.push(profiles);
    let rule = || (0..ncols).map(|_| Cell::Rule).collect::<Vec<Cell>>();
    table.push(rule());
    let (mut sum_unalloc, mut sum_total, mut sum_slack) = (0i64, 0i64, Some(0u64));
    for (devid, path, size, slack) in &rows {
        let mut row = blank();
        row[0] = Cell::Right(devid.to_string());
        row[1] = Cell::Left(esc(path).into_owned());
        let mut used_here = 0i64;
        for i in 0..groups.len() {
            let bytes = cell.get(&(i, *devid)).copied().unwrap_or(0);
            used_here += bytes;
            row[i + 2] = if bytes != 0 {
                Cell::Right(pretty_size_signed(bytes, mode))
            } else {
                Cell::Right("-".into())
            };
        }
        let unalloc = size - used_here;
        row[unalloc_col] = Cell::Right(pretty_size_signed(unalloc, mode));
        row[total_col] = Cell::Right(pretty_size_signed(*size, mode));
        row[slack_col] = match slack {
            Some(v) if *v > 0 => Cell::Right(s(*v)),
            Some(_) => Cell::Right("-".into()),
            // Not in linear text: unknown, not zero.
            None => Cell::Right("?".into()),
        };
        sum_unalloc += unalloc;
        sum_total += size;
        sum_slack = match (sum_slack, slack) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        table.push(row);
    }
    table.push(rule());
    let mut total = blank();
    let mut used = blank();
    total[1] = Cell::Left("Total".into());
    used[1] = Cell::Left("Used".into());
    for (i, b) in groups.iter().enumerate() {
        total[i + 2] = Cell::Right(s(b.size_bytes));
        used[i + 2] = Cell::Right(s(b.used_bytes));
    }
    total[unalloc_col] = Cell::Right(pretty_size_signed(sum_unalloc, mode));
    total[total_col] = Cell::Right(pretty_size_signed(sum_total, mode));
    total[slack_col] = Cell::Right(sum_slack.map_or_else(|| "?".to_owned(), s));
    table.push(total);
    table.push(used);
    dump(&table, ncols)
}

/// btrfs-progs' `table_dump`.
fn dump(table: &[Vec<Cell>], ncols: usize) -> String {
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            table
                .iter()
                .map(|row| match &row[c] {
                    Cell::Left(t) | Cell::Right(t) => t.chars().count(),
                    Cell::Empty | Cell::Rule => 0,
                })
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in table {
        for (c, cell) in row.iter().enumerate() {
            let w = widths[c];
            match cell {
                Cell::Empty => out.push_str(&" ".repeat(w)),
                Cell::Rule => out.push_str(&"-".repeat(w)),
                Cell::Left(t) => out.push_str(&format!("{t:<w$}")),
                Cell::Right(t) => out.push_str(&format!("{t:>w$}")),
            }
            if c + 1 != ncols {
                out.push(' ');
            }
        }
        out.push('\n');
    }
    out
}

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["usage"],
    documents: &["usage", "usage-parse"],
    output: super::page::Shape::Document,
    exits: super::df::EXITS,
    examples: &[
        (
            "Allocation per profile and device.",
            "btrfs-lab usage /mnt/data",
        ),
        (
            "Read pasted `btrfs filesystem usage` output.",
            "btrfs-lab usage --parse usage.txt",
        ),
        (
            "Each device's chunks as proposed for btrfs --format json device usage \
             (PR #1151; root).",
            "btrfs-lab usage --format progs-json /mnt/data",
        ),
    ],
    see_also: &["btrfs-filesystem(8)"],
    ..super::page::Declared::NONE
}];
