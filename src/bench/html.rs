//! `--report FILE.html`: one self-contained page (inline CSS, SVG bar
//! charts, no script, nothing loaded from the network) rendered from the
//! report.
//!
//! The suite's page has one chart per direction: every read bar on one
//! scale, every write bar on another, each scale a labelled MB/s axis with
//! round ticks ([`nice_axis`]). A flagged figure is not drawn to scale:
//! a short grey hatched stub, outlined, says why and what fio claimed; in
//! the table its median, range and CPU cost read "flagged" or "—", never
//! the number. The header says when the bench ran, on what (kernel, fio,
//! btrfs-lab) and with what (profile, members, mount options). A print
//! stylesheet keeps the colours and avoids splitting a chart.

use std::fmt::Write as _;

use super::profile::Direction;
use super::report::{BenchReport, Status, TestResult, is_flag, statistic};
use crate::model::finding::Code;
use crate::parse::size::format_iec;
use crate::report::rate::mb_per_s;
use crate::report::units::decimal_gb;

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

/// `v` with `digits` decimals and thin groups of three (`2,062.3`).
pub(crate) fn grouped(v: f64, digits: usize) -> String {
    let s = format!("{:.digits$}", v.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if v < 0.0 && out.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.insert(0, '-');
    }
    out
}

/// A value axis from 0: round ticks every `step`, up to `max` (a multiple
/// of `step`, at or above the largest value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Axis {
    /// Distance between ticks: 1, 2, 2.5 or 5 times a power of ten.
    pub(crate) step: f64,
    /// The axis' end, the last tick.
    pub(crate) max: f64,
}

impl Axis {
    /// The tick values, 0 to `max`.
    pub(crate) fn ticks(&self) -> Vec<f64> {
        let n = (self.max / self.step).round() as usize;
        (0..=n).map(|i| i as f64 * self.step).collect()
    }

    /// Decimals a tick label needs (0 for steps of 1 and more).
    fn digits(&self) -> usize {
        let mut d = 0;
        while d < 6 && (self.step * 10f64.powi(d as i32)).fract().abs() > 1e-6 {
            d += 1;
        }
        d
    }

    /// A tick's label (`2,500`, `0.25`).
    pub(crate) fn label(&self, v: f64) -> String {
        grouped(v, self.digits())
    }
}

/// The axis for values up to `max`: about five round ticks (steps of 1, 2,
/// 2.5 or 5 times a power of ten), the last one at or above `max`.
pub(crate) fn nice_axis(max: f64) -> Axis {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag);
    let mut n = (max / step - 1e-9).ceil().max(1.0);
    if n * step < max {
        n += 1.0;
    }
    Axis {
        step,
        max: n * step,
    }
}

/// The short reason a figure is flagged (its first flag), for the chart's
/// label and the table.
fn flag_reason(r: &TestResult) -> &'static str {
    let code = r
        .checks
        .iter()
        .find(|c| is_flag(c.severity))
        .map(|c| c.code);
    match code {
        Some(Code::BenchDeviceMismatch) => "devices moved less",
        Some(Code::BenchPageCacheRead) => "page-cache read",
        Some(Code::BenchPageCacheWrite) => "buffered write",
        Some(Code::BenchCompression) => "compressed",
        Some(Code::BenchCpuBound) => "CPU-bound",
        Some(Code::BenchAboveCeiling) => "above PCIe ceiling",
        Some(Code::BenchNeverWritten) => "never-written extents",
        Some(Code::BenchThermal) => "drives throttled",
        Some(Code::BenchFioError) => "fio error",
        Some(Code::BenchOtherIo) => "other I/O on the devices",
        _ => "a check failed",
    }
}

const READ_FILL: &str = "#2f7ed8";
const WRITE_FILL: &str = "#e4572e";
const MIX_FILL: &str = "#6a994e";
const FLAGGED_FILL: &str = "#d9d9d9";
/// A flagged figure's bar: this long whatever fio claimed (its claim is not
/// a result, so it is not drawn to scale).
const FLAGGED_STUB: f64 = 24.0;

/// Geometry of a direction chart (pixels).
const CHART_W: f64 = 860.0;
const LABEL_W: f64 = 120.0;
const PLOT_X: f64 = 130.0;
const PLOT_W: f64 = 450.0;
const BAR_H: f64 = 22.0;
const BAR_GAP: f64 = 12.0;
const CHART_TOP: f64 = 30.0;

/// The figures of one direction on one scale: the axis runs to the largest
/// figure that checked out (a flagged figure does not set the scale; one
/// past the axis is cut at its end and says so).
pub(crate) fn direction_axis(rows: &[&TestResult]) -> Axis {
    let ok = rows
        .iter()
        .filter(|r| r.status == Status::Ok)
        .map(|r| r.claimed_bytes_per_sec)
        .fold(0.0, f64::max);
    let max = if ok > 0.0 {
        ok
    } else {
        rows.iter()
            .map(|r| r.claimed_bytes_per_sec)
            .fold(0.0, f64::max)
    };
    nice_axis(mb_per_s(max))
}

/// The SVG bar chart of one direction: a bar per test at its median MB/s,
/// every bar on the same scale, a labelled axis with round ticks. A
/// flagged figure is not drawn at its claimed length: a short grey hatched
/// stub with a dashed outline, labelled "flagged: why; fio claimed N MB/s,
/// not a result".
pub fn direction_chart(direction: Direction, rows: &[&TestResult], runs: u32) -> String {
    let axis = direction_axis(rows);
    let scale = PLOT_W / axis.max;
    let plot_h = rows.len() as f64 * (BAR_H + BAR_GAP);
    let axis_y = CHART_TOP + plot_h;
    let h = axis_y + 42.0;
    let dir = direction.as_str();
    let title = match direction {
        Direction::Read => "Read",
        Direction::Write => "Write",
        Direction::Mix => "Mix (70% reads)",
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-direction="{dir}" data-axis-max="{}" data-px-per-mbps="{scale:.6}" width="{CHART_W}" height="{h}" viewBox="0 0 {CHART_W} {h}" role="img" aria-label="{title}: median MB/s of each test, one scale">"#,
        axis.max
    );
    let _ = write!(
        s,
        r#"<text x="0" y="18" font-size="15" font-weight="bold">{title}</text>"#
    );
    // Grid and ticks first: the bars cover them.
    for v in axis.ticks() {
        let x = PLOT_X + v * scale;
        let _ = write!(
            s,
            r##"<line class="tick" data-mbps="{:.*}" x1="{x:.2}" y1="{CHART_TOP}" x2="{x:.2}" y2="{:.1}" stroke="#dddddd" stroke-width="1"/><text x="{x:.2}" y="{:.1}" font-size="11" text-anchor="middle" fill="#444444">{}</text>"##,
            axis.digits(),
            v,
            axis_y + 5.0,
            axis_y + 18.0,
            axis.label(v)
        );
    }
    let _ = write!(
        s,
        r##"<line class="axis" x1="{PLOT_X}" y1="{axis_y}" x2="{:.2}" y2="{axis_y}" stroke="#666666" stroke-width="1"/><text class="axis-title" x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#444444">MB/s (10⁶ bytes/s), {}</text>"##,
        PLOT_X + PLOT_W,
        PLOT_X + PLOT_W / 2.0,
        axis_y + 34.0,
        statistic(runs)
    );
    for (i, r) in rows.iter().enumerate() {
        let y = CHART_TOP + BAR_GAP / 2.0 + i as f64 * (BAR_H + BAR_GAP);
        let flagged = r.status == Status::Flagged;
        let value = mb_per_s(r.claimed_bytes_per_sec);
        let full = value * scale;
        let clipped = !flagged && full > PLOT_W + 0.005;
        let len = if flagged {
            FLAGGED_STUB
        } else {
            full.min(PLOT_W)
        };
        let fill = match (flagged, direction) {
            (true, _) => FLAGGED_FILL,
            (false, Direction::Read) => READ_FILL,
            (false, Direction::Write) => WRITE_FILL,
            (false, Direction::Mix) => MIX_FILL,
        };
        let ty = y + BAR_H * 0.7;
        let _ = write!(
            s,
            r#"<text x="{LABEL_W}" y="{ty:.1}" font-size="12" text-anchor="end">{}</text>"#,
            esc(&r.name)
        );
        if flagged {
            // The claim is kept as data, not as the bar's length.
            let _ = write!(
                s,
                r##"<rect class="bar" data-test="{}" data-direction="{dir}" data-claimed-mbps="{value:.3}" data-status="flagged" x="{PLOT_X}" y="{y}" width="{len:.2}" height="{BAR_H}" fill="{fill}" stroke="#a00000" stroke-width="1" stroke-dasharray="3 2"/>"##,
                esc(&r.name),
            );
            s.push_str(&hatch(PLOT_X, y, len, BAR_H));
        } else {
            let _ = write!(
                s,
                r#"<rect class="bar" data-test="{}" data-direction="{dir}" data-mbps="{value:.3}" data-status="ok" data-clipped="{clipped}" x="{PLOT_X}" y="{y}" width="{len:.2}" height="{BAR_H}" fill="{fill}"/>"#,
                esc(&r.name),
            );
        }
        let label = if flagged {
            format!(
                "flagged: {}; fio claimed {} MB/s, not a result (not drawn to scale)",
                flag_reason(r),
                grouped(value, 1),
            )
        } else {
            match r.best_bytes_per_sec {
                Some(b) if runs > 1 => {
                    format!(
                        "{} MB/s (best {})",
                        grouped(value, 1),
                        grouped(mb_per_s(b), 1)
                    )
                }
                _ => format!("{} MB/s", grouped(value, 1)),
            }
        };
        // Beside the bar when it fits (about 6.8 px a character at 12 px),
        // else over the bar's end, right-aligned on a white halo.
        let outside = PLOT_X + len + 6.0 + 6.8 * label.chars().count() as f64 <= CHART_W;
        let (x, anchor, halo) = if outside || len < 12.0 {
            (PLOT_X + len + 6.0, "start", "")
        } else {
            (
                PLOT_X + len - 6.0,
                "end",
                r##" stroke="#ffffff" stroke-width="4" stroke-linejoin="round" paint-order="stroke""##,
            )
        };
        let _ = write!(
            s,
            r##"<text class="{}" x="{x:.2}" y="{ty:.1}" font-size="12" text-anchor="{anchor}" fill="{}"{halo}>{}</text>"##,
            if flagged { "flagged" } else { "value" },
            if flagged { "#a00000" } else { "#222222" },
            esc(&label)
        );
    }
    s.push_str("</svg>");
    s
}

/// Diagonal hatching over a flagged bar: 45° lines every 6 px, cut at the
/// rectangle's edges (no pattern, so no `url(...)` reference in the page).
fn hatch(x0: f64, y0: f64, w: f64, h: f64) -> String {
    let mut s = String::new();
    if w <= 0.0 {
        return s;
    }
    s.push_str(r##"<g class="hatch" stroke="#7a7a7a" stroke-width="1">"##);
    let mut c = 6.0;
    while c < w + h {
        // Points (u, v) from the bottom-left corner with u + v = c.
        let u1 = (c - h).max(0.0);
        let u2 = c.min(w);
        let _ = write!(
            s,
            r#"<line x1="{:.2}" y1="{:.2}" x2="{:.2}" y2="{:.2}"/>"#,
            x0 + u1,
            y0 + h - (c - u1),
            x0 + u2,
            y0 + h - (c - u2)
        );
        c += 6.0;
    }
    s.push_str("</g>");
    s
}

/// The report's start as a person reads it (`2026-12-04 21:40:12 UTC`).
fn run_date(r: &BenchReport) -> String {
    r.started_at.as_deref().map_or_else(
        || "not recorded".to_owned(),
        |t| match t.strip_suffix('Z') {
            Some(t) => format!("{} UTC", t.replacen('T', " ", 1)),
            None => t.to_owned(),
        },
    )
}

/// Each option once, in order (a mount and its superblock may both say it).
fn options_once(options: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for o in options {
        if !seen.contains(&o.as_str()) {
            seen.push(o);
        }
    }
    if seen.is_empty() {
        "—".to_owned()
    } else {
        seen.join(",")
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:64em;color:#222}\
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.4em}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#eee}td.l,th.l{text-align:left}.flag,td.flagged{color:#a00000}.note{color:#666}\
pre{background:#f4f4f4;padding:1em;overflow:auto}#setup th{width:9em}\
#results{font-size:.8em}#results td{white-space:nowrap}#results td,#results th{padding:2px 5px}#results th{vertical-align:bottom}svg.chart{display:block;margin:.6em 0}\
@media print{@page{margin:1.5cm}body{margin:0;max-width:none;font-size:9.5pt}\
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}\
svg.chart,table,h2{break-inside:avoid;page-break-inside:avoid}h2{break-after:avoid;page-break-after:avoid}\
svg.chart{max-width:100%;height:auto}pre{white-space:pre-wrap;background:none;border:1px solid #ccc;font-size:8pt}\
td,th{padding:2px 5px}}";

fn head(h: &mut String, title: &str) {
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    // No network, no script: a CSP that forbids both, in the page itself.
    h.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">");
    let _ = writeln!(
        h,
        "<title>{}</title><style>{STYLE}</style></head><body>",
        esc(title)
    );
}

/// The run's header rows: when, on what, with what.
fn setup_rows(
    started: Option<String>,
    system: &super::report::SystemInfo,
    target: &super::report::TargetInfo,
) -> Vec<(&'static str, String)> {
    let devs: Vec<&str> = target.devices.iter().map(|d| d.path.as_str()).collect();
    let mut members = if devs.is_empty() {
        "—".to_owned()
    } else {
        format!(
            "{}: {}",
            crate::report::text::count(devs.len() as u32, "device", "devices"),
            devs.join(", ")
        )
    };
    if !target.devices_missing.is_empty() {
        let _ = write!(
            members,
            " (not in /proc/diskstats: {})",
            target.devices_missing.join(", ")
        );
    }
    let mut rows = Vec::new();
    if let Some(d) = started {
        rows.push(("date", d));
    }
    rows.extend([
        (
            "machine",
            format!("{} ({} CPUs)", system.hostname, system.cpus),
        ),
        ("kernel", system.kernel.clone()),
        (
            "fio",
            format!("{} ({})", system.fio_version, system.fio_path.display()),
        ),
        ("btrfs-lab", env!("CARGO_PKG_VERSION").to_owned()),
        ("directory", target.dir.display().to_string()),
        (
            "filesystem",
            format!(
                "{}, data {}",
                target.fs_type,
                crate::model::profile::profile_list(&target.data_profiles)
            ),
        ),
        ("members", members),
        ("mount options", options_once(&target.mount_options)),
    ]);
    rows
}

fn setup_table(h: &mut String, rows: &[(&str, String)]) {
    h.push_str("<table id=\"setup\">");
    for (k, v) in rows {
        let _ = write!(
            h,
            "<tr data-key=\"{}\"><th class=\"l\">{}</th><td class=\"l\">{}</td></tr>",
            esc(k),
            esc(k),
            esc(v)
        );
    }
    h.push_str("</table>\n");
}

/// The whole page.
pub fn render(r: &BenchReport) -> String {
    let mut h = String::new();
    head(
        &mut h,
        &format!("btrfs-lab bench {}", r.target.dir.display()),
    );
    let _ = writeln!(
        h,
        "<h1>btrfs-lab bench: {}</h1><p id=\"summary\">{}</p>",
        esc(&r.target.dir.display().to_string()),
        esc(&r.summary)
    );
    let mut rows = setup_rows(Some(run_date(r)), &r.system, &r.target);
    rows.push((
        "profile",
        format!(
            "{}: {} × {} s, test file {} ({}){}{}",
            r.parameters.profile,
            crate::report::text::count(r.parameters.runs, "run", "runs"),
            r.parameters.duration_secs,
            format_iec(r.parameters.size_bytes),
            if r.test_file.nocow {
                "NOCOW"
            } else {
                "checksummed"
            },
            r.parameters
                .mix_read_percent
                .map_or(String::new(), |p| format!(", mix {p}/{}", 100 - p)),
            if r.parameters.huge_page_buffers {
                ", sequential buffers in huge pages"
            } else {
                ""
            }
        ),
    ));
    if let Some(c) = &r.buffer_cost {
        rows.push((
            "I/O buffers",
            format!(
                "ordinary 4 KiB pages for the sequential tests: here they reach {:.0}% of huge-page buffers ({} reads, {} in flight, {} pairs measured on the test file)",
                c.ratio * 100.0,
                format_iec(c.request_bytes),
                c.in_flight,
                c.pairs
            ),
        ));
    }
    setup_table(&mut h, &rows);
    let runs = r.parameters.runs;
    let _ = write!(
        h,
        "<h2>Results</h2>\n<p class=\"note\">Bars: {} in MB/s (10<sup>6</sup> bytes/s), every bar of a direction (read, write, mix) on one scale. Best: the fastest run, the best of {} as CrystalDiskMark reports it. A flagged figure is not a result: it is not drawn to scale but as a short grey hatched stub with a dashed outline, labelled with what fio claimed and what the checks found.</p>\n<div id=\"charts\">",
        statistic(runs),
        runs
    );
    for d in [Direction::Read, Direction::Write, Direction::Mix] {
        let rows: Vec<&TestResult> = r.results.iter().filter(|x| x.direction == d).collect();
        if !rows.is_empty() {
            h.push_str(&direction_chart(d, &rows, runs));
            h.push('\n');
        }
    }
    let _ = write!(
        h,
        "</div>\n<table id=\"results\"><tr><th class=\"l\">test</th><th>median MB/s</th><th>best of {runs} MB/s</th><th>median IOPS</th><th>best of {runs} IOPS</th><th>mean latency µs</th><th>p50 µs</th><th>p99 µs</th><th>p99.9 µs</th><th>slowest–fastest MB/s</th><th>CPU s/GiB</th><th class=\"l\">status</th></tr>"
    );
    for x in &r.results {
        result_row(&mut h, x);
    }
    let _ = write!(
        h,
        "</table>\n<p class=\"note\">Median: {}, the result. Best of {runs}: the fastest run, CrystalDiskMark's convention. Latency: fio's completion latency (p50, p99, p99.9 percentiles), {} too. A flagged figure has no median, best, range or CPU cost: the checks below say why.</p>\n",
        statistic(runs),
        statistic(runs),
    );
    h.push_str("<h2>Checks</h2><ul id=\"flags\">");
    for x in &r.results {
        for c in &x.checks {
            let class = if is_flag(c.severity) { "flag" } else { "note" };
            let _ = write!(
                h,
                "<li class=\"{class}\" data-code=\"{}\">{} {}: {}</li>",
                esc(c.code.short_name()),
                esc(&x.name),
                x.direction.as_str(),
                esc(&c.title)
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

/// One figure's row of the results table: a flagged figure has no median,
/// best or range.
fn result_row(h: &mut String, x: &TestResult) {
    let dash = |v: Option<f64>, digits: usize| v.map_or("—".into(), |v| grouped(v, digits));
    let flagged = x.status == Status::Flagged;
    let (median, range, status) = if flagged {
        (
            "<td class=\"median flagged\">flagged</td>".to_owned(),
            "<td class=\"range flagged\">flagged</td>".to_owned(),
            format!(
                "<td class=\"l status flagged\">flagged: {}</td>",
                esc(flag_reason(x))
            ),
        )
    } else {
        (
            format!(
                "<td class=\"median\">{}</td>",
                dash(x.bytes_per_sec.map(mb_per_s), 1)
            ),
            format!(
                "<td class=\"range\">{}–{}</td>",
                grouped(mb_per_s(x.bytes_per_sec_min), 1),
                grouped(mb_per_s(x.bytes_per_sec_max), 1)
            ),
            "<td class=\"l status\">ok</td>".to_owned(),
        )
    };
    let _ = write!(
        h,
        "<tr data-figure=\"{} {}\"><td class=\"l\">{} {}</td>{median}<td class=\"best\">{}</td><td class=\"iops\">{}</td><td class=\"best-iops\">{}</td><td class=\"lat\">{}</td><td class=\"p50\">{}</td><td class=\"p99\">{}</td><td class=\"p999\">{}</td>{range}<td class=\"cpu\">{}</td>{status}</tr>",
        esc(&x.name),
        x.direction.as_str(),
        esc(&x.name),
        x.direction.as_str(),
        dash(x.best_bytes_per_sec.map(mb_per_s), 1),
        dash(x.iops, 0),
        dash(x.best_iops, 0),
        dash(x.lat_mean_us, 1),
        dash(x.clat_p50_us, 1),
        dash(x.clat_p99_us, 1),
        dash(x.clat_p999_us, 1),
        // CPU seconds per GiB fio claimed to move: no cost of a result.
        dash(x.cpu_seconds_per_gib.filter(|_| !flagged), 3),
    );
}

/// The rate a sustained run shows in its table: the series' median, or
/// the run's average when the series is too short for one (never 0 for a
/// run that wrote data).
fn sustained_rate(r: &super::sustained::SustainedReport) -> (&'static str, f64) {
    let median = r.analysis.median_bytes_per_sec;
    if r.analysis.shape == super::cliff::Shape::TooShort || r.series.is_empty() || median <= 0.0 {
        let avg = if r.seconds > 0.0 {
            r.bytes_written as f64 / r.seconds
        } else {
            0.0
        };
        ("average", avg)
    } else {
        ("median", median)
    }
}

/// The SVG line chart of a sustained write's series (MB/s over seconds),
/// with the cliff marked and the two levels drawn dashed.
pub(crate) fn sustained_chart(r: &super::sustained::SustainedReport) -> String {
    let (w, h, left, bottom, top) = (720.0, 300.0, 60.0, 36.0, 20.0);
    let pw = w - left - 20.0;
    let ph = h - top - bottom;
    let tmax = r.series.last().map_or(r.seconds, |p| p.t_secs).max(0.1);
    let peak = r
        .series
        .iter()
        .map(|p| p.bytes_per_sec)
        .fold(sustained_rate(r).1, f64::max);
    let vaxis = nice_axis(mb_per_s(peak));
    let taxis = nice_axis(tmax);
    let x = |t: f64| left + t / taxis.max * pw;
    let y = |v: f64| top + ph - mb_per_s(v) / vaxis.max * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="write rate over time">"#
    );
    for v in vaxis.ticks() {
        let _ = write!(
            s,
            r##"<line class="tick" x1="{left}" y1="{yy:.1}" x2="{r}" y2="{yy:.1}" stroke="#e4e4e4"/><text x="{tx}" y="{ty:.1}" font-size="11" text-anchor="end" fill="#444444">{}</text>"##,
            vaxis.label(v),
            yy = y(v * 1e6),
            r = left + pw,
            tx = left - 4.0,
            ty = y(v * 1e6) + 4.0
        );
    }
    for t in taxis.ticks() {
        let _ = write!(
            s,
            r##"<text x="{tx:.1}" y="{ty}" font-size="11" text-anchor="middle" fill="#444444">{}</text>"##,
            taxis.label(t),
            tx = x(t),
            ty = top + ph + 14.0
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#888888"/><line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#888888"/>"##,
        b = top + ph,
        r = left + pw
    );
    let _ = write!(
        s,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#444444">seconds; MB/s (10⁶ bytes/s)</text>"##,
        left + pw / 2.0,
        h - 6.0
    );
    if r.series.len() >= 2 {
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
    } else {
        let (what, rate) = sustained_rate(r);
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" font-size="13" text-anchor="middle" fill="#444444">{}</text>"##,
            left + pw / 2.0,
            top + ph / 2.0,
            esc(&format!(
                "too short a series to draw: {:.1} s, {what} {} MB/s",
                r.seconds,
                grouped(mb_per_s(rate), 1)
            ))
        );
    }
    let a = &r.analysis;
    if let (Some(at), Some(rb), Some(ra)) = (a.at_secs, a.rate_before, a.rate_after) {
        let _ = write!(
            s,
            r##"<line x1="{x0}" y1="{yb}" x2="{xa}" y2="{yb}" stroke="#2f855a" stroke-dasharray="4 3"/><line x1="{xa}" y1="{ya}" x2="{x1}" y2="{ya}" stroke="#c53030" stroke-dasharray="4 3"/><line x1="{xa}" y1="{top}" x2="{xa}" y2="{b}" stroke="#c53030"/><text x="{tx}" y="{tt}" font-size="12" fill="#c53030">cliff after {}</text>"##,
            decimal_gb(a.bytes_before.unwrap_or(0) as f64),
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
    let mut s = String::new();
    head(
        &mut s,
        &format!("btrfs-lab bench --sustained {}", r.target.dir.display()),
    );
    let _ = writeln!(
        s,
        "<h1>Sustained write: {}</h1>\n<p id=\"summary\">{}</p>",
        esc(&r.target.dir.display().to_string()),
        esc(&r.summary)
    );
    setup_table(&mut s, &setup_rows(None, &r.system, &r.target));
    s.push_str(&sustained_chart(r));
    let (what, rate) = sustained_rate(r);
    let _ = writeln!(
        s,
        "<table id=\"sustained\"><tr><th class=\"l\">written</th><td>{}</td></tr><tr><th class=\"l\">seconds</th><td>{}</td></tr><tr><th class=\"l\">sampled every</th><td>{} ms</td></tr><tr><th class=\"l\">{what} rate</th><td>{} MB/s</td></tr><tr><th class=\"l\">series</th><td>{}</td></tr><tr><th class=\"l\">shape</th><td>{}</td></tr><tr><th class=\"l\">stopped early</th><td>{}</td></tr></table>",
        esc(&format_iec(r.bytes_written)),
        super::sustained::format_secs(r.seconds).trim_end_matches(" s"),
        r.sample_period_msec,
        grouped(mb_per_s(rate), 1),
        esc(&format!(
            "{} of {}{}",
            format_iec(r.series_check.series_bytes),
            format_iec(r.series_check.bytes_written),
            if r.series_check.reconciled {
                ""
            } else {
                " (flagged: no shape is called)"
            }
        )),
        if r.series_check.reconciled {
            r.analysis.shape.describe()
        } else {
            "not called"
        },
        if r.stopped_early { "yes" } else { "no" }
    );
    if !r.members.is_empty() {
        s.push_str("<h2>Members (diskstats)</h2><table><tr><th class=\"l\">device</th><th>written</th><th class=\"l\">shape</th></tr>");
        for m in &r.members {
            let _ = write!(
                s,
                "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
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

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(2062.34, 1), "2,062.3");
        assert_eq!(grouped(1_234_567.0, 0), "1,234,567");
        assert_eq!(grouped(999.96, 1), "1,000.0");
        assert_eq!(grouped(0.25, 2), "0.25");
        assert_eq!(grouped(-1500.0, 0), "-1,500");
    }

    #[test]
    fn axes_end_on_a_round_tick_at_or_above_the_largest_value() {
        for (max, step, end) in [
            (2062.0, 500.0, 2500.0),
            (40.0, 10.0, 40.0),
            (41.0, 10.0, 50.0),
            (7300.0, 2000.0, 8000.0),
            (0.7, 0.2, 0.8),
            (12.0, 2.5, 12.5),
            (100.0, 20.0, 100.0),
            (0.0, 0.2, 1.0),
            (f64::NAN, 0.2, 1.0),
        ] {
            let a = nice_axis(max);
            assert!((a.step - step).abs() < 1e-9, "{max}: {a:?}");
            assert!((a.max - end).abs() < 1e-9, "{max}: {a:?}");
        }
        // Any value: 4 to 10 steps, every tick a round multiple of the step.
        for i in 1..2000 {
            let max = f64::from(i) * 3.7;
            let a = nice_axis(max);
            let t = a.ticks();
            assert!(a.max >= max && (4..=11).contains(&t.len()), "{max}: {a:?}");
            let m = a.step / 10f64.powf(a.step.log10().floor());
            assert!(
                [1.0, 2.0, 2.5, 5.0].iter().any(|x| (x - m).abs() < 1e-9),
                "{a:?}"
            );
        }
        let a = nice_axis(2062.0);
        assert_eq!(a.ticks(), [0.0, 500.0, 1000.0, 1500.0, 2000.0, 2500.0]);
        assert_eq!(a.label(2500.0), "2,500");
        assert_eq!(nice_axis(0.7).label(0.4), "0.4");
        assert_eq!(nice_axis(12.0).label(7.5), "7.5");
    }

    use crate::bench::testdata::figure;

    fn report() -> BenchReport {
        let json = serde_json::json!({
            "report_version": 1, "exit_code": 3, "summary": "s",
            "started_at": "2026-12-04T21:40:12Z",
            "system": {"kernel": "6.18.1", "hostname": "h", "cpus": 2, "fio_version": "fio-3.33", "fio_path": "/usr/bin/fio"},
            "target": {"dir": "/mnt/a", "mount_point": "/mnt/a", "fs_type": "btrfs",
                "uuid": null, "source": "/dev/loop0",
                "mount_options": ["rw", "relatime", "rw", "space_cache=v2"], "data_profiles": ["raid0"],
                "devices": [{"path": "/dev/loop0", "name": "loop0", "major": 7, "minor": 0},
                            {"path": "/dev/loop1", "name": "loop1", "major": 7, "minor": 1}],
                "devices_missing": [], "compression_option": null},
            "parameters": {"profile": "default", "tests": [], "size_bytes": 1, "runs": 3,
                "duration_secs": 5, "interval_secs": 0, "cow": false, "ioengine": "libaio"},
            "test_file": {"path": "/x", "size_bytes": 1, "nocow": true, "fill_seconds": 0.0,
                "fill_device_write_bytes": null, "layout_after_fill": null, "layout_at_end": null,
                "removed": true},
            "results": [], "ceiling": null, "thermal": [], "members_scaling": null,
            "notes": [], "job_file": ""
        });
        let mut r: BenchReport = serde_json::from_value(json).unwrap();
        r.results = vec![
            figure(0, Direction::Read, &[2062.0, 2000.0, 2100.0], false),
            figure(0, Direction::Write, &[900.0, 1000.0, 950.0], false),
            figure(3, Direction::Read, &[40.0, 41.0, 39.0], false),
            // A buffered write far above the real ones: off the scale.
            figure(3, Direction::Write, &[5000.0, 5100.0, 4900.0], true),
        ];
        r
    }

    /// `attr="..."` of each `<rect class="bar"` in `page`.
    fn bars(page: &str) -> Vec<std::collections::HashMap<String, String>> {
        page.match_indices("<rect class=\"bar\"")
            .map(|(i, _)| {
                let tag = &page[i..i + page[i..].find("/>").unwrap()];
                tag.split("\" ")
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once("=\"")?;
                        Some((
                            k.rsplit(' ').next().unwrap().to_owned(),
                            v.trim_end_matches('"').to_owned(),
                        ))
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_measured_cost_of_ordinary_buffers_is_in_the_header() {
        let mut r = report();
        assert!(!render(&r).contains("I/O buffers"));
        r.buffer_cost = Some(crate::bench::buffers::BufferCost {
            base_pages_bytes_per_sec: 1.3e9,
            huge_pages_bytes_per_sec: 2.0e9,
            ratio: 0.65,
            ratio_min: 0.6,
            ratio_max: 0.7,
            pairs: 3,
            pass_bytes: 256 << 20,
            request_bytes: 1 << 20,
            in_flight: 8,
        });
        assert!(
            render(&r).contains("ordinary 4 KiB pages for the sequential tests: here they reach 65% of huge-page buffers"),
            "{}",
            render(&r)
        );
    }

    #[test]
    fn every_bar_of_a_direction_is_on_one_scale() {
        let page = render(&report());
        let b = bars(&page);
        assert_eq!(b.len(), 4);
        let num = |m: &std::collections::HashMap<String, String>, k: &str| -> f64 {
            m[k].parse().unwrap()
        };
        // Reads: 2,062 and 40 MB/s on an axis to 2,500 over 450 px.
        let reads: Vec<_> = b.iter().filter(|m| m["data-direction"] == "read").collect();
        assert_eq!(reads.len(), 2);
        for m in &reads {
            let want = num(m, "data-mbps") * PLOT_W / 2500.0;
            assert!((num(m, "width") - want).abs() < 0.01, "{m:?}");
        }
        assert!((num(reads[0], "width") / num(reads[1], "width") - 2062.0 / 40.0).abs() < 0.01);
        // Writes: the scale is the ok write's (1,000 MB/s → axis 1,000);
        // the flagged 5,000 is not drawn at its claimed length (issue 52):
        // a short outlined stub, the claim in its label and its data.
        let writes: Vec<_> = b
            .iter()
            .filter(|m| m["data-direction"] == "write")
            .collect();
        assert_eq!(num(writes[0], "width"), 950.0 * PLOT_W / 1000.0);
        assert_eq!(writes[1]["data-status"], "flagged");
        assert!(!writes[1].contains_key("data-mbps"), "{:?}", writes[1]);
        assert_eq!(num(writes[1], "data-claimed-mbps"), 5000.0);
        assert_eq!(num(writes[1], "width"), FLAGGED_STUB);
        assert_eq!(writes[1]["fill"], FLAGGED_FILL);
        assert_eq!(writes[1]["stroke-dasharray"], "3 2");
        assert!(
            page.contains(
                "flagged: buffered write; fio claimed 5,000.0 MB/s, not a result (not drawn to scale)"
            ),
            "{page}"
        );
        assert!(page.contains("<g class=\"hatch\""));
        // Every label beside its bar, the flagged one beside its stub.
        assert!(page.contains(&format!(
            r##"<text class="flagged" x="{:.2}" y="85.4" font-size="12" text-anchor="start" fill="#a00000">"##,
            PLOT_X + FLAGGED_STUB + 6.0
        )), "{page}");
        assert_eq!(page.matches(r#"<text class="value""#).count(), 3);
        assert_eq!(
            page.matches(r##"text-anchor="start" fill="#222222">"##)
                .count(),
            3
        );
        // A flagged bar as long as its claim, even cut at the axis' end,
        // would stand for a result: none is.
        for m in &b {
            if m["data-status"] == "flagged" {
                assert!(num(m, "width") <= FLAGGED_STUB, "{m:?}");
            }
        }
        // The axes: round ticks, labelled.
        assert!(page.contains(r#"data-direction="read" data-axis-max="2500""#));
        assert!(page.contains(r#"data-direction="write" data-axis-max="1000""#));
        for t in ["0", "500", "1,000", "1,500", "2,000", "2,500"] {
            assert!(page.contains(&format!(">{t}</text>")), "tick {t}");
        }
        assert_eq!(
            page.matches("MB/s (10⁶ bytes/s), the median of 3 runs")
                .count(),
            2
        );
        // Two runs: their mean, said as such (not "the middle run").
        let mut two = report();
        two.parameters.runs = 2;
        let page2 = render(&two);
        assert!(page2.contains("MB/s (10⁶ bytes/s), the mean of 2 runs"));
        assert!(page2.contains("Median: the mean of 2 runs, the result."));
        assert!(!page2.contains("middle run"));
        // The best of N beside the median.
        assert!(page.contains("2,062.0 MB/s (best 2,100.0)"), "{page}");
    }

    #[test]
    fn a_flagged_figure_shows_no_number_in_the_table() {
        let page = render(&report());
        let row = page
            .split("<tr data-figure=\"RND4K Q1T1 write\">")
            .nth(1)
            .unwrap()
            .split("</tr>")
            .next()
            .unwrap();
        assert!(
            row.contains("<td class=\"median flagged\">flagged</td>"),
            "{row}"
        );
        assert!(
            row.contains("<td class=\"range flagged\">flagged</td>"),
            "{row}"
        );
        assert!(row.contains("flagged: buffered write"), "{row}");
        assert!(!row.contains("5,000") && !row.contains("4,900"), "{row}");
        // No CPU cost of a figure that is not a result (issue 52).
        assert!(row.contains("<td class=\"cpu\">—</td>"), "{row}");
        let ok = page
            .split("<tr data-figure=\"SEQ1M Q8T1 read\">")
            .nth(1)
            .unwrap();
        assert!(ok.contains("<td class=\"median\">2,062.0</td><td class=\"best\">2,100.0</td>"));
        assert!(ok.contains("<td class=\"range\">2,000.0–2,100.0</td>"));
        assert!(ok.contains(
            "<td class=\"p50\">7,001.0</td><td class=\"p99\">9,000.0</td><td class=\"p999\">12,500.0</td>"
        ));
    }

    #[test]
    fn the_header_says_when_on_what_and_with_what() {
        let page = render(&report());
        for want in [
            "<th class=\"l\">date</th><td class=\"l\">2026-12-04 21:40:12 UTC</td>",
            "<th class=\"l\">kernel</th><td class=\"l\">6.18.1</td>",
            "<td class=\"l\">fio-3.33 (/usr/bin/fio)</td>",
            &format!(
                "<th class=\"l\">btrfs-lab</th><td class=\"l\">{}</td>",
                env!("CARGO_PKG_VERSION")
            ),
            "<td class=\"l\">btrfs, data raid0</td>",
            "<td class=\"l\">2 devices: /dev/loop0, /dev/loop1</td>",
            "<th class=\"l\">mount options</th><td class=\"l\">rw,relatime,space_cache=v2</td>",
            "<td class=\"l\">default: 3 runs × 5 s",
        ] {
            assert!(page.contains(want), "missing {want}");
        }
        // Self-contained, no script, a print stylesheet, no Debug names.
        assert!(page.contains("default-src 'none'") && page.contains("@media print"));
        for bad in [
            "<script", " src=", " href=", "url(", "Raid0", "TooShort", "Some(",
        ] {
            assert!(!page.contains(bad), "{bad}");
        }
        let mut old = report();
        old.started_at = None;
        assert!(render(&old).contains("<td class=\"l\">not recorded</td>"));
    }

    #[test]
    fn hatching_stays_inside_the_bar() {
        let s = hatch(10.0, 20.0, 50.0, 22.0);
        for l in s.split("<line ").skip(1) {
            let v: Vec<f64> = l
                .split('"')
                .skip(1)
                .step_by(2)
                .take(4)
                .map(|x| x.parse().unwrap())
                .collect();
            assert!(v[0] >= 10.0 && v[2] <= 60.0 + 1e-9, "{l}");
            assert!(v[1] <= 42.0 + 1e-9 && v[3] >= 20.0 - 1e-9, "{l}");
        }
        assert!(hatch(0.0, 0.0, 0.0, 22.0).is_empty());
    }

    fn sustained(
        series: Vec<crate::bench::cliff::Point>,
    ) -> crate::bench::sustained::SustainedReport {
        use crate::bench::cliff::analyse;
        let b = report();
        crate::bench::sustained::SustainedReport {
            report_version: 1,
            mode: "sustained".into(),
            exit_code: 0,
            summary: "s".into(),
            system: b.system,
            target: b.target,
            size_bytes: 300_000_000,
            time_limit_secs: None,
            bytes_written: 300_000_000,
            seconds: 2.5,
            stopped_early: false,
            sample_period_msec: 100,
            series_check: crate::bench::sustained::check_series(
                300_000_000,
                300_000_000,
                None,
                &[],
            ),
            test_file_removed: true,
            analysis: analyse(&series),
            series,
            members: vec![crate::bench::sustained::MemberSeries {
                device: "loop0".into(),
                write_bytes: 150_000_000,
                series: Vec::new(),
                analysis: analyse(&[]),
            }],
            findings: Vec::new(),
            notes: Vec::new(),
            job_file: String::new(),
        }
    }

    #[test]
    fn a_short_sustained_run_shows_its_average_in_words() {
        let p = |t: f64, mb: f64| crate::bench::cliff::Point {
            t_secs: t,
            bytes_per_sec: mb * 1e6,
        };
        let page = render_sustained(&sustained(vec![p(1.0, 118.0)]));
        assert!(
            page.contains("<th class=\"l\">average rate</th><td>120.0 MB/s</td>"),
            "{page}"
        );
        assert!(page.contains("too short a series to draw: 2.5 s, average 120.0 MB/s"));
        assert!(page.contains("<td>too short a series to tell</td>"));
        assert!(
            page.contains("<td class=\"l\">6.18.1</td>") && page.contains("default-src 'none'")
        );
        for bad in [
            " 0.0 MB/s",
            ">0.0 MB/s",
            "TooShort",
            "Steady",
            "Raid0",
            "<script",
            "NaN",
            "inf",
        ] {
            assert!(!page.contains(bad), "{bad} in {page}");
        }
        // A long series: its median, the line, round ticks.
        let series: Vec<_> = (1..=30)
            .map(|t| p(f64::from(t), 100.0 + f64::from(t % 3)))
            .collect();
        let page = render_sustained(&sustained(series));
        assert!(
            page.contains("<th class=\"l\">median rate</th><td>101.0 MB/s</td>"),
            "{page}"
        );
        assert!(
            page.contains("<polyline") && page.contains(">125</text>"),
            "{page}"
        );
        assert!(!page.contains(" 0.0 MB/s") && !page.contains(">0.0 MB/s"));
    }
}
