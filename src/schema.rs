//! Every JSON document the tool prints, its Rust type and its JSON Schema
//! (docs/json.md, docs/schema/). The schemas are generated from the report
//! types with `schemars` and committed; the test `schemas_are_current`
//! fails when the committed files differ from what the types generate, and
//! `BTRFS_LAB_WRITE_SCHEMAS=1 cargo test --lib schema::` writes them anew.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::report::envelope::{Document, Envelope, Enveloped, SCHEMA_VERSION};

/// One kind of document: its name, what prints it, its Rust type, its
/// schema.
#[derive(Debug, Clone, Copy)]
pub struct DocumentKind {
    /// `df`, `convert-record`, ...: `btrfs_lab.document` and the schema's
    /// file name.
    pub name: &'static str,
    /// The command that prints it.
    pub printed_by: &'static str,
    /// `true` for a JSON Lines record (one per line), `false` for a whole
    /// document.
    pub json_lines: bool,
    /// The Rust type (for the docs).
    pub rust_type: &'static str,
    /// Its schema, envelope included.
    pub schema: fn() -> Value,
}

macro_rules! documents {
    ($( $name:literal, $lines:literal, $ty:ty, $by:literal; )*) => {
        $(
            impl Document for $ty {
                const NAME: &'static str = $name;
            }
        )*
        /// Every document, in the order of docs/json.md.
        pub(crate) const DOCUMENTS: &[DocumentKind] = &[
            $(
                DocumentKind {
                    name: $name,
                    printed_by: $by,
                    json_lines: $lines,
                    rust_type: stringify!($ty),
                    schema: || document_schema::<$ty>($by),
                },
            )*
        ];
    };
}

documents! {
    "df", false, crate::space::DfReport, "df --json, df --parse --json";
    "usage", false, crate::space::usage::UsageDocument, "usage --json";
    "usage-parse", false, crate::space::ParsedUsageDocument, "usage --parse --json";
    "show", false, crate::space::show::ShowReport, "show --json";
    "capacity", false, crate::space::capacity::CapacityReport, "capacity --json";
    "doctor", false, crate::doctor::DoctorReport, "doctor --json";
    "explain", false, crate::explain::ExplainReport, "explain --json";
    "links", false, crate::links::LinksReport, "links --json";
    "probe-dio", false, crate::probe::report::ProbeReport, "probe-dio --json";
    "apps", false, crate::apps::AppsReport, "apps --json";
    "probe-dio-pid", false, crate::probe::pid::PidReport, "probe-dio --pid PID --json";
    "read-test", false, crate::readtest::ReadTestReport, "read-test --json";
    "read-test-pid", false, crate::readtest::watch::report::WatchReport, "read-test --pid PID --json";
    "nocow", false, crate::nocow::NocowReport, "nocow --json (plan and result)";
    "nocow-check", false, crate::nocow::CheckDocument, "nocow --check --json";
    "nocow-advice", false, crate::nocow::advice::Advice, "nocow --for SERVICE --json";
    "sandbox-up", false, crate::sandbox::report::UpReport, "sandbox up --json";
    "sandbox-up-dry-run", false, crate::sandbox::report::UpDryRun, "sandbox up --dry-run --json";
    "sandbox-down", false, crate::sandbox::report::DownResult, "sandbox down --json";
    "sandbox-down-dry-run", false, crate::sandbox::report::DownDryRun, "sandbox down --dry-run --json";
    "sandbox-list", false, crate::sandbox::report::ListReport, "sandbox list --json";
    "demo", false, crate::demo::DemoReport, "demo --json";
    "bench", false, crate::bench::report::BenchReport, "bench --json";
    "bench-compare", false, crate::bench::compare::Comparison, "bench --compare RUN RUN... --json";
    "bench-history", false, crate::bench::history::HistoryReport, "bench --history [DIR] --json";
    "bench-sustained", false, crate::bench::sustained::SustainedReport, "bench --sustained --json";
    "bench-metadata", false, crate::bench::metadata::MetadataReport, "bench --small-files --json";
    "bench-plan", false, crate::bench::plan::BenchPlan, "bench DIR --dry-run --json (also --sustained, --small-files)";
    "bench-profiles-plan", false, crate::bench::profiles::ProfilesPlan, "bench --small-files --compare-profiles LIST --dry-run --json";
    "bench-profiles", false, crate::bench::profiles::ProfilesReport, "bench --small-files --compare-profiles LIST --json";
    "convert-record", true, crate::device::add::record::AddConvertRecord, "convert --json, device add --then-convert --json (JSON Lines)";
    "convert-status", false, crate::convert::report::StatusReport, "convert --status --json";
    "convert-pause", false, crate::convert::report::PauseReport, "convert --pause --json, balance --pause --json";
    "convert-cancel", false, crate::convert::report::CancelReport, "convert --cancel --json, balance --cancel --json";
    "reclaim-record", true, crate::reclaim::ReclaimRecord, "reclaim --json (JSON Lines: the plan, each step, progress, the result; with --dry-run the plan only)";
    "balance-record", true, crate::balance::report::BalanceRecord, "balance --json, device add --then-balance --json (JSON Lines: the plan, progress, notices, the result; with --dry-run the plan only)";
    "balance-status", false, crate::balance::report::StatusReport, "balance --status --json";
    "scrub-record", true, crate::scrub::ScrubRecord, "scrub --json, scrub --all --json (JSON Lines)";
    "scrub-status", false, crate::scrub::ScrubStatus, "scrub --status --json";
    "scrub-cancel", false, crate::scrub::ScrubCancel, "scrub --cancel --json";
    "device-add", false, crate::device::add::AddReport, "device add --json";
    "device-replace", false, crate::device::replace::ReplaceReport, "device replace --json";
    "device-replace-status", false, crate::device::replace::ReplaceStatusReport, "device replace MOUNT --status --json";
    "device-remove", false, crate::device::remove::RemoveReport, "device remove --json";
    "device-add-nothing", false, crate::device::add::NothingToAdd, "device add --json (every device already a member)";
    "rescue", false, crate::rescue::report::RescueReport, "rescue MOUNT --json";
    "rescue-file", true, crate::rescue::report::FileRecord, "rescue MOUNT --list --json (JSON Lines: one per file, then the rescue report)";
    "progress", true, crate::report::progress::ProgressRecord, "device replace --json, device remove --json, rescue --copy-to --json (JSON Lines: progress at most once a second, then the report)";
    "error", true, crate::error::ErrorEvent, "the last JSON Lines record of a stream that failed after it started";
}

/// The settings every schema is generated with: JSON Schema 2020-12,
/// describing what the tool *writes* (a field is required unless it is
/// skipped when empty; an `Option` is present as `null`).
fn generator() -> schemars::SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
}

/// The schema of document `T` in its envelope: `btrfs_lab.document` is
/// pinned to its name and `btrfs_lab.schema` to [`SCHEMA_VERSION`].
fn document_schema<T: Document + 'static>(printed_by: &str) -> Value {
    let mut v = generator()
        .into_root_schema_for::<Enveloped<'static, T>>()
        .to_value();
    // The envelope is the Envelope type, with this document's constants.
    let mut pinned = envelope_schema_value();
    let props = pinned["properties"]
        .as_object_mut()
        .expect("the envelope has properties");
    props["document"]["const"] = json!(T::NAME);
    props["schema"]["const"] = json!(SCHEMA_VERSION);
    for key in ["$schema", "title", "$id"] {
        pinned.as_object_mut().map(|o| o.remove(key));
    }
    v.as_object_mut()
        .expect("a schema is an object")
        .entry("$defs")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("$defs is an object")
        .insert("Envelope".to_owned(), pinned);
    let description = if printed_by.starts_with("the ") {
        format!("The document of {printed_by}.")
    } else {
        format!("What `btrfs-lab {printed_by}` prints.")
    };
    with_header(
        v,
        T::NAME,
        &format!("btrfs-lab {} document", T::NAME),
        &description,
    )
}

/// `schema` with `$schema`, `$id`, `title` and `description` first, the
/// rest in the generated order.
fn with_header(schema: Value, name: &str, title: &str, description: &str) -> Value {
    let Value::Object(mut rest) = schema else {
        unreachable!("a schema is an object")
    };
    let mut o = serde_json::Map::new();
    o.insert(
        "$schema".to_owned(),
        rest.remove("$schema")
            .unwrap_or_else(|| json!("https://json-schema.org/draft/2020-12/schema")),
    );
    o.insert(
        "$id".to_owned(),
        json!(format!(
            "https://btrfs-lab.invalid/schema/{name}.schema.json"
        )),
    );
    o.insert("title".to_owned(), json!(title));
    o.insert("description".to_owned(), json!(description));
    for key in ["$id", "title", "description"] {
        rest.remove(key);
    }
    o.extend(rest);
    Value::Object(o)
}

fn envelope_schema_value() -> Value {
    generator().into_root_schema_for::<Envelope>().to_value()
}

/// The schema of the envelope alone (`docs/schema/envelope.schema.json`).
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn envelope_schema() -> Value {
    with_header(
        envelope_schema_value(),
        "envelope",
        "btrfs-lab envelope",
        "The `btrfs_lab` object at the start of every --json document and JSON Lines record.",
    )
}

/// Every published schema: `(file name, schema)`, envelope first.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn all_schemas() -> Vec<(String, Value)> {
    let mut out = vec![("envelope.schema.json".to_owned(), envelope_schema())];
    out.extend(
        DOCUMENTS
            .iter()
            .map(|d| (format!("{}.schema.json", d.name), (d.schema)())),
    );
    out
}

/// Every document kind, in the order of docs/json.md (the binary checks
/// that each is declared by the command that prints it).
pub fn documents() -> &'static [DocumentKind] {
    DOCUMENTS
}

/// The document kind named `name`.
pub fn document(name: &str) -> Option<&'static DocumentKind> {
    DOCUMENTS.iter().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn schema_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/schema")
    }

    fn text(v: &Value) -> String {
        let mut t = serde_json::to_string_pretty(v).unwrap();
        t.push('\n');
        t
    }

    /// The committed schemas are what the types generate, file for file.
    #[test]
    fn schemas_are_current() {
        let dir = schema_dir();
        let want = all_schemas();
        if std::env::var_os("BTRFS_LAB_WRITE_SCHEMAS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.to_string_lossy().ends_with(".schema.json") {
                    std::fs::remove_file(p).unwrap();
                }
            }
            for (name, v) in &want {
                std::fs::write(dir.join(name), text(v)).unwrap();
            }
        }
        let regenerate = "regenerate with: BTRFS_LAB_WRITE_SCHEMAS=1 cargo test --lib schema::";
        let mut committed: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}; {regenerate}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".schema.json"))
            .collect();
        committed.sort();
        let mut names: Vec<String> = want.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        assert_eq!(
            committed, names,
            "docs/schema/ has other files; {regenerate}"
        );
        for (name, v) in &want {
            let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
            assert!(
                on_disk == text(v),
                "docs/schema/{name} differs from what the types generate; {regenerate}"
            );
        }
    }

    /// docs/json.md lists every document with its schema file.
    #[test]
    fn docs_list_every_document() {
        let doc =
            std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/json.md"))
                .unwrap();
        for d in DOCUMENTS {
            let row = format!(
                "| `{}` | {}",
                d.name,
                if d.printed_by.starts_with("the ") {
                    d.printed_by.to_owned()
                } else {
                    format!("`{}", d.printed_by.split(" (").next().unwrap())
                }
            );
            assert!(doc.contains(&row), "docs/json.md has no row {row}");
            // Its Rust type, as the registry names it (a type that moved
            // is renamed here too).
            let line = doc.lines().find(|l| l.starts_with(&row)).unwrap();
            let rust_type = format!(
                "`btrfs_lab::{}` |",
                d.rust_type.replace(' ', "").trim_start_matches("crate::")
            );
            assert!(
                line.trim_end().ends_with(&rust_type),
                "docs/json.md's row of {} does not end with {rust_type}",
                d.name
            );
            let link = format!("(schema/{}.schema.json)", d.name);
            assert!(doc.contains(&link), "docs/json.md does not link {link}");
        }
    }

    #[test]
    fn names_are_unique_and_plain() {
        let mut names: Vec<&str> = DOCUMENTS.iter().map(|d| d.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "two documents share a name");
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        );
        assert!(!names.contains(&"envelope"));
    }

    /// Validates `doc` against the schema of the document it names.
    fn validate(doc: &Value) -> Result<(), String> {
        let name = doc["btrfs_lab"]["document"]
            .as_str()
            .ok_or("no btrfs_lab.document")?;
        let kind = document(name).ok_or(format!("unknown document {name}"))?;
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        let url = format!("https://btrfs-lab.invalid/schema/{name}.schema.json");
        compiler
            .add_resource(&url, (kind.schema)())
            .map_err(|e| e.to_string())?;
        let id = compiler
            .compile(&url, &mut schemas)
            .map_err(|e| e.to_string())?;
        schemas.validate(doc, id).map_err(|e| format!("{e:#}"))
    }

    fn status_doc() -> Value {
        use crate::convert::report::{BalanceKind, StatusReport};
        let r = StatusReport {
            mount_point: "/mnt/data".into(),
            balance: BalanceKind::Running,
            data_target: Some(crate::model::profile::Profile::Raid1),
            metadata_target: None,
            chunks_expected: Some(10),
            chunks_done: Some(3),
            counters_reset: false,
            bytes_remaining: Some(1 << 30),
            data_profiles: vec![crate::model::profile::Profile::Single],
            metadata_profiles: vec![crate::model::profile::Profile::Dup],
            device_errors: Vec::new(),
        };
        serde_json::to_value(Enveloped::new(&r)).unwrap()
    }

    /// A real document passes; the same document with a required field
    /// removed, with a `null` field removed (the rule is `null`, not
    /// absent), with a field of the wrong type, or without its envelope,
    /// fails.
    #[test]
    fn validation_catches_a_missing_field() {
        let doc = status_doc();
        validate(&doc).unwrap();
        for path in [
            "/balance",
            "/metadata_target",
            "/chunks_done",
            "/btrfs_lab/version",
            "/btrfs_lab/time",
            "/btrfs_lab",
        ] {
            let mut bad = doc.clone();
            let (parent, key) = path.rsplit_once('/').unwrap();
            bad.pointer_mut(if parent.is_empty() { "" } else { parent })
                .and_then(Value::as_object_mut)
                .unwrap()
                .remove(key)
                .unwrap();
            let e = if key == "btrfs_lab" {
                // Without the envelope the document does not say what it
                // is: check it against the schema it would have had.
                bad["btrfs_lab"] = json!({"document": "convert-status"});
                validate(&bad).expect_err("an empty envelope passed")
            } else {
                validate(&bad).expect_err(&format!("{path} removed, and it still passed"))
            };
            assert!(e.contains(key), "{path}: {e}");
        }
        let mut wrong = doc.clone();
        wrong["chunks_done"] = json!("3");
        validate(&wrong).expect_err("a string for a number passed");
        let mut wrong = doc.clone();
        wrong["balance"] = json!("sideways");
        validate(&wrong).expect_err("an unknown enum value passed");
        let mut wrong = doc;
        wrong["btrfs_lab"]["document"] = json!("df");
        validate(&wrong).expect_err("a status document named df passed");
    }

    /// Each JSON Lines record validates against the record schema, and a
    /// `result` record without its outcome does not.
    #[test]
    fn convert_records_validate() {
        use crate::convert::report::{ConvertRecord, ResultRecord};
        let records = [
            ConvertRecord::Pausing,
            ConvertRecord::Background { pid: 42 },
            ConvertRecord::Notice {
                message: "following the running balance".to_owned(),
            },
            ConvertRecord::Result(ResultRecord {
                outcome: crate::convert::Outcome::Paused,
                records: None,
                bytes_remaining: Some(4096),
            }),
        ];
        for r in &records {
            let v = serde_json::to_value(Enveloped::new(r)).unwrap();
            validate(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
        let mut v = serde_json::to_value(Enveloped::new(&records[3])).unwrap();
        v.as_object_mut().unwrap().remove("outcome");
        validate(&v).expect_err("a result without its outcome passed");
        let mut v = serde_json::to_value(Enveloped::new(&records[1])).unwrap();
        v["event"] = json!("exploded");
        validate(&v).expect_err("an unknown event passed");
    }

    /// balance's records validate against their schema; a result without
    /// its outcome does not.
    #[test]
    fn balance_records_validate() {
        use crate::balance::report::{BalanceRecord, BalanceResult};
        let records = [
            BalanceRecord::Pausing,
            BalanceRecord::Notice {
                message: "resuming".to_owned(),
            },
            BalanceRecord::Result(BalanceResult {
                outcome: crate::balance::run::Outcome::Completed,
                after: vec![],
                left: vec![],
                bytes_remaining: None,
                bytes_moved: 1 << 30,
                seconds: 2.5,
            }),
        ];
        for r in &records {
            let v = serde_json::to_value(Enveloped::new(r)).unwrap();
            validate(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
        let mut v = serde_json::to_value(Enveloped::new(&records[2])).unwrap();
        v.as_object_mut().unwrap().remove("outcome");
        validate(&v).expect_err("a result without its outcome passed");
    }

    #[test]
    fn envelope_is_flattened_beside_the_fields() {
        let doc = status_doc();
        let o = doc.as_object().unwrap();
        assert_eq!(o.keys().next().unwrap(), "btrfs_lab");
        assert_eq!(doc["balance"], "running");
        let e: Envelope = serde_json::from_value(doc["btrfs_lab"].clone()).unwrap();
        assert_eq!(e.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(e.schema, SCHEMA_VERSION);
        assert_eq!(e.document, "convert-status");
        assert_eq!(e.host, crate::report::envelope::hostname());
        // The report reads back from the enveloped document.
        let back: crate::convert::report::StatusReport = serde_json::from_value(doc).unwrap();
        assert_eq!(back.chunks_done, Some(3));
    }
}
