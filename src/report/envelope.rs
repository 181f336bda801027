//! The JSON envelope (docs/json.md): every `--json` document and every JSON
//! Lines record carries a `btrfs_lab` object saying which tool wrote it,
//! which document it is, under which schema version, on which host and
//! when. The report's own fields sit beside it, flattened, so a consumer
//! that reads `records` or `verdict` keeps working.
//!
//! ```json
//! {
//!   "btrfs_lab": {"version": "0.1.0", "schema": 1, "document": "df",
//!                 "host": "db1", "time": "2026-12-01T01:37:11.123Z"},
//!   "mount_point": "/mnt/data", ...
//! }
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The schema version of every document. Adding a field is not a breaking
/// change and keeps it; removing or renaming a field, changing its type or
/// meaning, or making a field absent that was always present bumps it (and
/// the published schemas in docs/schema/ change with it).
pub const SCHEMA_VERSION: u32 = 1;

/// A document or JSON Lines record the tool prints: its name (the schema
/// file is `docs/schema/<NAME>.schema.json`). Implemented for every report
/// type in [`crate::schema`], which also lists them.
pub trait Document: Serialize + schemars::JsonSchema {
    /// The document's name: `df`, `convert-record`, ...
    const NAME: &'static str;
}

/// The `btrfs_lab` object of a document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Envelope {
    /// The tool's version, as `btrfs-lab --version` prints it.
    pub version: String,
    /// The schema version: bumped only on a breaking change (docs/json.md).
    pub schema: u32,
    /// Which document this is: its schema is
    /// docs/schema/DOCUMENT.schema.json.
    pub document: String,
    /// The host's name (uname's nodename).
    pub host: String,
    /// When the document was written: RFC 3339, UTC, milliseconds.
    #[schemars(regex(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
    ))]
    pub time: String,
}

impl Envelope {
    /// The envelope of document `document`, written now on this host.
    pub fn now(document: &str) -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            schema: SCHEMA_VERSION,
            document: document.to_owned(),
            host: hostname(),
            time: rfc3339(SystemTime::now()),
        }
    }
}

/// A report with its envelope: what `--json` prints.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Enveloped<'a, T: ?Sized> {
    /// Who wrote the document, what it is, where and when.
    pub btrfs_lab: Envelope,
    /// The report's own fields.
    #[serde(flatten)]
    pub report: &'a T,
}

impl<'a, T: Document> Enveloped<'a, T> {
    /// `report` in its envelope, stamped now.
    pub fn new(report: &'a T) -> Self {
        Self {
            btrfs_lab: Envelope::now(T::NAME),
            report,
        }
    }
}

/// uname's nodename: the host an envelope names.
pub use crate::sys::hostname;

/// `t` as RFC 3339 in UTC with milliseconds: `2026-12-01T01:37:11.123Z`.
/// A time before 1970 (a clock set wrong) prints as the epoch.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = rfc3339_seconds(d.as_secs());
    let whole = seconds.strip_suffix('Z').unwrap_or(&seconds);
    format!("{whole}.{:03}Z", d.subsec_millis())
}

/// `secs` since the epoch as RFC 3339 in UTC, whole seconds:
/// `2026-11-30T23:41:07Z` (doctor's `timestamp`).
pub(crate) fn rfc3339_seconds(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month, day of `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for the proleptic Gregorian calendar).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, millis: u64) -> String {
        rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // date -u -d @951782400: the leap day of a year divisible by 400.
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        // date -u -d @1796089031
        assert_eq!(at(1_796_089_031, 999), "2026-12-01T01:37:11.999Z");
        // The last second of a year.
        assert_eq!(at(1_735_689_599, 0), "2024-12-31T23:59:59.000Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
    }

    #[test]
    fn whole_seconds() {
        assert_eq!(rfc3339_seconds(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_seconds(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_seconds(1_764_546_067), "2025-11-30T23:41:07Z");
    }

    #[test]
    fn hostname_is_unames() {
        let h = hostname();
        assert!(!h.is_empty());
        assert_eq!(
            h,
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap()
                .trim_end()
        );
    }
}
