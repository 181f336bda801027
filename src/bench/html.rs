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
                "{}: {} × {} s, test file {} ({})",
                r.parameters.profile,
                crate::model::text::count(r.parameters.runs, "run", "runs"),
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
    h.push_str("</div>\n<table id=\"results\"><tr><th class=\"l\">test</th><th>MB/s</th><th>best MB/s</th><th>IOPS</th><th>best IOPS</th><th>latency µs</th><th>clat p50 µs</th><th>clat p99 µs</th><th>clat p99.9 µs</th><th>slowest–fastest MB/s</th><th>CPU s/GiB</th><th class=\"l\">status</th></tr>");
    let dash = |v: Option<f64>, digits: usize| v.map_or("—".into(), |v| format!("{v:.digits$}"));
    for x in &r.results {
        let status = if x.status == Status::Flagged {
            "flagged"
        } else {
            "ok"
        };
        let _ = write!(
            h,
            "<tr data-figure=\"{} {}\"><td class=\"l\">{} {}</td><td>{}</td><td class=\"best\">{}</td><td>{}</td><td class=\"best\">{}</td><td>{}</td><td class=\"p50\">{}</td><td class=\"p99\">{}</td><td class=\"p999\">{}</td><td>{:.1}–{:.1}</td><td>{}</td><td class=\"l\">{status}</td></tr>",
            esc(&x.name),
            x.direction.as_str(),
            esc(&x.name),
            x.direction.as_str(),
            dash(x.bytes_per_sec.map(mbps), 1),
            dash(x.best_bytes_per_sec.map(mbps), 1),
            dash(x.iops, 0),
            dash(x.best_iops, 0),
            dash(x.lat_mean_us, 1),
            dash(x.clat_p50_us, 1),
            dash(x.clat_p99_us, 1),
            dash(x.clat_p999_us, 1),
            mbps(x.bytes_per_sec_min),
            mbps(x.bytes_per_sec_max),
            dash(x.cpu_seconds_per_gib, 3),
        );
    }
    h.push_str("</table>\n<p class=\"note\">MB/s, IOPS and latency: the median of the runs; best: the fastest run, as CrystalDiskMark reports the best of N; clat: fio's completion-latency percentiles (p50, p99, p99.9), the median of the runs.</p>\n");
    h.push_str("<h2>Checks</h2><ul id=\"flags\">");
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

/// The SVG line chart of a sustained write's series (MB/s over seconds),
/// with the cliff marked and the two levels drawn dashed.
pub(crate) fn sustained_chart(r: &super::sustained::SustainedReport) -> String {
    let (w, h, left, bottom, top) = (720.0, 300.0, 60.0, 30.0, 20.0);
    let pw = w - left - 20.0;
    let ph = h - top - bottom;
    let tmax = r.series.last().map_or(r.seconds, |p| p.t_secs).max(0.1);
    let vmax = r.series.iter().map(|p| p.bytes_per_sec).fold(1.0, f64::max) * 1.1;
    let x = |t: f64| left + t / tmax * pw;
    let y = |v: f64| top + ph - v / vmax * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="write rate over time">"#
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/><line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#888"/>"##,
        b = top + ph,
        r = left + pw
    );
    for i in 0..=4 {
        let v = vmax * f64::from(i) / 4.0;
        let _ = write!(
            s,
            r##"<text x="{tx}" y="{ty}" font-size="11" text-anchor="end" fill="#444">{:.0}</text>"##,
            mbps(v),
            tx = left - 4.0,
            ty = y(v) + 4.0
        );
    }
    let _ = write!(
        s,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#444">seconds (0–{tmax:.1}); MB/s</text>"##,
        left + pw / 2.0,
        h - 8.0
    );
    let pts: Vec<String> =
        std::iter::once((0.0, r.series.first().map_or(0.0, |p| p.bytes_per_sec)))
            .chain(r.series.iter().map(|p| (p.t_secs, p.bytes_per_sec)))
            .map(|(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
            .collect();
    let _ = write!(
        s,
        r##"<polyline fill="none" stroke="#2b6cb0" stroke-width="2" points="{}"/>"##,
        pts.join(" ")
    );
    let a = &r.analysis;
    if let (Some(at), Some(rb), Some(ra)) = (a.at_secs, a.rate_before, a.rate_after) {
        let _ = write!(
            s,
            r##"<line x1="{x0}" y1="{yb}" x2="{xa}" y2="{yb}" stroke="#2f855a" stroke-dasharray="4 3"/><line x1="{xa}" y1="{ya}" x2="{x1}" y2="{ya}" stroke="#c53030" stroke-dasharray="4 3"/><line x1="{xa}" y1="{top}" x2="{xa}" y2="{b}" stroke="#c53030"/><text x="{tx}" y="{tt}" font-size="12" fill="#c53030">cliff after {:.2} GB</text>"##,
            a.bytes_before.unwrap_or(0) as f64 / 1e9,
            x0 = x(0.0),
            x1 = x(tmax),
            xa = x(at),
            yb = y(rb),
            ya = y(ra),
            b = top + ph,
            tx = x(at) + 4.0,
            tt = top + 12.0
        );
    }
    s.push_str("</svg>");
    s
}

/// The HTML page of `bench --sustained --report`.
pub fn render_sustained(r: &super::sustained::SustainedReport) -> String {
    let mut s = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>btrfs-lab bench --sustained</title>\n<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}td,th{padding:2px 8px;text-align:left}</style></head><body>\n",
    );
    let _ = writeln!(
        s,
        "<h1>Sustained write: {}</h1>\n<p>{}</p>",
        esc(&r.target.dir.display().to_string()),
        esc(&r.summary)
    );
    s.push_str(&sustained_chart(r));
    let _ = writeln!(
        s,
        "<table><tr><th>written</th><td>{}</td></tr><tr><th>seconds</th><td>{}</td></tr><tr><th>sampled every</th><td>{} ms</td></tr><tr><th>{}</th><td>{:.1} MB/s</td></tr><tr><th>stopped early</th><td>{}</td></tr></table>",
        esc(&format_iec(r.bytes_written)),
        super::sustained::format_secs(r.seconds).trim_end_matches(" s"),
        r.sample_period_msec,
        // A series too short for a median: the run's average, never 0.0.
        if r.analysis.shape == super::cliff::Shape::TooShort {
            "average"
        } else {
            "median"
        },
        if r.analysis.shape == super::cliff::Shape::TooShort {
            mbps(if r.seconds > 0.0 {
                r.bytes_written as f64 / r.seconds
            } else {
                0.0
            })
        } else {
            mbps(r.analysis.median_bytes_per_sec)
        },
        if r.stopped_early { "yes" } else { "no" }
    );
    if !r.members.is_empty() {
        s.push_str("<h2>Members (diskstats)</h2><table><tr><th>device</th><th>written</th><th>shape</th></tr>");
        for m in &r.members {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.device),
                esc(&format_iec(m.write_bytes)),
                m.analysis.shape.describe()
            );
        }
        s.push_str("</table>\n");
    }
    let _ = writeln!(
        s,
        "<h2>fio job</h2><pre>{}</pre></body></html>",
        esc(&r.job_file)
    );
    s
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
