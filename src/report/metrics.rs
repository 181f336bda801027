//! Prometheus metrics in the text format node_exporter's textfile collector
//! reads: one family per metric, HELP and TYPE first, base units (bytes,
//! seconds) in the names, counters ending in `_total`. The one builder of
//! every `--textfile` and `--format prometheus` (doctor, scrub).

use std::collections::BTreeMap;
use std::fmt::Write;

/// One metric family being built.
pub(crate) struct Family {
    help: &'static str,
    kind: &'static str,
    samples: Vec<String>,
}

/// Families in the order they were first added.
#[derive(Default)]
pub(crate) struct Metrics {
    order: Vec<&'static str>,
    families: BTreeMap<&'static str, Family>,
}

impl Metrics {
    /// Adds a sample of `name` (its HELP and TYPE from the first sample).
    pub(crate) fn add(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let fam = self.families.entry(name).or_insert_with(|| {
            self.order.push(name);
            Family {
                help,
                kind,
                samples: Vec::new(),
            }
        });
        let mut s = name.to_owned();
        if !labels.is_empty() {
            s.push('{');
            let parts: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            s.push_str(&parts.join(","));
            s.push('}');
        }
        let _ = write!(s, " {value}");
        fam.samples.push(s);
    }

    /// The text: each family's HELP and TYPE, then its samples.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let f = &self.families[name];
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.kind);
            for s in &f.samples {
                out.push_str(s);
                out.push('\n');
            }
        }
        out
    }
}

/// A label value as the text format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
