//! The findings catalog: every stable code, its one-line meaning, its
//! default severity, the rule that decides the severity when it depends on
//! figures ([`super::rules`]) and the commands that emit it. The table in
//! `docs/findings.md` is generated from it
//! (`BTRFS_LAB_WRITE_FINDINGS=1 cargo test --lib model::finding::`), and a
//! test fails while the committed file differs.

use serde::{Deserialize, Serialize};

use super::Severity;

/// How a code's severity is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Always the default severity.
    Fixed,
    /// From the figures, by the named function of [`super::rules`]; the
    /// text says the rule in words.
    Numbers(&'static str, &'static str),
}

/// One code of the catalog.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The code.
    pub code: Code,
    /// Its stable string.
    pub name: &'static str,
    /// Older strings still accepted when reading JSON.
    #[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
    pub(crate) aliases: &'static [&'static str],
    /// The name its command's own document gives it ([`super::short`]):
    /// `links --json`'s `kind`, `bench --json`'s `checks[].code`.
    pub short: Option<&'static str>,
    /// The severity it has unless its rule says otherwise.
    pub severity: Severity,
    /// How its severity is decided.
    pub rule: Rule,
    /// The commands that emit it.
    pub commands: &'static [&'static str],
    /// What it means, one line.
    pub meaning: &'static str,
}

macro_rules! catalog {
    ($(
        $variant:ident = $name:literal $(alias $alias:literal)? $(as $short:literal)?,
        $sev:ident, $rule:expr, [$($cmd:literal),* $(,)?],
        $meaning:literal;
    )*) => {
        /// A finding's stable code: alerting rules and playbooks match on
        /// its string, which is never renamed (a merged duplicate stays
        /// readable as an alias).
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            Serialize, Deserialize, schemars::JsonSchema,
        )]
        pub enum Code {
            $(
                #[doc = $meaning]
                #[serde(rename = $name $(, alias = $alias)?)]
                $variant,
            )*
        }

        /// Every code, in the order of `docs/findings.md`.
        pub(crate) const CATALOG: &[Entry] = &[
            $(
                Entry {
                    code: Code::$variant,
                    name: $name,
                    aliases: &[$($alias)?],
                    short: first(&[$($short)?]),
                    severity: Severity::$sev,
                    rule: $rule,
                    commands: &[$($cmd),*],
                    meaning: $meaning,
                },
            )*
        ];
    };
}

use Rule::{Fixed, Numbers};

/// The one name of an optional `as "short"`.
const fn first(names: &[&'static str]) -> Option<&'static str> {
    match names {
        [name] => Some(name),
        _ => None,
    }
}

catalog! {
    // Space (`df`, `usage`, both `--parse`, and `doctor`).
    MetadataNearlyFull = "metadata-nearly-full", Warning,
        Numbers("metadata_allocated_full, capacity_full",
            "with unallocated space known (usage, usage --parse, doctor): used with the reserve over what metadata can grow to (smaller chunks counted), warning above 90%, critical from 95%; info when only the allocated chunks are ≥ 90% used and new ones fit (a full-size chunk that does not fit is metadata-chunk-no-room instead); df alone (no unallocated space): warning when the chunks are ≥ 90% used or the reserve is larger than what is free in them"),
        ["df", "usage", "df --parse", "usage --parse", "doctor", "explain"],
        "metadata chunks are (nearly) full: ENOSPC while df still shows free space";
    GlobalReserveUsed = "global-reserve-used", Warning,
        Numbers("global_reserve_used",
            "critical from half the reserve used; warning from a quarter, or any use while metadata is tight (over 90% of what it can grow to, or a metadata finding that is not info); else info (a commit takes a few KiB)"),
        ["df", "usage", "df --parse", "usage --parse", "doctor", "explain"],
        "btrfs is taking from its emergency metadata reserve";
    DataNoRedundancy = "data-no-redundancy" alias "data-without-redundancy", Info, Fixed,
        ["df", "usage", "df --parse", "usage --parse", "doctor", "explain"],
        "data is single or RAID0 over several devices: one failed device loses files (info everywhere: a deliberate RAID0 is never paged)";
    UnfinishedConversion = "unfinished-conversion", Warning, Fixed,
        ["df", "usage", "df --parse", "usage --parse", "explain"],
        "one type has chunks of more than one profile: a conversion did not finish";
    EmptyLeftoverChunks = "empty-leftover-chunks", Info, Fixed,
        ["df", "usage", "df --parse", "usage --parse", "explain"],
        "empty single chunks that old mkfs left next to the real profile";
    AskForRawBytes = "ask-for-raw-bytes", Info, Fixed,
        ["df --parse", "usage --parse", "explain"],
        "the units of a paste are ambiguous: raw bytes (-b) settle them";
    AskForUsage = "ask-for-usage", Info, Fixed,
        ["df", "df --parse", "explain"],
        "data chunks are nearly full and `btrfs filesystem df` cannot tell whether new ones fit";
    // doctor: devices and layout.
    DeviceMissing = "device-missing", Critical, Fixed, ["doctor", "usage", "explain"],
        "a member device is missing: every chunk lost a copy (profiles without one lost data)";
    MountDegraded = "mount-degraded", Critical, Fixed, ["doctor", "explain"],
        "mounted with -o degraded: new chunks are written without redundancy";
    DeviceErrorsNoRedundancy = "device-errors-no-redundancy", Critical, Fixed, ["doctor", "explain"],
        "a device has read/write/corruption errors and some chunks have no second copy";
    DeviceErrors = "device-errors", Warning, Fixed, ["doctor", "explain"],
        "a device's error counters are not zero (scrub repairs from the good copy)";
    DeviceStatsInvalid = "device-stats-invalid", Warning, Fixed, ["doctor"],
        "a device error counter reads 18446744073709551615 (UINT64_MAX): an invalid value, not a count of errors (reset it after a scrub)";
    DeviceVanished = "device-vanished", Critical, Fixed, ["doctor"],
        "a member's block device is gone while the kernel still counts it a member: its writes fail from now on (the kernel notices at the next write or mount)";
    DeviceStale = "device-stale", Warning, Fixed, ["doctor"],
        "a member's superblock is transactions behind the filesystem: it was away while the others were written, and its copies of that are old until a scrub of it rewrites them";
    DeviceReturned = "device-returned", Warning, Fixed, ["doctor"],
        "a member missing or vanished at doctor's last look is back, and no scrub of it since has rewritten what it missed";
    DeviceErrorsRising = "device-errors-rising", Warning,
        Numbers("errors_rising",
            "warning; info when the kernel changed since the last look from one older than 7.1 to 7.1 or later, which counts every failed bio (fc3d53288158): a jump then is the new counting, not new damage"),
        ["doctor"],
        "a member's error counters rose since doctor's last look";
    DeviceErrorsRepaired = "device-errors-repaired", Warning, Fixed, ["doctor"],
        "a device's error counters are not zero and a finished scrub since left nothing unrepaired: reset the counters (btrfs device stats -z) so that new errors stand out";
    MetadataChunkNoRoom = "metadata-chunk-no-room", Warning,
        Numbers("metadata_no_room",
            "used metadata with the reserve over what metadata can grow to (the kernel's smaller chunks counted): critical from 80% or a quarter of the global reserve in use, warning from 50%, else info (nothing to run)"),
        ["usage", "usage --parse", "doctor", "explain"],
        "no device set has room for a full-size metadata chunk";
    DataNearlyFull = "data-nearly-full", Warning,
        Numbers("capacity_full",
            "data used over what it can grow to: warning above 90%, critical from 98%"),
        ["usage", "usage --parse", "doctor", "explain"],
        "data is nearly full: writes fail with ENOSPC soon";
    BalancePaused = "balance-paused", Warning, Fixed, ["doctor", "explain"],
        "a balance or conversion is paused: part of the filesystem keeps its old profiles";
    BalanceRunning = "balance-running", Info, Fixed, ["doctor", "explain"],
        "a balance or conversion is running: throughput is lower until it ends";
    MixedProfiles = "mixed-profiles", Warning, Fixed, ["doctor"],
        "a type has several profiles: an unfinished conversion";
    MetadataOneDevice = "metadata-one-device", Warning, Fixed, ["doctor"],
        "metadata is single or DUP on several devices: losing one loses the filesystem";
    MetadataRaid56 = "metadata-raid56", Warning, Fixed, ["doctor"],
        "metadata is RAID5/6, which the btrfs developers advise against";
    DataNarrowChunks = "data-narrow-chunks", Warning, Fixed, ["doctor"],
        "striped data (RAID0, RAID10, RAID5/6) sits in chunks narrower than the array, written before a device was added: reads of it use fewer devices than there are (btrfs-lab balance restripes it)";
    // doctor: scrub and kernel.
    ScrubNeverRun = "scrub-never-run", Info, Fixed, ["doctor"],
        "no scrub on record";
    ScrubOld = "scrub-old" alias "scrub-overdue", Warning, Fixed, ["doctor"],
        "the last complete scrub ended more than 31 days ago (scrub --all's minimum age and a day)";
    ScrubErrors = "scrub-errors", Warning,
        Numbers("scrub_errors", "critical when an error could not be repaired, else warning"),
        ["doctor", "explain"],
        "the last scrub found errors";
    ScrubInterrupted = "scrub-interrupted", Info, Fixed, ["doctor", "explain"],
        "the last scrub was cancelled or interrupted";
    ScrubSpeedLimited = "scrub-speed-limited", Info,
        Numbers("scrub_speed_limited",
            "warning when a btrfs-lab scrub that was killed set it (its record in the state directory's settings ledger), else info (set by hand, or by a scrub running now)"),
        ["doctor"],
        "a device's scrub speed is limited (sysfs scrub_speed_max is not 0): every scrub of it runs at most that fast";
    HugepagesLeft = "hugepages-left", Info,
        Numbers("hugepages_left",
            "warning when the bench that raised it is gone, info while it runs"),
        ["doctor"],
        "vm.nr_hugepages was raised by a btrfs-lab bench --hugepages (its record in the settings ledger): that memory stays reserved until it is put back";
    KernelTooOld = "kernel-too-old", Warning, Fixed, ["doctor"],
        "a feature in use needs a newer kernel than the running one";
    // explain: the kernel log of a paste.
    ChecksumErrorsLogged = "checksum-errors-logged", Warning,
        Numbers("checksum_errors_logged",
            "critical when the log also says a block could not be repaired (no good copy), else warning"),
        ["explain"],
        "the kernel log shows checksum failures of data (each with its root, inode and offset, or the path scrub printed)";
    ForcedReadonly = "forced-readonly", Critical, Fixed, ["explain", "doctor"],
        "the filesystem was forced read-only after an error (doctor: its superblock is read-only under a read-write mount; explain: the kernel log shows an aborted transaction, with its errno, or the forced read-only)";
    MetadataDamageLogged = "metadata-damage-logged", Critical, Fixed, ["explain"],
        "the kernel log shows damaged metadata (parent transid verify failed, corrupt leaf or node, checksum verify failed)";
    // doctor: audits of fstab and the mount options.
    FstabDeviceName = "fstab-device-name", Warning, Fixed, ["doctor"],
        "fstab names a member by its kernel device name (`/dev/nvme1n1`), which can change between boots, instead of the filesystem's UUID";
    FstabDegraded = "fstab-degraded", Warning, Fixed, ["doctor"],
        "fstab mounts with `degraded`: a missing device then goes unnoticed and new chunks are written without redundancy";
    FstabNoDeviceTimeout = "fstab-no-device-timeout", Info, Fixed, ["doctor"],
        "a multi-device root in fstab has no `x-systemd.device-timeout=`: with a member missing, boot waits for it without end";
    DiscardTwice = "discard-twice", Info, Fixed, ["doctor"],
        "mounted with synchronous discard and an fstrim timer enabled: every delete waits for its trim, and fstrim trims again (not for discard=async, whose trimmed ranges fstrim skips)";
    SsdSpread = "ssd-spread", Info, Fixed, ["doctor"],
        "mounted with ssd_spread: allocation only into wholly free areas, more chunks and ENOSPC sooner";
    SpaceCacheV1 = "space-cache-v1", Warning, Fixed, ["doctor"],
        "the free space cache v1 is in use: deprecated, slower on large filesystems, disabled from Linux 7.3; the free space tree (v2) replaces it";
    Raid1ReadPolicy = "raid1-read-policy", Info, Fixed, ["doctor"],
        "RAID1 reads choose the mirror by process id: a single-threaded reader (a model loader) reads one device only";
    DiscardUnsupported = "discard-unsupported", Info, Fixed, ["doctor"],
        "mounted with discard, but a member does not support discard (the option does nothing there)";
    OldestKernel = "oldest-kernel", Info, Fixed, ["doctor"],
        "the oldest kernel that can mount this filesystem is newer than an older rescue system's (5.4)";
    // doctor --before-upgrade VERSION: what changes on that kernel.
    UpgradeCannotMount = "upgrade-cannot-mount", Critical,
        Numbers("upgrade_cannot_mount",
            "critical when the kernel cannot mount the filesystem at all, warning when it mounts it read-only only"),
        ["doctor --before-upgrade"],
        "the kernel asked about is older than the features of this filesystem need (the same table as oldest-kernel)";
    UpgradeUsebackuproot = "upgrade-usebackuproot", Warning, Fixed, ["doctor --before-upgrade"],
        "fstab, the kernel command line or the mount options give the plain usebackuproot option, which Linux 7.3 removed: that mount fails";
    UpgradeSpaceCacheV1 = "upgrade-space-cache-v1", Warning, Fixed, ["doctor --before-upgrade"],
        "the filesystem uses the v1 space cache, which Linux 7.3 disables: it then mounts with no free space cache (neither converted nor refused)";
    UpgradeOdirect = "upgrade-odirect", Info, Fixed, ["doctor --before-upgrade"],
        "O_DIRECT writes on this filesystem's data profile are expected to behave differently on that kernel (from the kernels' sources, not measured)";
    UpgradeErrorCounters = "upgrade-error-counters", Info, Fixed, ["doctor --before-upgrade"],
        "from Linux 7.1 every bio error is counted: the device error counters may jump after the upgrade";
    BenchLeftovers = "bench-leftovers", Info,
        Numbers("bench_leftovers", "warning from 1 GiB held, else info"),
        ["doctor"],
        "work directories of bench runs that died hold space";
    // doctor --deep.
    OdirectBufferedFallback = "odirect-buffered-fallback", Warning, Fixed, ["doctor --deep"],
        "O_DIRECT writes to checksummed files become buffered writes (probe-dio)";
    OdirectProfileForced = "odirect-profile-forced", Warning, Fixed, ["doctor --deep"],
        "the profile (DUP, RAID5/6 data) forces O_DIRECT writes through the page cache (probe-dio)";
    OdirectBounced = "odirect-bounced", Info, Fixed, ["doctor --deep"],
        "O_DIRECT writes bypass the page cache through a bounce buffer: checksums kept, a copy paid (probe-dio)";
    OdirectInconclusive = "odirect-inconclusive", Info, Fixed, ["doctor --deep"],
        "probe-dio could not tell whether O_DIRECT writes are direct";
    DeepProbeFailed = "deep-probe-failed", Info, Fixed, ["doctor --deep"],
        "the O_DIRECT probe could not run";
    NocowMissing = "nocow-missing", Warning, Fixed, ["doctor --deep"],
        "VM image or database files are copy-on-write";
    NocowWithCompression = "nocow-with-compression", Warning, Fixed, ["doctor --deep"],
        "NOCOW or database paths carry the compression attribute";
    DeepNocowFailed = "deep-nocow-failed", Info, Fixed, ["doctor --deep"],
        "the NOCOW audit could not run";
    AppDioFallback = "app-dio-fallback", Warning, Fixed, ["doctor"],
        "an application (QEMU, libvirt, MariaDB/MySQL, PostgreSQL, a loop device, a process) opens files on btrfs with O_DIRECT that this kernel is expected to write buffered (checksummed files, or a data profile with copies)";
    // PCIe links (`links --json` spells them by kind, the short name).
    LinkDegraded = "link-degraded" as "degraded", Warning, Fixed, ["links", "doctor --deep"],
        "a PCIe link trained below what both of its ends support";
    LinkCappedByPort = "link-capped-by-port" as "capped-by-port", Warning, Fixed, ["links", "doctor --deep"],
        "the port above the drive is narrower or slower than the drive";
    LinkCappedUpstream = "link-capped-upstream" as "capped-upstream", Warning, Fixed, ["links", "doctor --deep"],
        "a link further up is narrower than the drive's own link";
    LinkBehindChipset = "link-behind-chipset" as "behind-chipset", Info, Fixed, ["links", "doctor --deep"],
        "the drive hangs off the chipset, whose uplink it shares";
    LinkSharedUplink = "link-shared-uplink" as "shared-uplink", Info,
        Numbers("shared_uplink",
            "warning when the drives' own links together could move more than the shared link, else info"),
        ["links", "doctor --deep"],
        "several of the drives share one uplink";
    LinkSharedDisk = "link-shared-disk" as "shared-disk", Info,
        Numbers("shared_disk",
            "warning when the data profile keeps copies or parity (one drive failing loses them all), else info"),
        ["links", "doctor --deep"],
        "several members of the array are one drive (loop devices on one disk, partitions of one drive)";
    // bench: the honesty checks of a figure (`bench --json` spells them by
    // the short name in `checks[].code`; warning is its `flag`: the figure
    // is not a measurement of the devices; info its `note`).
    BenchDeviceMismatch = "bench-device-mismatch" as "device_mismatch", Warning, Fixed, ["bench"],
        "fio claims more bytes than the members moved";
    BenchPageCacheRead = "bench-page-cache-read" as "page_cache_read", Warning, Fixed, ["bench"],
        "the test file was in the page cache before a read run";
    BenchPageCacheWrite = "bench-page-cache-write" as "page_cache_write", Warning, Fixed, ["bench"],
        "a write run dirtied page-cache pages: it was buffered";
    BenchCompression = "bench-compression" as "compression", Warning,
        Numbers("bench_compression",
            "warning (a flag) when the test file has compressed extents, info (a note) when only the mount option compresses"),
        ["bench"],
        "the test file has compressed extents, or compression is on";
    BenchCpuBound = "bench-cpu-bound" as "cpu_bound", Info, Fixed, ["bench"],
        "fio's threads used about one CPU core each";
    BenchAboveCeiling = "bench-above-ceiling" as "above_ceiling", Warning, Fixed, ["bench"],
        "above the array's encoded PCIe ceiling";
    BenchNeverWritten = "bench-never-written" as "never_written", Warning, Fixed, ["bench"],
        "the test file has never-written (unwritten or hole) regions";
    BenchThermal = "bench-thermal" as "thermal", Warning, Fixed, ["bench"],
        "the drives throttled during the bench";
    BenchFioError = "bench-fio-error" as "fio_error", Warning, Fixed, ["bench"],
        "fio reported an error for the job";
    BenchOtherIo = "bench-other-io" as "other_io", Warning, Fixed, ["bench"],
        "the members moved clearly more than fio did: other I/O ran on them during the run (another bench, a scrub, a backup)";
    // bench --sustained.
    SustainedWriteCliff = "sustained-write-cliff", Info, Fixed, ["bench --sustained"],
        "the write rate dropped in one step: the drives' write cache filled";
    SustainedWriteDecline = "sustained-write-decline", Info, Fixed, ["bench --sustained"],
        "the write rate sank gradually (more often heat than a cache)";
    SustainedSeriesMismatch = "sustained-series-mismatch", Warning, Fixed, ["bench --sustained"],
        "the write-rate series does not add up to the bytes written: its shape is not a result";
}

impl Code {
    /// Its catalog entry.
    pub fn entry(self) -> &'static Entry {
        // CATALOG holds every variant in declaration order.
        &CATALOG[self as usize]
    }

    /// Its stable string (`metadata-nearly-full`).
    pub fn as_str(self) -> &'static str {
        self.entry().name
    }

    /// The name its command's own document gives it (`device_mismatch` in
    /// `bench --json`), else its stable string.
    pub fn short_name(self) -> &'static str {
        self.entry().short.unwrap_or(self.entry().name)
    }

    /// The severity it has unless its rule says otherwise.
    pub(crate) fn default_severity(self) -> Severity {
        self.entry().severity
    }

    /// Its one-line meaning.
    pub fn meaning(self) -> &'static str {
        self.entry().meaning
    }

    /// The code of a stable string (aliases included).
    #[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
    pub(crate) fn from_name(s: &str) -> Option<Code> {
        CATALOG
            .iter()
            .find(|e| e.name == s || e.aliases.contains(&s))
            .map(|e| e.code)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Code> for &str {
    fn eq(&self, other: &Code) -> bool {
        *self == other.as_str()
    }
}

/// `docs/findings.md`: the table of every code.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn markdown() -> String {
    let mut t = String::from(
        "# Findings\n\n\
         Every finding btrfs-lab reports has a stable `code` (what alerting rules and\n\
         playbooks match on; never renamed), a `severity` (`critical`, `warning`,\n\
         `info`) and the numbers behind it. One catalog (`src/model/finding/catalog.rs`)\n\
         holds them and one module (`src/model/finding/rules.rs`) decides every\n\
         severity that depends on figures, so `df`, `usage`, `doctor`, `links` and\n\
         `bench` agree. `doctor` exits with the worst severity (docs/exit-codes.md).\n\n\
         This file is generated: `BTRFS_LAB_WRITE_FINDINGS=1 cargo test --lib model::finding::`\n\
         writes it, and `cargo test` fails while it is stale.\n\n\
         | code | severity | meaning | emitted by |\n\
         | --- | --- | --- | --- |\n",
    );
    for e in CATALOG {
        let severity = match e.rule {
            Rule::Fixed => e.severity.name().to_owned(),
            Rule::Numbers(_, words) => format!("{} by default; {words}", e.severity.name()),
        };
        let mut name = if e.aliases.is_empty() {
            format!("`{}`", e.name)
        } else {
            let old: Vec<String> = e.aliases.iter().map(|a| format!("`{a}`")).collect();
            format!("`{}` (read also as {})", e.name, old.join(", "))
        };
        if let Some(short) = e.short {
            name.push_str(&format!(" (`{short}` in `{} --json`)", e.commands[0]));
        }
        let cmds: Vec<String> = e.commands.iter().map(|c| format!("`{c}`")).collect();
        t.push_str(&format!(
            "| {name} | {severity} | {} | {} |\n",
            e.meaning.replace('|', "\\|"),
            cmds.join(", ")
        ));
    }
    t.push_str(
        "\n`links --json` spells the `link-*` findings by their short name in `kind`\n\
         (`degraded`, `capped-by-port`, ...; `code` carries the name above), and\n\
         `bench --json` its honesty checks of a figure (`bench-*`) by their short name in\n\
         `checks[].code` (`device_mismatch`, ...), with `severity` `flag` for warning and\n\
         `note` for info; `doctor --deep` carries link findings with the codes above.\n\n\
         `data-no-redundancy` is info everywhere: RAID0 (or single) data over several\n\
         devices is a choice people make on purpose (scratch and model-loading arrays),\n\
         and a `doctor` run by monitoring must not page, or stay yellow, for it.\n",
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_entry_a_rule_and_a_doc_line() {
        for (i, e) in CATALOG.iter().enumerate() {
            assert_eq!(e.code as usize, i, "{} out of order", e.name);
            assert!(
                !e.meaning.is_empty() && !e.meaning.contains('\n'),
                "{}",
                e.name
            );
            assert!(!e.commands.is_empty(), "{} has no command", e.name);
            if let Rule::Numbers(f, words) = e.rule {
                assert!(!f.is_empty() && !words.is_empty(), "{}", e.name);
            }
            // The string is the serde name, and reads back.
            let json = serde_json::to_string(&e.code).unwrap();
            assert_eq!(json, format!("\"{}\"", e.name));
            assert_eq!(serde_json::from_str::<Code>(&json).unwrap(), e.code);
            assert_eq!(Code::from_name(e.name), Some(e.code));
            for a in e.aliases {
                let back: Code = serde_json::from_str(&format!("\"{a}\"")).unwrap();
                assert_eq!(back, e.code);
            }
            // Kebab-case, unique.
            assert!(
                e.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{}",
                e.name
            );
            assert_eq!(
                CATALOG
                    .iter()
                    .filter(|x| x.name == e.name || x.aliases.contains(&e.name))
                    .count(),
                1,
                "{} twice",
                e.name
            );
        }
        assert_eq!(
            serde_json::from_str::<Code>("\"data-without-redundancy\"").unwrap(),
            Code::DataNoRedundancy
        );
        assert!(serde_json::from_str::<Code>("\"no-such-code\"").is_err());
        // A short name is unique among its command's codes.
        for e in CATALOG.iter().filter(|e| e.short.is_some()) {
            let same = CATALOG
                .iter()
                .filter(|x| x.short == e.short && x.commands[0] == e.commands[0])
                .count();
            assert_eq!(same, 1, "{:?} twice", e.short);
        }
    }

    #[test]
    fn findings_md_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/findings.md");
        let want = markdown();
        if std::env::var_os("BTRFS_LAB_WRITE_FINDINGS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/findings.md is stale: run BTRFS_LAB_WRITE_FINDINGS=1 cargo test --lib model::finding::"
        );
        for e in CATALOG {
            assert!(have.contains(&format!("`{}`", e.name)), "{}", e.name);
        }
    }
}
