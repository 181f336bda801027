//! Shared argument types: the unit options of btrfs-progs (`-b`, `-h`,
//! `-H`, `--si`, `--iec`, `-k/-m/-g/-t`) that every command printing sizes
//! flattens in, the text the shared option names share, and the value
//! parsers for sizes and profiles.

use std::sync::OnceLock;

use clap::Args;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::parse::size::parse_size;
use btrfs_lab::report::units::{UnitBase, UnitMode, pretty_size};

/// One unit mode at most (`-b`, `--human-readable`, `-H`, `-k`, `-m`, `-g`,
/// `-t` are one group of mutually exclusive options); `--iec`/`--si` pick
/// the base of a mode that has one, so `-b` refuses both and `-H` (base
/// 1000 already) refuses `--iec`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = UNITS_HEADING)]
pub struct UnitArgs {
    /// Plain bytes.
    #[arg(short = 'b', long = "raw", group = "unit_mode", conflicts_with_all = ["iec", "si"])]
    raw: bool,
    /// Human-readable with 1024-based units (the default).
    #[arg(short = 'h', long = "human-readable", group = "unit_mode")]
    human_readable: bool,
    /// Human-readable with 1000-based units.
    #[arg(short = 'H', group = "unit_mode", conflicts_with = "iec")]
    si_human: bool,
    /// Use 1024-based units (KiB, MiB, ...).
    #[arg(long, conflicts_with = "si")]
    iec: bool,
    /// Use 1000-based units (kB, MB, ...).
    #[arg(long)]
    si: bool,
    /// Show sizes in KiB (or kB with --si).
    #[arg(short = 'k', long, group = "unit_mode")]
    kbytes: bool,
    /// Show sizes in MiB (or MB with --si).
    #[arg(short = 'm', long, group = "unit_mode")]
    mbytes: bool,
    /// Show sizes in GiB (or GB with --si).
    #[arg(short = 'g', long, group = "unit_mode")]
    gbytes: bool,
    /// Show sizes in TiB (or TB with --si).
    #[arg(short = 't', long, group = "unit_mode")]
    tbytes: bool,
}

impl UnitArgs {
    /// Makes this the unit of every size the command prints in text
    /// ([`size`]), and returns it.
    pub fn select(&self) -> UnitMode {
        let mode = self.mode();
        let _ = SELECTED.set(mode);
        mode
    }

    pub fn mode(&self) -> UnitMode {
        if self.raw {
            return UnitMode::Raw;
        }
        let base = if self.si || self.si_human {
            UnitBase::Decimal
        } else {
            UnitBase::Binary
        };
        let fixed = [self.kbytes, self.mbytes, self.gbytes, self.tbytes]
            .iter()
            .position(|&on| on)
            .map(|i| i as u32 + 1);
        match fixed {
            Some(n) => UnitMode::Fixed(base, n),
            None => UnitMode::Human(base),
        }
    }
}

/// The unit chosen on the command line (one command per process).
static SELECTED: OnceLock<UnitMode> = OnceLock::new();

/// A size in the unit the user chose ([`UnitArgs::select`]; IEC
/// human-readable, `256.00MiB`, when none was chosen), for text output.
/// Sizes inside messages that come from the library (a check's reason, an
/// error) stay in IEC units.
pub fn size(bytes: u64) -> String {
    pretty_size(bytes, SELECTED.get().copied().unwrap_or_default())
}

/// The help heading of [`UnitArgs`]' options.
pub const UNITS_HEADING: &str = "Size units (text output; JSON is always in bytes)";

/// The ids of [`UnitArgs`]' options (their own lines are hidden from
/// `--help`, which shows [`UNITS_HELP`] instead).
pub const UNIT_IDS: [&str; 9] = [
    "raw",
    "human_readable",
    "si_human",
    "iec",
    "si",
    "kbytes",
    "mbytes",
    "gbytes",
    "tbytes",
];

/// The unit options in a few lines, once at the end of each `--help` that
/// has them (as btrfs-progs' own commands take them).
pub const UNITS_HELP: &str = "\
Size units (text output; JSON is always in bytes), as btrfs-progs takes them:
  -b, --raw             plain bytes
  -h, --human-readable  1024-based units, the default (-H: 1000-based)
  --iec, --si           1024-based (KiB, MiB, ...) or 1000-based (kB, MB, ...)
  -k, -m, -g, -t        every size in KiB, MiB, GiB or TiB (kB ... with --si)";

/// `--sysroot`, the same on every command that has it.
pub const SYSROOT_HELP: &str = "Read /sys, /proc and /var/lib under DIR instead of / \
(captured trees, tests) [default: $BTRFS_LAB_SYSROOT or /]";

/// `--data`, the same everywhere (a command may say `With --x:` first).
pub const DATA_HELP: &str =
    "Data profile: single, dup, raid0, raid1, raid1c3, raid1c4, raid10, raid5, raid6";

/// `--metadata`, the same everywhere.
pub const METADATA_HELP: &str = "Metadata profile, as --data (system chunks follow it)";

/// clap value parser for sizes (`256M`, `2G`, `4096`).
pub fn size_arg(s: &str) -> std::result::Result<u64, String> {
    parse_size(s).map_err(|e| e.message().to_owned())
}

/// clap value parser for rates (`4GB/s`, `850MiB/s`), in bytes per second.
pub fn rate_arg(s: &str) -> std::result::Result<f64, String> {
    btrfs_lab::report::rate::parse_rate(s).ok_or_else(|| {
        format!("'{s}' is not a rate: give it as the loader printed it, e.g. 4GB/s or 850MiB/s")
    })
}

/// clap value parser for profiles (`raid1c3`).
pub fn profile_arg(s: &str) -> std::result::Result<Profile, String> {
    s.parse::<Profile>()
        .map_err(|e| format!("{} ({})", e.message(), e.hint().unwrap_or_default()))
}

/// A value parser that offers a fixed list of names to shell completion
/// (clap_complete reads `possible_values`; the arg hides them from
/// `--help`, whose text lists them) and parses with `parse`, whose error
/// clap shows as it is.
#[derive(Clone, Copy)]
pub struct Named<T> {
    names: &'static [&'static str],
    parse: fn(&str) -> std::result::Result<T, String>,
}

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Named<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<T, clap::Error> {
        self.parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            self.names
                .iter()
                .map(|n| clap::builder::PossibleValue::new(*n)),
        ))
    }
}

/// The profile names, in [`Profile::ALL`]'s order.
const PROFILE_NAMES: [&str; 9] = [
    "single", "dup", "raid0", "raid1", "raid1c3", "raid1c4", "raid10", "raid5", "raid6",
];

/// `--data` / `--metadata` values: [`profile_arg`], completed from the
/// profile names.
pub fn profiles() -> Named<Profile> {
    Named {
        names: &PROFILE_NAMES,
        parse: profile_arg,
    }
}

/// A value parser of `parse` that completes `names`.
pub const fn named<T>(
    names: &'static [&'static str],
    parse: fn(&str) -> std::result::Result<T, String>,
) -> Named<T> {
    Named { names, parse }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_profile_names_are_the_profiles() {
        let names: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names, PROFILE_NAMES);
    }
    use clap::Parser;

    #[derive(Debug, Parser)]
    #[command(disable_help_flag = true)]
    struct T {
        #[command(flatten)]
        units: UnitArgs,
    }

    fn parse(args: &[&str]) -> Result<UnitMode, String> {
        T::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .map(|t| t.units.mode())
            .map_err(|e| e.to_string().lines().next().unwrap_or("").to_owned())
    }

    #[test]
    fn unit_modes_are_one_exclusive_group() {
        assert_eq!(parse(&[]), Ok(UnitMode::Human(UnitBase::Binary)));
        assert_eq!(parse(&["-b"]), Ok(UnitMode::Raw));
        assert_eq!(
            parse(&["-k", "--si"]),
            Ok(UnitMode::Fixed(UnitBase::Decimal, 1))
        );
        assert_eq!(
            parse(&["-g", "--iec"]),
            Ok(UnitMode::Fixed(UnitBase::Binary, 3))
        );
        assert_eq!(parse(&["--si"]), Ok(UnitMode::Human(UnitBase::Decimal)));
        assert_eq!(parse(&["-H"]), Ok(UnitMode::Human(UnitBase::Decimal)));
        assert_eq!(parse(&["-h"]), Ok(UnitMode::Human(UnitBase::Binary)));
        assert_eq!(
            parse(&["-h", "--si"]),
            Ok(UnitMode::Human(UnitBase::Decimal))
        );
        for bad in [
            &["-b", "--si"][..],
            &["-b", "--iec"],
            &["-k", "-g"],
            &["-t", "-k"],
            &["-b", "-k"],
            &["-H", "-m"],
            &["-H", "--iec"],
            &["--human-readable", "-b"],
            &["--iec", "--si"],
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("cannot be used with"), "{bad:?}: {e}");
        }
    }
}
