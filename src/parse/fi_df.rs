//! The output of `btrfs filesystem df`, captured anywhere: text in any unit
//! form btrfs-progs prints (human IEC or SI, `-b` raw, `-k/-m/-g/-t`), the
//! `WARNING:` lines it adds for multiple profiles, and the JSON of
//! `btrfs --format json filesystem df`. Never panics, whatever the input.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::space::{BgProfile, BgType, SpaceRecord};
use crate::model::units::{rounding_error, unit_bytes};

/// What the input was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// Text lines (`Data, single: total=..., used=...`).
    Text,
    /// `btrfs --format json filesystem df`.
    Json,
}

/// A parsed capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedDf {
    /// Text or JSON.
    pub format: InputFormat,
    /// One record per line or JSON entry, in input order.
    pub records: Vec<SpaceRecord>,
    /// The multiple-profile warnings found in the text (`Data: single, raid0`).
    pub warnings: Vec<String>,
}

/// Where and why the input did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line (text) or entry (JSON) number; 0 for the whole input.
    pub line: usize,
    /// What was wrong and what was expected.
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

const EXPECTED: &str = "expected 'TYPE, PROFILE: total=SIZE, used=SIZE'";

/// Parses a capture of `btrfs filesystem df` (text or JSON).
pub fn parse_fi_df(input: &str) -> Result<ParsedDf, ParseError> {
    let trimmed = input.trim_start();
    if trimmed.starts_with('{') {
        return parse_json(input);
    }
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for (i, raw_line) in input.lines().enumerate() {
        let n = i + 1;
        let line = raw_line.trim_end_matches('\r');
        if line.trim().is_empty() || is_verbose_detail(line) {
            continue;
        }
        if let Some(w) = line.strip_prefix("WARNING:") {
            if let Some(detail) = profile_warning(w) {
                warnings.push(detail);
            }
            continue;
        }
        records.push(parse_line(line).map_err(|message| ParseError { line: n, message })?);
    }
    if records.is_empty() {
        return Err(ParseError {
            line: 0,
            message: format!("no 'btrfs filesystem df' lines found ({EXPECTED})"),
        });
    }
    Ok(ParsedDf {
        format: InputFormat::Text,
        records,
        warnings,
    })
}

/// `btrfs -v filesystem df` adds per-type sysfs details: `Data:` then
/// indented `  bytes_used   1.00MiB` lines. They carry nothing the records
/// lack, so they are skipped.
fn is_verbose_detail(line: &str) -> bool {
    matches!(
        line.trim_end(),
        "Data:" | "Metadata:" | "Mixed:" | "System:"
    ) || (line.starts_with("  ")
        && line.split_whitespace().next().is_some_and(|w| {
            w.chars().all(|c| c.is_ascii_lowercase() || c == '_') && w.contains('_')
        }))
}

/// `WARNING:    Data: single, raid0` → `Data: single, raid0`; the heading
/// warning (`Multiple block group profiles detected`) gives `None`.
fn profile_warning(text: &str) -> Option<String> {
    let t = text.trim();
    let (kind, rest) = t.split_once(':')?;
    BgType::from_progs_name(kind.trim())?;
    Some(format!("{}: {}", kind.trim(), rest.trim()))
}

fn parse_line(line: &str) -> Result<SpaceRecord, String> {
    let (head, values) = line
        .split_once(':')
        .ok_or_else(|| format!("{EXPECTED}, found '{}'", shorten(line)))?;
    let (kind, profile) = head
        .split_once(',')
        .ok_or_else(|| format!("{EXPECTED}, found '{}'", shorten(line)))?;
    let bg_type = BgType::from_progs_name(kind.trim())
        .ok_or_else(|| format!("unknown block group type '{}'", shorten(kind.trim())))?;
    let profile = BgProfile::from_progs_name(profile.trim())
        .ok_or_else(|| format!("unknown profile '{}'", shorten(profile.trim())))?;
    let mut total = None;
    let mut used = None;
    let mut zone = None;
    for field in values.split(',') {
        let (key, value) = field
            .trim()
            .split_once('=')
            .ok_or_else(|| format!("expected 'name=SIZE', found '{}'", shorten(field.trim())))?;
        let parsed = parse_size(value.trim())?;
        let slot = match key.trim() {
            "total" => &mut total,
            "used" => &mut used,
            "zone_unusable" => &mut zone,
            other => {
                return Err(format!(
                    "unknown field '{}' (expected total, used, zone_unusable)",
                    shorten(other)
                ));
            }
        };
        if slot.replace(parsed).is_some() {
            return Err(format!("field '{}' given twice", key.trim()));
        }
    }
    let (total, used) = match (total, used) {
        (Some(t), Some(u)) => (t, u),
        (None, _) => return Err("'total=' is missing".to_owned()),
        (_, None) => return Err("'used=' is missing (truncated line?)".to_owned()),
    };
    Ok(SpaceRecord {
        bg_type,
        profile,
        total_bytes: total.0,
        used_bytes: used.0,
        zone_unusable_bytes: zone.map(|z| z.0),
        exact: total.1 == 0 && used.1 == 0 && zone.is_none_or(|z| z.1 == 0),
        total_error_bytes: total.1,
        used_error_bytes: used.1,
        zone_unusable_error_bytes: zone.map(|z| z.1),
    })
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// A size as btrfs-progs prints it: raw bytes (`104857600`, exact) or a
/// number with two decimals and a unit (`307.12MiB`, rounded). Returns the
/// bytes and the largest possible error.
fn parse_size(text: &str) -> Result<(u64, u64), String> {
    if text.is_empty() {
        return Err("a size is missing (truncated line?)".to_owned());
    }
    if let Some((first, _)) = text.split_once(char::is_whitespace) {
        return Err(format!(
            "expected ', ' after '{}' (missing comma?)",
            shorten(first)
        ));
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(|v| (v, 0))
            .map_err(|_| format!("'{}' does not fit in 64 bits", shorten(text)));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let unit = unit_bytes(suffix).ok_or_else(|| {
        format!(
            "unknown unit in '{}' (expected B, KiB, MiB, GiB, TiB, PiB, EiB, kB, MB, GB, TB, PB or EB)",
            shorten(text)
        )
    })?;
    let valid = !number.is_empty()
        && number.chars().filter(|&c| c == '.').count() <= 1
        && !number.starts_with('.')
        && !number.ends_with('.');
    if !valid {
        return Err(format!("'{}' is not a size", shorten(text)));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{}' is not a size", shorten(text)))?;
    let bytes = value * unit as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("'{}' does not fit in 64 bits", shorten(text)));
    }
    // A value in bytes ("123.00B") is an integer printed with decimals: exact.
    let error = rounding_error(value, unit);
    Ok((bytes.round() as u64, error))
}

fn parse_json(input: &str) -> Result<ParsedDf, ParseError> {
    let whole = |message: String| ParseError { line: 0, message };
    let v: Value = serde_json::from_str(input).map_err(|e| ParseError {
        line: e.line(),
        message: format!("invalid JSON: {e}"),
    })?;
    if let Some(records) = v.get("records").and_then(Value::as_array) {
        return parse_own_json(records);
    }
    let entries = v
        .get("filesystem-df")
        .and_then(Value::as_array)
        .ok_or_else(|| whole("JSON without a 'filesystem-df' array (expected `btrfs --format json filesystem df`)".into()))?;
    let mut records = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = |message: String| ParseError {
            line: 0,
            message: format!("entry {}: {message}", i + 1),
        };
        let text = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| at(format!("'{k}' is missing or not a string")))
        };
        let number = |k: &str| -> Result<Option<u64>, ParseError> {
            match e.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| at(format!("'{k}' is not a byte count"))),
                Some(Value::String(s)) => s
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| at(format!("'{k}' is not a byte count: '{}'", shorten(s)))),
                Some(_) => Err(at(format!("'{k}' is not a byte count"))),
            }
        };
        let bg_type = BgType::from_progs_name(text("bg-type")?).ok_or_else(|| {
            at(format!(
                "unknown block group type '{}'",
                shorten(text("bg-type").unwrap_or(""))
            ))
        })?;
        let profile = BgProfile::from_progs_name(text("bg-profile")?).ok_or_else(|| {
            at(format!(
                "unknown profile '{}'",
                shorten(text("bg-profile").unwrap_or(""))
            ))
        })?;
        let total = number("total")?.ok_or_else(|| at("'total' is missing".into()))?;
        let used = number("used")?.ok_or_else(|| at("'used' is missing".into()))?;
        let zone = number("zone_unusable")?;
        records.push(SpaceRecord::exact(bg_type, profile, total, used, zone));
    }
    Ok(ParsedDf {
        format: InputFormat::Json,
        records,
        warnings: Vec::new(),
    })
}

/// btrfs-lab's own `df --json` records, so its output can be fed back.
fn parse_own_json(records: &[Value]) -> Result<ParsedDf, ParseError> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let at = |message: String| ParseError {
            line: 0,
            message: format!("record {}: {message}", i + 1),
        };
        let text = |k: &str| {
            r.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| at(format!("'{k}' is missing or not a string")))
        };
        let number = |k: &str| r.get(k).and_then(Value::as_u64);
        let bg_type =
            BgType::from_json_name(text("type")?).ok_or_else(|| at("unknown 'type'".into()))?;
        let profile = BgProfile::from_progs_name(text("profile")?)
            .ok_or_else(|| at("unknown 'profile'".into()))?;
        let total = number("total_bytes").ok_or_else(|| at("'total_bytes' is missing".into()))?;
        let used = number("used_bytes").ok_or_else(|| at("'used_bytes' is missing".into()))?;
        let mut rec =
            SpaceRecord::exact(bg_type, profile, total, used, number("zone_unusable_bytes"));
        if r.get("exact").and_then(Value::as_bool) == Some(false) {
            rec.exact = false;
            rec.total_error_bytes = number("total_error_bytes").unwrap_or(0);
            rec.used_error_bytes = number("used_error_bytes").unwrap_or(0);
            rec.zone_unusable_error_bytes = number("zone_unusable_error_bytes");
        }
        out.push(rec);
    }
    Ok(ParsedDf {
        format: InputFormat::Json,
        records: out,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::Profile;
    use proptest::prelude::*;

    // `btrfs filesystem df` (btrfs-progs 6.2) of a 3-device RAID0/RAID1
    // sandbox, in the forms it prints.
    const HUMAN: &str = "\
Data, RAID0: total=307.12MiB, used=100.00MiB
System, RAID1: total=8.00MiB, used=16.00KiB
Metadata, RAID1: total=256.00MiB, used=240.00KiB
GlobalReserve, single: total=5.50MiB, used=0.00B
";
    const RAW: &str = "\
Data, RAID0: total=322043904, used=104857600
System, RAID1: total=8388608, used=16384
Metadata, RAID1: total=268435456, used=245760
GlobalReserve, single: total=5767168, used=0
";
    const SI: &str = "\
Data, RAID0: total=322.04MB, used=104.86MB
System, RAID1: total=8.39MB, used=16.38kB
Metadata, RAID1: total=268.43MB, used=245.76kB
GlobalReserve, single: total=5.77MB, used=0.00B
";
    const KIB: &str = "\
Data, RAID0: total=314496.00KiB, used=102400.00KiB
System, RAID1: total=8192.00KiB, used=16.00KiB
Metadata, RAID1: total=262144.00KiB, used=240.00KiB
GlobalReserve, single: total=5632.00KiB, used=0.00KiB
";
    const JSON_62: &str = r#"{
  "__header": { "version": "1" },
  "filesystem-df": [
    { "bg-type": "Data", "bg-profile": "RAID0", "total": "322043904", "used": "104857600" },
    { "bg-type": "System", "bg-profile": "RAID1", "total": "8388608", "used": "16384" },
    { "bg-type": "Metadata", "bg-profile": "RAID1", "total": "268435456", "used": "245760" },
    { "bg-type": "GlobalReserve", "bg-profile": "single", "total": "5767168", "used": "0" }
  ]
}"#;

    #[test]
    fn raw_and_json_are_exact_and_equal() {
        let raw = parse_fi_df(RAW).unwrap();
        let json = parse_fi_df(JSON_62).unwrap();
        assert_eq!(raw.format, InputFormat::Text);
        assert_eq!(json.format, InputFormat::Json);
        assert_eq!(raw.records, json.records);
        assert!(raw.records.iter().all(|r| r.exact));
        assert_eq!(raw.records[0].bg_type, BgType::Data);
        assert_eq!(raw.records[0].profile, BgProfile::Known(Profile::Raid0));
        assert_eq!(raw.records[0].total_bytes, 322_043_904);
    }

    #[test]
    fn human_forms_agree_within_their_rounding() {
        let exact = parse_fi_df(RAW).unwrap().records;
        for text in [HUMAN, SI, KIB] {
            let parsed = parse_fi_df(text).unwrap().records;
            assert_eq!(parsed.len(), exact.len());
            for (p, e) in parsed.iter().zip(&exact) {
                assert_eq!((p.bg_type, p.profile), (e.bg_type, e.profile));
                assert!(
                    p.total_bytes.abs_diff(e.total_bytes) <= p.total_error_bytes,
                    "{text}: {p:?}"
                );
                assert!(
                    p.used_bytes.abs_diff(e.used_bytes) <= p.used_error_bytes,
                    "{text}: {p:?}"
                );
            }
        }
        let human = parse_fi_df(HUMAN).unwrap().records;
        assert!(!human[0].exact);
        assert_eq!(human[3].used_error_bytes, 0, "0.00B is exact");
    }

    #[test]
    fn conversions_zoned_mixed_and_warnings() {
        let text = "\
Data, single: total=1.00GiB, used=512.00MiB
Data, RAID0: total=2.00GiB, used=1.00GiB, zone_unusable=16.00MiB
Data+Metadata, DUP: total=8388608, used=0
unknown, UNKNOWN: total=0, used=0
WARNING: Multiple block group profiles detected, see 'man btrfs(5)'
WARNING:    Data: single, raid0
";
        let p = parse_fi_df(text).unwrap();
        assert_eq!(p.records.len(), 4);
        assert_eq!(p.records[1].zone_unusable_bytes, Some(16 << 20));
        assert_eq!(p.records[2].bg_type, BgType::DataMetadata);
        assert_eq!(p.records[3].profile, BgProfile::Unknown);
        assert_eq!(p.warnings, vec!["Data: single, raid0"]);
    }

    #[test]
    fn newer_json_with_numbers_and_zone_unusable() {
        let j = r#"{"__header":{"version":"1"},"filesystem-df":[{"bg-type":"Data","bg-profile":"single","total":8388608,"used":0,"zone_unusable":4096}]}"#;
        let p = parse_fi_df(j).unwrap();
        assert_eq!(p.records[0].zone_unusable_bytes, Some(4096));
    }

    #[test]
    fn reads_its_own_json_back() {
        let p = parse_fi_df(RAW).unwrap();
        let json = serde_json::json!({ "records": p.records }).to_string();
        assert_eq!(parse_fi_df(&json).unwrap().records, p.records);
        let h = parse_fi_df(HUMAN).unwrap();
        let json = serde_json::json!({ "records": h.records }).to_string();
        assert_eq!(parse_fi_df(&json).unwrap().records, h.records);
    }

    #[test]
    fn skips_verbose_details() {
        let text = "Data, single: total=8388608, used=0\nData:\n  bytes_used                        0.00B\n";
        assert_eq!(parse_fi_df(text).unwrap().records.len(), 1);
    }

    #[test]
    fn errors_name_the_line_and_what_was_expected() {
        let cases = [
            ("garbage\n", "line 1: expected 'TYPE, PROFILE"),
            (
                "Data, single: total=1.00GiB\n",
                "line 1: 'used=' is missing",
            ),
            (
                "Data, single: total=1.00GiB, used=\n",
                "line 1: a size is missing",
            ),
            (
                "Data, single: total=1.00XiB, used=0\n",
                "line 1: unknown unit in '1.00XiB'",
            ),
            (
                "Data, raid7: total=1, used=0\n",
                "line 1: unknown profile 'raid7'",
            ),
            (
                "Dat, single: total=1, used=0\n",
                "line 1: unknown block group type 'Dat'",
            ),
            (
                "Data, single: total=99999999999999999999999, used=0\n",
                "does not fit in 64 bits",
            ),
            (
                "Data, single: total=99999999999.00EiB, used=0\n",
                "does not fit in 64 bits",
            ),
            (
                "Data, single: total=1, used=0\nData, DUP: total=1 used=0\n",
                "line 2: expected ', ' after '1' (missing comma?)",
            ),
            ("", "no 'btrfs filesystem df' lines found"),
            ("{\"x\": 1}", "without a 'filesystem-df' array"),
            (
                "{\"filesystem-df\": [{\"bg-type\": \"Data\"}]}",
                "entry 1: 'bg-profile' is missing",
            ),
            ("{\"filesystem-df\": [", "invalid JSON"),
        ];
        for (input, want) in cases {
            let e = parse_fi_df(input).unwrap_err().to_string();
            assert!(e.contains(want), "{input:?}: got '{e}', want '{want}'");
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(s in "\\PC{0,200}") {
            let _ = parse_fi_df(&s);
        }

        #[test]
        fn never_panics_on_near_miss_lines(
            t in "(Data|System|Metadata|Data\\+Metadata|GlobalReserve|unknown|X)",
            p in "(single|DUP|RAID0|RAID1C3|UNKNOWN|raid9)",
            total in "[0-9.]{0,25}(B|KiB|MiB|GiB|EiB|kB|MB|XB|)",
            used in "[0-9.]{0,25}(B|KiB|MiB|GiB|EiB|kB|MB|XB|)",
            sep in "(, |,|: | )",
        ) {
            let line = format!("{t}{sep}{p}: total={total}, used={used}\n");
            if let Ok(parsed) = parse_fi_df(&line) {
                prop_assert_eq!(parsed.records.len(), 1);
            }
        }

        #[test]
        fn raw_lines_round_trip(total: u64, used: u64) {
            let line = format!("Metadata, RAID1C3: total={total}, used={used}\n");
            let r = &parse_fi_df(&line).unwrap().records[0];
            prop_assert_eq!((r.total_bytes, r.used_bytes, r.exact), (total, used, true));
        }

        #[test]
        fn human_lines_round_trip_within_the_error(size in 0u64..(1u64 << 62)) {
            use crate::model::units::{pretty_size, UnitBase, UnitMode};
            for mode in [UnitMode::Human(UnitBase::Binary), UnitMode::Human(UnitBase::Decimal),
                         UnitMode::Fixed(UnitBase::Binary, 2), UnitMode::Fixed(UnitBase::Decimal, 3)] {
                let line = format!("Data, single: total={}, used=0.00B\n", pretty_size(size, mode));
                let r = &parse_fi_df(&line).unwrap().records[0];
                prop_assert!(r.total_bytes.abs_diff(size) <= r.total_error_bytes, "{} -> {:?}", line, r);
            }
        }

        #[test]
        fn never_panics_on_arbitrary_json(s in "\\{\"filesystem-df\": \\[\\{\"bg-type\": \"(Data|X)\", \"bg-profile\": \"(single|x)\", \"total\": (\"[0-9a-z-]{0,22}\"|[0-9.e-]{0,22}|null), \"used\": (\"[0-9]{0,22}\"|[0-9-]{0,22})\\}\\]\\}") {
            let _ = parse_fi_df(&s);
        }
    }
}
