//! Shared argument types: the unit options btrfs-progs' space commands take
//! (`df`, `usage`, `show`; `-h` stays help, human-readable is the default),
//! and the value parsers for sizes and profiles.

use clap::Args;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::model::units::{UnitBase, UnitMode};
use btrfs_lab::parse::size::parse_size;

#[derive(Debug, Clone, Args)]
pub struct UnitArgs {
    /// Plain bytes.
    #[arg(short = 'b', long = "raw", conflicts_with_all = ["human_readable", "si_human", "kbytes", "mbytes", "gbytes", "tbytes"])]
    raw: bool,
    /// Human-readable with 1024-based units (the default).
    #[arg(long = "human-readable")]
    human_readable: bool,
    /// Human-readable with 1000-based units.
    #[arg(short = 'H')]
    si_human: bool,
    /// Use 1024-based units (KiB, MiB, ...).
    #[arg(long, conflicts_with = "si")]
    iec: bool,
    /// Use 1000-based units (kB, MB, ...).
    #[arg(long)]
    si: bool,
    /// Show sizes in KiB (or kB with --si).
    #[arg(short = 'k', long, conflicts_with_all = ["mbytes", "gbytes", "tbytes"])]
    kbytes: bool,
    /// Show sizes in MiB (or MB with --si).
    #[arg(short = 'm', long, conflicts_with_all = ["gbytes", "tbytes"])]
    mbytes: bool,
    /// Show sizes in GiB (or GB with --si).
    #[arg(short = 'g', long, conflicts_with = "tbytes")]
    gbytes: bool,
    /// Show sizes in TiB (or TB with --si).
    #[arg(short = 't', long)]
    tbytes: bool,
}

impl UnitArgs {
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

/// clap value parser for sizes (`256M`, `2G`, `4096`).
pub fn size_arg(s: &str) -> std::result::Result<u64, String> {
    parse_size(s).map_err(|e| e.message().to_owned())
}

/// clap value parser for profiles (`raid1c3`).
pub fn profile_arg(s: &str) -> std::result::Result<Profile, String> {
    s.parse::<Profile>()
        .map_err(|e| format!("{} ({})", e.message(), e.hint().unwrap_or_default()))
}
