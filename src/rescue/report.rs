//! The typed results of `rescue`: one record per file (the manifest's line
//! and `--list`'s JSON Lines record) and the report of the run.

use serde::{Deserialize, Serialize};

/// What a file's bytes are worth after the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileState {
    /// No byte of it needs a missing device (and, when it was read, every
    /// byte read back verified by btrfs' checksums).
    Intact,
    /// Some bytes were on a missing device (or could not be read): the
    /// ranges are listed.
    Damaged,
    /// The map cannot tell (a compressed extent whose disk extent may reach
    /// a missing device, an address outside the chunk tree), and it was not
    /// read to find out.
    Unknown,
    /// No byte of it can be read (every byte was on a missing device, or
    /// none read back): nothing is saved, not even with `--partial` (a
    /// copy would be holes only). Counted apart from `damaged`.
    Lost,
    /// The map said intact, but reading it failed (a second device failing,
    /// an I/O error): reported, never saved as good.
    Failed,
}

/// A byte range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ByteRange {
    /// First byte (offset in the file).
    pub offset: u64,
    /// Bytes.
    pub length: u64,
}

/// What was written for a file under `--copy-to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Saved {
    /// The path written, relative to the target directory (`NAME` for an
    /// intact file, `NAME.partial` for the readable parts of a damaged one).
    pub path: String,
    /// Bytes written (the file's size; a partial copy has the unreadable
    /// ranges zero-filled).
    pub bytes: u64,
    /// Bytes of it that were read from the filesystem (the rest of a partial
    /// copy is zeros).
    pub bytes_rescued: u64,
    /// blake3 of the bytes written, hex.
    pub blake3: String,
}

/// One regular file: its state, the bytes lost, how it was judged, what was
/// saved. The manifest's file line and `--list`'s record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileRecord {
    /// Its path relative to MOUNT (lossy UTF-8 for display).
    pub path: String,
    /// The path's bytes as hex, when they are not valid UTF-8 (else null).
    pub path_hex: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// Intact, damaged, lost, unknown or failed.
    pub state: FileState,
    /// The byte ranges that cannot be read (damaged, failed), merged, in order.
    pub damaged_ranges: Vec<ByteRange>,
    /// Bytes in those ranges.
    pub damaged_bytes: u64,
    /// How the state was decided, one reason per kind of extent met
    /// ("extents mapped through the chunk tree", "inline in metadata",
    /// "compressed extent: its disk extent's first byte on missing devid 3",
    /// "read back: every byte matches btrfs' checksums (checked by the kernel,
    /// and again by rescue against the checksum tree)", ...).
    pub judged: Vec<String>,
    /// What was written under `--copy-to` (null: nothing).
    pub saved: Option<Saved>,
    /// Why it could not be read or saved, if it could not.
    pub error: Option<String>,
}

/// A device of the filesystem as rescue sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RescueDevice {
    /// Device id.
    pub devid: u64,
    /// Its path (empty when missing).
    pub path: String,
    /// Missing: DEV_INFO has no path for it, sysfs says `missing`, or the
    /// chunk tree names it and DEV_INFO does not know it.
    pub missing: bool,
    /// How it was found missing (null when present).
    pub why_missing: Option<String>,
}

/// Counts by state.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct StateCounts {
    /// Intact files.
    pub intact: u64,
    /// Damaged files (some bytes readable).
    pub damaged: u64,
    /// Files of which no byte can be read (earlier versions counted them
    /// as damaged).
    #[serde(default)]
    pub lost: u64,
    /// Files the map cannot judge (not read).
    pub unknown: u64,
    /// Files intact by the map that could not be read.
    pub failed: u64,
}

/// What the walk met besides regular files.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Walked {
    /// Regular files.
    pub files: u64,
    /// Directories (MOUNT included).
    pub directories: u64,
    /// Symbolic links (never followed; copied as links).
    pub symlinks: u64,
    /// FIFOs, sockets, device nodes (neither read nor copied).
    pub other: u64,
    /// Subvolumes entered below MOUNT.
    pub subvolumes: u64,
    /// Mounts of other filesystems below MOUNT (not walked).
    pub other_filesystems: u64,
    /// Directories or files that could not be opened (listed as errors).
    pub unreadable: u64,
}

/// Bytes, by what became of them.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Bytes {
    /// Sum of the regular files' sizes.
    pub total: u64,
    /// Bytes of intact files.
    pub intact: u64,
    /// The readable bytes of damaged and failed files (outside their
    /// damaged ranges): what `--partial` saves. `total` = `intact` +
    /// `readable` + `lost` + `unknown`.
    #[serde(default)]
    pub readable: u64,
    /// Bytes that cannot be read (damaged ranges of damaged, lost and
    /// failed files).
    pub lost: u64,
    /// Bytes of unknown files.
    pub unknown: u64,
    /// Bytes read from the filesystem into the target (this run and
    /// earlier runs of a resumed rescue), partial copies' readable parts
    /// included.
    pub saved: u64,
}

/// What `--copy-to` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CopySummary {
    /// The target directory.
    pub dir: String,
    /// The manifest (JSON Lines, docs/json.md).
    pub manifest: String,
    /// `--partial`: damaged files' readable parts saved as `NAME.partial`.
    pub partial: bool,
    /// Files written in this run (intact copies and partial ones).
    pub copied: u64,
    /// Partial copies among them.
    pub partial_copies: u64,
    /// Files an earlier run had saved and verified, skipped.
    pub resumed: u64,
    /// Symbolic links made.
    pub symlinks: u64,
    /// The copy went through every file (false: stopped by a signal or an
    /// error; a re-run with the same arguments resumes).
    pub complete: bool,
    /// Files the target had no room for (ENOSPC), not saved; the copy went
    /// on past them, and a re-run tries them again.
    #[serde(default)]
    pub not_fitted: Vec<String>,
}

/// `btrfs-lab rescue MOUNT`: which files survive a lost device, and what
/// was copied out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RescueReport {
    /// The directory rescued from, as given.
    pub mount: String,
    /// The filesystem's UUID.
    pub fsid: String,
    /// Data profiles (from the chunk tree).
    pub data_profiles: Vec<crate::model::profile::Profile>,
    /// Metadata profiles.
    pub metadata_profiles: Vec<crate::model::profile::Profile>,
    /// Every device, missing ones included.
    pub devices: Vec<RescueDevice>,
    /// The missing devices' ids.
    pub missing_devids: Vec<u64>,
    /// What the walk met.
    pub walked: Walked,
    /// Files by state.
    pub files: StateCounts,
    /// Bytes by what became of them.
    pub bytes: Bytes,
    /// The files listed (every file that is not intact, in walk order, up
    /// to `listed_limit`; `--list` streams every file instead).
    pub listed: Vec<FileRecord>,
    /// Files not intact that are not in `listed`.
    pub not_listed: u64,
    /// Things the reader should know (no device missing, subvolumes out of
    /// scope, other filesystems not walked).
    pub notes: Vec<String>,
    /// `--copy-to`: what was done (null without it).
    pub copy: Option<CopySummary>,
}

impl RescueReport {
    /// Files that are not intact (damaged, lost, unknown, failed).
    pub fn not_intact(&self) -> u64 {
        self.files.damaged + self.files.lost + self.files.unknown + self.files.failed
    }

    /// The exit status: `files-lost` when a file is not intact, otherwise
    /// ok.
    pub fn exit_status(&self) -> u8 {
        if self.not_intact() > 0
            || self.walked.unreadable > 0
            || self.copy.as_ref().is_some_and(|c| !c.not_fitted.is_empty())
        {
            crate::model::exit::FILES_LOST.code
        } else {
            crate::model::exit::OK.code
        }
    }
}
