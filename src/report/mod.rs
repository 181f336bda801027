//! The one output vocabulary every command speaks: the JSON envelope and
//! document names ([`envelope`]), sizes and units ([`units`]), rates and
//! durations ([`rate`]), text (escaping, shell quoting, wrapping:
//! [`text`]), Prometheus metrics ([`metrics`]), progress readings
//! ([`progress`]) and btrfs-progs' proposed JSON shapes ([`progs_json`]).
//! The `Ui` ([`crate::ui`]) says them; the CLI draws them.

pub mod envelope;
pub mod metrics;
pub mod progress;
pub mod progs_json;
pub mod rate;
pub mod text;
pub mod units;
