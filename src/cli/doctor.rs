//! `btrfs-lab doctor [MOUNT...]`: what is wrong with each btrfs, worst first.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use btrfs_lab::doctor::{self, DoctorReport, FsDiagnosis, prometheus};
use btrfs_lab::error::{Error, ErrorKind, Result};
use btrfs_lab::model::finding::Severity;
use btrfs_lab::sys::root::SysRoot;

use super::output::{Output, Paint, wrap};

pub const AFTER_HELP: &str = "\
Read-only unless --deep: no writes, no probes. Findings have stable codes
(docs/json.md lists them).

Exit status (as monitoring plugins):
  0  no finding worse than info
  1  the worst finding is a warning
  2  a critical finding
  3  doctor could not look (not a btrfs, not root, cannot write the
     textfile, ...)
A bad command line is also 2, as for every btrfs-lab command; a monitoring
setup finds that on its first run.";

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Findings for a person, worst first.
    Text,
    /// Prometheus text format (node_exporter's textfile collector).
    Prometheus,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Paths inside mounted btrfs filesystems [default: every mounted btrfs].
    #[arg(value_name = "MOUNT")]
    mounts: Vec<PathBuf>,
    /// Output format (`--json` gives the typed report).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also write the Prometheus metrics to FILE atomically (a temporary file
    /// in its directory, then rename), for node_exporter's textfile collector.
    /// On failure the file says `btrfs_lab_doctor_success 0`.
    #[arg(long, value_name = "FILE")]
    textfile: Option<PathBuf>,
    /// Also run what costs time or writes a little: probe-dio on the
    /// filesystem (two small test files, removed), the PCIe links and NVMe
    /// SMART thermal counters of its drives.
    #[arg(long)]
    deep: bool,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: DoctorArgs, out: &Output) -> Result<u8> {
    if out.json && args.format == Format::Prometheus {
        return Err(
            Error::usage("--json and --format prometheus exclude each other").with_hint(
                "pick one: --json for the typed report, --format prometheus for metrics",
            ),
        );
    }
    let root = SysRoot::from_option(args.sysroot.as_deref());
    let report = match doctor::examine(&root, &args.mounts, args.deep) {
        Ok(r) => r,
        Err(e) => {
            if e.kind() == ErrorKind::Usage {
                return Err(e);
            }
            if let Some(path) = &args.textfile {
                let _ =
                    doctor::write_atomically(path, &prometheus::render_failure(doctor::now_unix()));
            }
            out.error(&e);
            return Ok(doctor::EXIT_UNKNOWN);
        }
    };
    if let Some(path) = &args.textfile
        && let Err(e) = doctor::write_atomically(path, &prometheus::render(&report))
    {
        out.error(&e);
        return Ok(doctor::EXIT_UNKNOWN);
    }
    out.report(&report, |r| match args.format {
        Format::Prometheus => prometheus::render(r),
        Format::Text => render(r, out.paint),
    });
    Ok(report.exit_status)
}

fn label(s: Severity, paint: Paint) -> String {
    let name = format!("{:<8}", s.name().to_ascii_uppercase());
    match s {
        Severity::Critical => paint.bad(&name),
        Severity::Warning => paint.warn(&name),
        Severity::Info => paint.dim(&name),
    }
}

/// The findings of every filesystem, worst first.
pub fn render(r: &DoctorReport, paint: Paint) -> String {
    if r.filesystems.is_empty() {
        return "no mounted btrfs\n".to_owned();
    }
    let mut t = String::new();
    let mut fss: Vec<&FsDiagnosis> = r.filesystems.iter().collect();
    fss.sort_by_key(|f| f.worst.unwrap_or(Severity::Info));
    for (i, f) in fss.iter().enumerate() {
        if i > 0 {
            t.push('\n');
        }
        let count = |s: Severity| f.findings.iter().filter(|x| x.severity == s).count();
        t.push_str(&paint.bold(&format!(
            "{} ({}): {} critical, {} warning, {} info",
            f.mount_point.display(),
            f.uuid,
            count(Severity::Critical),
            count(Severity::Warning),
            count(Severity::Info)
        )));
        t.push('\n');
        if f.findings.is_empty() {
            t.push_str("  nothing to report\n");
        }
        for x in &f.findings {
            t.push_str(&format!(
                "  {} {}: {}\n",
                label(x.severity, paint),
                x.code,
                x.title
            ));
            for e in &x.evidence {
                t.push_str(&format!("           {}: {}\n", e.name, e.value));
            }
            t.push_str(&wrap(&format!("why: {}", x.why), 100, "           "));
            if let Some(c) = &x.command {
                t.push_str(&format!("           run: {c}\n"));
            }
        }
    }
    let worst = r.worst.filter(|w| *w != Severity::Info);
    t.push_str(&format!(
        "\n{}\n",
        match worst {
            Some(w) => format!(
                "worst: {} (exit status {})",
                label(w, paint).trim_end(),
                r.exit_status
            ),
            None => "no warning (exit status 0)".to_owned(),
        }
    ));
    t
}
