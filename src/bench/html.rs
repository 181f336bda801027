//! `--report FILE.html`: one self-contained page (inline CSS, SVG bar
//! charts, no script, nothing loaded from the network) rendered from the
//! report.

use std::fmt::Write as _;

use super::profile::Direction;
use super::report::{BenchReport, Severity, Status, TestResult};
use crate::parse::size::format_iec;

/// Escapes text for HTML and XML (SVG) alike.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn mbps(b: f64) -> f64 {
    b / 1e6
}

/// The SVG chart of one test: a bar per direction, MB/s; a flagged figure
/// is drawn hatched grey with "flagged".
pub fn chart(name: &str, rows: &[&TestResult]) -> String {
    let max = rows
        .iter()
        .map(|r| r.claimed_bytes_per_sec)
        .fold(1.0, f64::max);
    let (w, bar_h, gap, label_w) = (520.0, 26.0, 10.0, 60.0);
    let h = 30.0 + rows.len() as f64 * (bar_h + gap);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-test="{}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{} MB/s">"#,
        esc(name),
        esc(name)
    );
    let _ = write!(
        s,
        r#"<text x="0" y="16" font-size="14" font-weight="bold">{}</text>"#,
        esc(name)
    );
    for (i, r) in rows.iter().enumerate() {
        let y = 26.0 + i as f64 * (bar_h + gap);
        let flagged = r.status == Status::Flagged;
        let value = r.claimed_bytes_per_sec;
        let len = ((w - label_w - 150.0) * value / max).max(1.0);
        let fill = match (flagged, r.direction) {
            (true, _) => "#bbbbbb",
            (false, Direction::Read) => "#2f7ed8",
            (false, Direction::Write) => "#e4572e",
        };
        let _ = write!(
            s,
            r#"<text x="0" y="{:.1}" font-size="12">{}</text>"#,
            y + bar_h * 0.7,
            r.direction.as_str()
        );
        let _ = write!(
            s,
            r#"<rect class="bar" data-direction="{}" data-mbps="{:.3}" data-status="{}" x="{label_w}" y="{y:.1}" width="{len:.1}" height="{bar_h}" fill="{fill}"/>"#,
            r.direction.as_str(),
            mbps(value),
            if flagged { "flagged" } else { "ok" }
        );
        let label = if flagged {
            format!("{:.1} MB/s claimed — flagged", mbps(value))
        } else {
            format!("{:.1} MB/s", mbps(value))
        };
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="12">{}</text>"#,
            label_w + len + 6.0,
            y + bar_h * 0.7,
            esc(&label)
        );
    }
    s.push_str("</svg>");
    s
}

/// The whole page.
pub fn render(r: &BenchReport) -> String {
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    // No network, no script: a CSP that forbids both, in the page itself.
    h.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">");
    let _ = write!(
        h,
        "<title>btrfs-lab bench {}</title>",
        esc(&r.target.dir.display().to_string())
    );
    h.push_str("<style>body{font-family:sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}td.l,th.l{text-align:left}.flag{color:#b00}.note{color:#666}pre{background:#f4f4f4;padding:1em;overflow:auto}</style></head><body>\n");
    let _ = write!(
        h,
        "<h1>btrfs-lab bench</h1><p id=\"summary\">{}</p>",
        esc(&r.summary)
    );
    h.push_str("<h2>Set-up</h2><table id=\"setup\">");
    let profiles: Vec<String> = r
        .target
        .data_profiles
        .iter()
        .map(|p| format!("{p:?}").to_lowercase())
        .collect();
    let devs: Vec<&str> = r.target.devices.iter().map(|d| d.path.as_str()).collect();
    let rows = [
        (
            "machine",
            format!("{} ({} CPUs)", r.system.hostname, r.system.cpus),
        ),
        ("kernel", r.system.kernel.clone()),
        (
            "fio",
            format!("{} ({})", r.system.fio_version, r.system.fio_path.display()),
        ),
        ("directory", r.target.dir.display().to_string()),
        (
            "filesystem",
            format!(
                "{} {} on {}",
                r.target.fs_type,
                profiles.join("+"),
                devs.join(", ")
            ),
        ),
        ("mount options", r.target.mount_options.join(",")),
        (
            "profile",
            format!(
                "{}: {} runs × {} s, test file {} ({})",
                r.parameters.profile,
                r.parameters.runs,
                r.parameters.duration_secs,
                format_iec(r.parameters.size_bytes),
                if r.test_file.nocow {
                    "NOCOW"
                } else {
                    "checksummed"
                }
            ),
        ),
    ];
    for (k, v) in rows {
        let _ = write!(
            h,
            "<tr><th class=\"l\">{}</th><td class=\"l\">{}</td></tr>",
            esc(k),
            esc(&v)
        );
    }
    h.push_str("</table>\n<h2>Results (MB/s = 10<sup>6</sup> bytes/s, median of the runs)</h2>\n<div id=\"charts\">");
    let mut names: Vec<&str> = Vec::new();
    for x in &r.results {
        if !names.contains(&x.name.as_str()) {
            names.push(&x.name);
        }
    }
    for n in &names {
        let rows: Vec<&TestResult> = r.results.iter().filter(|x| x.name == *n).collect();
        h.push_str("<div>");
        h.push_str(&chart(n, &rows));
        h.push_str("</div>\n");
    }
    h.push_str("</div>\n<table id=\"results\"><tr><th class=\"l\">test</th><th>MB/s</th><th>IOPS</th><th>latency µs</th><th>slowest–fastest MB/s</th><th>CPU s/GiB</th><th class=\"l\">status</th></tr>");
    for x in &r.results {
        let status = if x.status == Status::Flagged {
            "flagged"
        } else {
            "ok"
        };
        let _ = write!(
            h,
            "<tr><td class=\"l\">{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}–{:.1}</td><td>{}</td><td class=\"l\">{status}</td></tr>",
            esc(&x.name),
            x.direction.as_str(),
            x.bytes_per_sec
                .map_or("—".into(), |b| format!("{:.1}", mbps(b))),
            x.iops.map_or("—".into(), |b| format!("{b:.0}")),
            x.lat_mean_us.map_or("—".into(), |b| format!("{b:.1}")),
            mbps(x.bytes_per_sec_min),
            mbps(x.bytes_per_sec_max),
            x.cpu_seconds_per_gib
                .map_or("—".into(), |c| format!("{c:.3}")),
        );
    }
    h.push_str("</table>\n<h2>Checks</h2><ul id=\"flags\">");
    for x in &r.results {
        for c in &x.checks {
            let class = if c.severity == Severity::Flag {
                "flag"
            } else {
                "note"
            };
            let _ = write!(
                h,
                "<li class=\"{class}\" data-code=\"{}\">{} {}: {}</li>",
                esc(&serde_json::to_value(c.code)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()),
                esc(&x.name),
                x.direction.as_str(),
                esc(&c.message)
            );
        }
    }
    for n in &r.notes {
        let _ = write!(h, "<li class=\"note\">{}</li>", esc(n));
    }
    h.push_str("</ul>\n");
    if let Some(m) = &r.members_scaling {
        let _ = write!(h, "<h2>Members</h2><p>{}</p>", esc(&m.summary));
    }
    let _ = write!(
        h,
        "<h2>fio jobs</h2><pre id=\"jobs\">{}</pre>",
        esc(&r.job_file)
    );
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
