//! The real corpus of `btrfs filesystem df` and `usage` pastes
//! (tests/fixtures/fi-df, fi-usage; provenance in their PROVENANCE.md) and
//! the labelled generated cases (tests/fixtures/generated): every file
//! parses, no row is invented or lost silently, values match figures
//! computed by hand, and the findings of real pastes are the expected ones.
//! No root needed: the parsers and the interpretation are pure.

use std::fs;
use std::path::{Path, PathBuf};

use btrfs_lab::model::finding::Severity;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::model::space::{BgProfile, BgType};
use btrfs_lab::parse::fi_df::{
    InputFormat, ParseOptions, ParsedDf, UnitBasis, parse_fi_df, parse_fi_df_with,
};
use btrfs_lab::space::findings::{Interpretation, SpaceFacts, interpret};

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn files(name: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir(name))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n != "PROVENANCE.md" && n != "README.md"
        })
        .collect();
    v.sort();
    v
}

fn df(file: &str) -> ParsedDf {
    let text = fs::read_to_string(dir("fi-df").join(file)).unwrap();
    parse_fi_df(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn interpretation(p: &ParsedDf) -> Interpretation {
    interpret(&SpaceFacts {
        records: &p.records,
        ambiguous_units: p.units.basis == UnitBasis::Ambiguous,
        ..Default::default()
    })
}

/// Every `total=` of the input is either a record or named as damaged:
/// nothing invented, nothing dropped silently.
fn accounts_for_every_row(name: &str, text: &str, p: &ParsedDf) {
    if p.format == InputFormat::Json {
        return;
    }
    let rows = text.replace("=3D", "=").matches("total=").count();
    let damaged = p
        .skipped
        .iter()
        .filter(|s| s.damaged && s.text.contains("total="))
        .count();
    assert_eq!(
        p.records.len() + damaged,
        rows,
        "{name}: {} records + {damaged} damaged for {rows} rows: {:?}",
        p.records.len(),
        p.skipped
    );
}

#[test]
fn every_real_df_paste_parses_and_has_provenance() {
    let provenance = fs::read_to_string(dir("fi-df").join("PROVENANCE.md")).unwrap();
    let all = files("fi-df");
    assert!(all.len() >= 30, "{} files", all.len());
    let mut by_units = std::collections::BTreeMap::new();
    for path in &all {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            provenance.contains(&format!("| {name} |")),
            "{name} has no provenance row"
        );
        let text = fs::read_to_string(path).unwrap();
        let p = parse_fi_df(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!p.records.is_empty(), "{name}");
        accounts_for_every_row(name, &text, &p);
        *by_units.entry(format!("{:?}", p.units.basis)).or_insert(0) += 1;
        for r in &p.records {
            assert!(
                r.exact == (r.total_error_bytes == 0 && r.used_error_bytes == 0),
                "{name}: {r:?}"
            );
        }
    }
    eprintln!(
        "fi-df corpus: {} files parsed; by units: {by_units:?}",
        all.len()
    );
}

/// Values computed by hand (value × 1024^n, never 10^n, for old binary
/// units), for fourteen real pastes.
#[test]
fn real_df_pastes_match_hand_computed_values() {
    type Row<'a> = (&'a str, usize, UnitBasis, usize, BgType, &'a str, u64, u64);
    // (file, records, units, index, type, profile, total, used); u64::MAX = unchecked.
    const X: u64 = u64::MAX;
    let table: [Row; 14] = [
        (
            "libstorage-ng-v6.1-single-dup.json",
            4,
            UnitBasis::Bytes,
            2,
            BgType::Metadata,
            "dup",
            268_435_456,
            196_608,
        ),
        (
            "libstorage-ng-v6.1-raid10-to-raid5.json",
            7,
            UnitBasis::Bytes,
            0,
            BgType::Data,
            "raid10",
            4_294_967_296,
            4_197_752_832,
        ),
        (
            "libstorage-ng-v6.0-raid10-to-raid5.txt",
            6,
            UnitBasis::Iec,
            1,
            BgType::Data,
            "raid5",
            3 << 30,
            534_469_673,
        ),
        (
            "forum-v0.20-rc1-kubuntu-prompt.txt",
            5,
            UnitBasis::LegacyBinary,
            0,
            BgType::Data,
            "single",
            36_517_959_434,
            X,
        ),
        (
            "linux-btrfs-2020-07-quoted-prompt.txt",
            4,
            UnitBasis::Iec,
            0,
            BgType::Data,
            "raid1",
            234_075_717_632,
            X,
        ),
        (
            "blog-2015-raid5-reserve-used.txt",
            4,
            UnitBasis::Iec,
            3,
            BgType::GlobalReserve,
            "single",
            512 << 20,
            3_711_959,
        ),
        (
            "btrfs-progs-657-metadata-full.txt",
            2,
            UnitBasis::Iec,
            0,
            BgType::Metadata,
            "raid1",
            1 << 30,
            1_060_917_740,
        ),
        (
            "linux-btrfs-2021-quoted-printable.txt",
            4,
            UnitBasis::Iec,
            0,
            BgType::Data,
            "single",
            5_519_548_371_436,
            X,
        ),
        (
            "archwiki-old-profileless.txt",
            3,
            UnitBasis::LegacyBinary,
            2,
            BgType::Metadata,
            "single",
            X,
            190_662_574,
        ),
        (
            "nagios-plugin-comment-hash.txt",
            4,
            UnitBasis::LegacyBinary,
            0,
            BgType::Data,
            "raid1",
            239_143_779_041,
            X,
        ),
        (
            "blog-docker-indented.txt",
            6,
            UnitBasis::Iec,
            5,
            BgType::Unknown,
            "single",
            50_331_648,
            0,
        ),
        (
            "openfreemap-metadata-89.txt",
            4,
            UnitBasis::Iec,
            2,
            BgType::Metadata,
            "single",
            102_016_210_698,
            X,
        ),
        (
            "forum-v0.19-ubuntu-fences.txt",
            5,
            UnitBasis::LegacyBinary,
            3,
            BgType::Metadata,
            "dup",
            X,
            482_774_876,
        ),
        (
            "wiki-v3.14-unknown-single.txt",
            4,
            UnitBasis::Iec,
            2,
            BgType::Metadata,
            "single",
            X,
            1_052_308_931,
        ),
    ];
    for (file, n, basis, i, t, profile, total, used) in table {
        let p = df(file);
        assert_eq!(p.records.len(), n, "{file}: {:?}", p.records);
        assert_eq!(p.units.basis, basis, "{file}: {}", p.units.rule);
        let r = &p.records[i];
        assert_eq!(r.bg_type, t, "{file}");
        assert_eq!(
            r.profile,
            BgProfile::from_progs_name(profile).unwrap(),
            "{file}"
        );
        if total != X {
            assert_eq!(r.total_bytes, total, "{file}: total");
        }
        if used != X {
            assert_eq!(r.used_bytes, used, "{file}: used");
        }
    }
}

#[test]
fn old_binary_gb_is_never_read_as_decimal() {
    // 0.20-rc1: "Data: total=12.87GB" is 12.87 × 2^30 (± the rounding),
    // more than 12.87 × 10^9 + 5%.
    let p = df("forum-2014-v0.20-rc1.txt");
    let d = &p.records[0];
    assert_eq!(d.total_bytes, 13_819_057_275);
    assert!(
        d.total_bytes - d.total_error_bytes > 13_500_000_000,
        "{d:?}"
    );
    assert!(p.units.rule.contains("powers of 1024"), "{}", p.units.rule);
    // 0.00 with no unit is an exact zero.
    assert_eq!(
        (p.records[2].used_bytes, p.records[2].used_error_bytes),
        (0, 0)
    );
}

#[test]
fn damaged_real_paste_is_named_not_guessed() {
    let p = df("blog-raid0-split-row.txt");
    assert_eq!(
        p.records
            .iter()
            .map(|r| (r.bg_type, r.profile))
            .collect::<Vec<_>>(),
        [
            (BgType::Data, BgProfile::Known(Profile::Raid0)),
            (BgType::System, BgProfile::Known(Profile::Single)),
            (BgType::Metadata, BgProfile::Known(Profile::Raid1)),
        ],
        "no System RAID1 row made up from the split"
    );
    let damaged: Vec<usize> = p
        .skipped
        .iter()
        .filter(|s| s.damaged)
        .map(|s| s.line)
        .collect();
    assert_eq!(damaged, [2, 3]);
    // Strict refuses it at its first line (the command).
    let text = fs::read_to_string(dir("fi-df").join("blog-raid0-split-row.txt")).unwrap();
    assert_eq!(
        parse_fi_df_with(&text, ParseOptions { strict: true })
            .unwrap_err()
            .line,
        1
    );
}

#[test]
fn strict_takes_exact_output_only() {
    let strict = ParseOptions { strict: true };
    for exact in [
        "libstorage-ng-v6.0-single-dup.txt",
        "libstorage-ng-v6.0-mixed-bg.txt",
        "libstorage-ng-v6.0-raid10-to-raid5.txt",
        "libstorage-ng-v6.1-single-dup.json",
        "superuser-raid1-data-overallocated.txt",
    ] {
        let text = fs::read_to_string(dir("fi-df").join(exact)).unwrap();
        let s = parse_fi_df_with(&text, strict).unwrap_or_else(|e| panic!("{exact}: {e}"));
        assert_eq!(s.records, df(exact).records, "{exact}");
    }
    for wrapped in [
        "linux-btrfs-2020-07-quoted-prompt.txt",
        "blog-docker-indented.txt",
        "nagios-plugin-comment-hash.txt",
    ] {
        let text = fs::read_to_string(dir("fi-df").join(wrapped)).unwrap();
        assert!(parse_fi_df_with(&text, strict).is_err(), "{wrapped}");
    }
}

/// The findings of real pastes (the closing note).
#[test]
fn findings_of_real_pastes() {
    let codes = |file: &str| -> Vec<(String, Severity)> {
        interpretation(&df(file))
            .findings
            .into_iter()
            .map(|f| (f.code.to_string(), f.severity))
            .collect()
    };
    let s = |c: &str, sev| (c.to_owned(), sev);
    // Metadata 98.8% full and the reserve larger than what is left.
    assert_eq!(
        codes("btrfs-progs-657-metadata-full.txt"),
        [s("metadata-nearly-full", Severity::Warning)]
    );
    // RAID5 with 3.54MiB of the global reserve in use and metadata at
    // 55%: info (the catalog's rule, as doctor's; it was a warning).
    assert_eq!(
        codes("blog-2015-raid5-reserve-used.txt"),
        [
            s("global-reserve-used", Severity::Info),
            s("ask-for-usage", Severity::Info)
        ]
    );
    // A conversion raid10 → raid5 under way.
    let conv = interpretation(&df("libstorage-ng-v6.0-raid10-to-raid5.txt"));
    assert_eq!(conv.findings[0].code, "unfinished-conversion");
    assert!(
        conv.findings[0]
            .command
            .as_deref()
            .unwrap()
            .starts_with("btrfs-lab convert MOUNT --data "),
        "{:?}",
        conv.findings[0]
    );
    // RAID5 + RAID1C3 metadata 99.0% full and 656KiB of the reserve in use
    // (btrfs-progs v5.7): a warning with metadata tight (the catalog's
    // rule, as doctor's; it was critical), unallocated space not known.
    assert_eq!(
        codes("linux-btrfs-v5.7-raid5-reserve-used.txt"),
        [
            s("metadata-nearly-full", Severity::Warning),
            s("global-reserve-used", Severity::Warning)
        ]
    );
    // Ragged quote depth, metadata 60.00GiB of 60.00GiB.
    let ragged = df("linux-btrfs-raid6-metadata-100-ragged-quotes.txt");
    assert_eq!(ragged.records[2].total_bytes, 60 << 30);
    assert_eq!(
        ragged.records[2].profile,
        BgProfile::Known(Profile::Raid1c3)
    );
    assert_eq!(
        codes("linux-btrfs-raid6-metadata-100-ragged-quotes.txt"),
        [s("metadata-nearly-full", Severity::Warning)]
    );
    // A single → RAID6 conversion with btrfs-progs' WARNING lines.
    let conv6 = df("linux-btrfs-single-to-raid6-warnings.txt");
    assert_eq!(conv6.warnings, ["Data: single, raid6"]);
    let c = interpretation(&conv6);
    assert_eq!(c.findings[0].code, "unfinished-conversion");
    assert_eq!(
        c.findings[0].command.as_deref(),
        Some("btrfs-lab convert MOUNT --data raid6 --metadata raid1c3")
    );
    // Old mkfs leftovers are not a conversion.
    assert_eq!(
        codes("forum-v0.20-rc1-kubuntu-prompt.txt"),
        [s("empty-leftover-chunks", Severity::Info)]
    );
    // Metadata 89.4%: below the threshold, nothing to say but data full.
    assert_eq!(
        codes("openfreemap-metadata-89.txt"),
        [s("ask-for-usage", Severity::Info)]
    );
}

#[test]
fn generated_cases_parse_as_labelled() {
    let readme = fs::read_to_string(dir("generated").join("README.md")).unwrap();
    assert!(readme.contains("NOT real"));
    let parse = |f: &str| {
        let text = fs::read_to_string(dir("generated").join(f)).unwrap();
        let p = parse_fi_df(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
        accounts_for_every_row(f, &text, &p);
        p
    };
    let raw = parse("df-raw-raid1c3-crlf.txt");
    assert!(raw.records.iter().all(|r| r.exact));
    assert_eq!(raw.records[0].profile, BgProfile::Known(Profile::Raid1c3));
    assert_eq!(raw.records[3].used_bytes, 65_536);
    let si = parse("df-si-zoned.txt");
    assert_eq!(si.units.basis, UnitBasis::Si);
    assert_eq!(si.records[0].zone_unusable_bytes, Some(16_780_000));
    let deep = parse("df-deep-quote-collapsed.txt");
    assert_eq!(deep.records.len(), 4);
    assert_eq!(deep.records[1].bg_type, BgType::System);
    let deep_i = interpretation(&deep);
    let codes: Vec<&str> = deep_i.findings.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["metadata-nearly-full", "global-reserve-used"]);
    let lost = parse("df-lost-letter.txt");
    assert_eq!(lost.records.len(), 2);
    assert!(
        lost.skipped[0]
            .reason
            .contains("lost first letter of 'Data'")
    );
    let json = parse("df-json-numbers.json");
    assert_eq!(json.records[0].total_bytes, 6_442_450_944);
}

fn usage(file: &str) -> btrfs_lab::space::ParsedUsageDocument {
    let text = fs::read_to_string(dir("fi-usage").join(file)).unwrap();
    btrfs_lab::space::usage_from_text(&text, file).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn every_real_usage_paste_parses_and_has_provenance() {
    let provenance = fs::read_to_string(dir("fi-usage").join("PROVENANCE.md")).unwrap();
    let all = files("fi-usage");
    assert!(all.len() >= 4);
    for path in &all {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(provenance.contains(&format!("| {name} |")), "{name}");
        let u = usage(name);
        assert!(u.report.overall.is_some(), "{name}");
        assert!(!u.report.block_groups.is_empty(), "{name}");
        // Read back as the library's type.
        let json = serde_json::to_string(&u).unwrap();
        let back: btrfs_lab::space::ParsedUsageDocument = serde_json::from_str(&json).unwrap();
        // (floats may differ in the last digit through JSON)
        assert_eq!(
            back.report.block_groups.len(),
            u.report.block_groups.len(),
            "{name}"
        );
        assert_eq!(
            back.report.overall.as_ref().map(|o| o.device_size),
            u.report.overall.as_ref().map(|o| o.device_size)
        );
        assert_eq!(back.skipped, u.skipped, "{name}");
        assert_eq!(
            back.interpretation.findings.len(),
            u.interpretation.findings.len(),
            "{name}"
        );
    }
}

#[test]
fn real_usage_pastes_match_hand_computed_values() {
    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;
    // bees #292: 512.00GiB, unallocated 1.00MiB, reserve used 96.00KiB,
    // metadata DUP 5.99GiB (6431713526 by hand: 5.99 × 2^30).
    let b = usage("bees-292-metadata-full.txt");
    let o = b.report.overall.as_ref().unwrap();
    assert_eq!(o.device_size, 512 * G);
    assert_eq!(o.device_unallocated, M as i64);
    assert_eq!(o.global_reserve_used, 96 << 10);
    assert_eq!(o.metadata_ratio, 2.0);
    let meta = &b.report.block_groups[1];
    assert_eq!(
        (meta.bg_type, meta.profile),
        (BgType::Metadata, BgProfile::Known(Profile::Dup))
    );
    assert_eq!(meta.size_bytes, 6_431_713_526);
    assert_eq!(meta.used_percent, 91.64);
    // The cut Unallocated value is named, not made up.
    assert!(
        b.skipped.iter().any(|s| s.damaged && s.line == 26),
        "{:?}",
        b.skipped
    );
    assert!(b.report.unallocated.as_ref().unwrap().is_empty());
    // -T table, quoted: two devices, RAID1, 76.97GiB unallocated each.
    let t = usage("linux-btrfs-2020-07-quoted-table.txt");
    assert_eq!(t.report.block_groups.len(), 3);
    let d = &t.report.block_groups[0];
    assert_eq!(d.size_bytes, 218 * G);
    assert_eq!(d.devices.as_ref().unwrap().len(), 2);
    let un = t.report.unallocated.as_ref().unwrap();
    assert_eq!(un.len(), 2);
    assert_eq!(un[0].bytes, 82_645_908_193); // 76.97 × 2^30
    assert!(t.missing_fields.contains(&"Device slack".to_owned()));
    // -T with Total/Slack columns, spacing collapsed, no `Overall:` line,
    // cut in the Used row: System is named, not made up.
    let c = usage("btrfs-linux-1599-collapsed-table.txt");
    assert_eq!(c.report.overall.as_ref().unwrap().device_slack, 3584);
    assert_eq!(c.report.block_groups.len(), 2);
    assert_eq!(c.report.block_groups[1].size_bytes, 25 * G);
    assert_eq!(c.report.block_groups[1].used_bytes, 26_392_574_034); // 24.58 × 2^30
    assert_eq!(
        c.report.unallocated.as_ref().unwrap()[0].bytes,
        1_407_374_883_553
    ); // 1.28 × 2^40
    assert!(
        c.skipped
            .iter()
            .any(|s| s.damaged && s.line == 20 && s.text == "System,DUP"),
        "{:?}",
        c.skipped
    );
    // Tab separated (openfreemap): metadata 95.01GiB, 89.43%.
    let f = usage("openfreemap-tabs.txt");
    assert_eq!(f.report.block_groups[1].size_bytes, 102_016_210_698);
    assert_eq!(f.report.unallocated.as_ref().unwrap()[0].path, "/dev/loop3");
}

#[test]
fn findings_of_real_usage_pastes() {
    // bees #292: ENOSPC near (one device, 1.00MiB unallocated, DUP needs
    // 512MiB) and the reserve in use.
    let b = usage("bees-292-metadata-full.txt");
    let codes: Vec<(&str, Severity)> = b
        .interpretation
        .findings
        .iter()
        .map(|f| (f.code.as_str(), f.severity))
        .collect();
    assert_eq!(
        codes,
        [
            ("metadata-chunk-no-room", Severity::Critical),
            // A little of the reserve with metadata tight: a warning (the
            // catalog's rule; the metadata finding carries the critical).
            ("global-reserve-used", Severity::Warning)
        ]
    );
    assert_eq!(
        b.interpretation.findings[0].command.as_deref(),
        Some("btrfs-lab reclaim MOUNT --max-usage 90"),
        "data chunks 83% used on average (a paste has no per-chunk usage): \
         some are below 90%; 2GiB for a 1GiB DUP chunk takes two 1GiB data \
         chunks, and one more"
    );
    // btrfs-progs #467: a 512MiB reserve larger than all free metadata.
    // With 119MiB of data slack, less than a full DUP chunk: no balance
    // makes the room, a device does.
    let r = usage("btrfs-progs-467-reserve-512m.txt");
    let m = &r.interpretation.findings[0];
    assert_eq!(
        (m.code.as_str(), m.severity),
        ("metadata-chunk-no-room", Severity::Critical)
    );
    assert!(
        m.evidence
            .iter()
            .any(|e| e.name == "with the global reserve"
                && e.value == "512.14MiB of 482.00MiB metadata can grow to (106.3%)"),
        "{m:?}"
    );
    assert_eq!(
        m.command.as_deref(),
        Some("btrfs-lab device add MOUNT NEW_DEVICE")
    );
    // Two devices with 77GiB unallocated each: nothing wrong.
    assert!(
        usage("linux-btrfs-2020-07-quoted-table.txt")
            .interpretation
            .findings
            .is_empty()
    );
}

/// The CLI on real pastes: `--json` read back as the library's types,
/// skipped lines named on stderr, `--strict` refusing with nothing on stdout,
/// stdin for `usage --parse -`.
#[test]
fn cli_reads_real_pastes_and_says_what_it_skipped() {
    use crate::common::{TestEnv, run, typed};
    use std::io::Write;
    use std::process::Stdio;
    let env = TestEnv::new();
    let quoted = dir("fi-df").join("linux-btrfs-2020-07-quoted-prompt.txt");
    let (code, out, err) = run(env.cmd().args(["df", "--parse", "--json"]).arg(&quoted));
    assert_eq!(code, 0, "{err}");
    let r: btrfs_lab::space::DfReport = typed(&out);
    assert_eq!(r.records.len(), 4);
    assert_eq!(r.records[0].total_bytes, 234_075_717_632);
    let lines: Vec<usize> = r.skipped.iter().map(|s| s.line).collect();
    assert_eq!(lines, [1, 7], "{:?}", r.skipped);
    assert!(r.unwrapped.iter().any(|u| u.contains("quote")));
    let (code, out, err) = run(env.cmd().args(["df", "--parse"]).arg(&quoted));
    assert_eq!(code, 0);
    assert!(
        out.starts_with("Data, RAID1: total=218.00GiB, used=171.98GiB\n"),
        "{out}"
    );
    assert!(out.contains("Findings: none"), "{out}");
    assert!(
        err.contains(
            "btrfs-lab: note: line 1 skipped: the command line ('merkaba:~> btrfs fi df /home')"
        ),
        "{err}"
    );
    let (code, out, err) = run(env
        .cmd()
        .args(["df", "--parse", "--strict", "--json"])
        .arg(&quoted));
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(err.contains("line 1: expected 'TYPE, PROFILE"), "{err}");

    let text = fs::read(dir("fi-usage").join("bees-292-metadata-full.txt")).unwrap();
    let mut child = env
        .cmd()
        .args(["usage", "--parse", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let u: btrfs_lab::space::ParsedUsageDocument = typed(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(u.interpretation.findings[0].severity, Severity::Critical);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("critical: no room for a full dup metadata chunk"),
        "{err}"
    );
}
