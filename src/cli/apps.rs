//! `btrfs-lab apps [MOUNT]`: arguments and rendering only (the job is
//! `btrfs_lab::apps`).

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::apps::{self, App, AppsReport};
use btrfs_lab::error::Result;
use btrfs_lab::report::text::{escape_control as esc, escape_path, fill, width};
use btrfs_lab::sys::fs::root::SysRoot;

use super::output::{Output, Paint};

#[derive(Debug, Args)]
#[command(
    after_help = "Reads (nothing is written): QEMU command lines (-drive cache=, aio=,
-blockdev cache.direct), /etc/libvirt/qemu/*.xml (<driver cache= io=>),
MariaDB/MySQL option files (/etc/mysql/my.cnf, /etc/my.cnf, their includes;
mysqld/mariadbd options), PostgreSQL (/etc/postgresql/*/*/postgresql.conf,
postgresql.auto.conf, a running postgres -D), /sys/block/loop*/loop (dio,
backing_file) and, as root, every process's descriptors open O_DIRECT (fdinfo
flags). Each file's verdict is what probe-dio expects of this kernel, profile
and NOCOW flag, not a measurement: each file names the probe-dio command that
measures it."
)]
pub struct AppsArgs {
    /// Only applications with files on this mounted btrfs [default: all].
    #[arg(value_name = "MOUNT")]
    mount: Option<PathBuf>,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: AppsArgs, out: &Output) -> Result<u8> {
    let root = SysRoot::from_option(args.sysroot.as_deref(), out);
    let report = apps::run(&root, args.mount.as_deref())?;
    out.report(&report, |r| render(r, out.paint));
    Ok(btrfs_lab::model::exit::OK.code)
}

fn line(t: &mut String, first: &str, rest: &str, text: &str) {
    t.push_str(&fill(text, width(), first, rest));
    if !t.ends_with('\n') {
        t.push('\n');
    }
}

fn render(r: &AppsReport, paint: Paint) -> String {
    let mut t = String::new();
    if r.apps.is_empty() {
        t.push_str("no O_DIRECT users found (QEMU, libvirt, MariaDB/MySQL, PostgreSQL, loop devices, processes)\n");
    }
    for a in &r.apps {
        render_app(&mut t, a, paint);
    }
    t.push_str(&format!("kernel {}\n", esc(&r.kernel)));
    line(
        &mut t,
        "",
        "  ",
        &format!(
            "{} application(s), {} expected to fall back to buffered writes (expected, not \
             measured: probe-dio measures)",
            r.apps.len(),
            r.falling_back
        ),
    );
    for n in &r.notes {
        line(&mut t, "note: ", "  ", &esc(n));
    }
    t
}

fn render_app(t: &mut String, a: &App, paint: Paint) {
    let verdict = match a.verdict {
        Some(v) if matches!(v.name(), "buffered-fallback" | "profile-forced") => {
            paint.bad(v.name())
        }
        Some(v) => v.name().to_owned(),
        None => match a.o_direct {
            Some(false) => "no O_DIRECT".to_owned(),
            Some(true) => "O_DIRECT".to_owned(),
            None => "O_DIRECT?".to_owned(),
        },
    };
    t.push_str(&format!(
        "{} {}  [{verdict}]\n",
        paint.bold(a.kind.name()),
        esc(&a.name)
    ));
    line(
        t,
        "  setting: ",
        "    ",
        &format!("{} — {}", esc(&a.setting), esc(&a.source)),
    );
    for f in &a.files {
        let nocow = match f.place.nocow {
            Some(true) => "NOCOW",
            Some(false) => "checksummed",
            None => "-",
        };
        let on = f.place.fs_type.as_deref().unwrap_or("?");
        t.push_str(&format!(
            "  {}  ({on}, {nocow}): {}\n",
            escape_path(&f.path),
            f.expected.map_or("-", |v| v.name())
        ));
        line(t, "    ", "      ", &esc(&f.basis));
        if f.expected.is_some() {
            line(t, "    cost: ", "      ", &esc(&f.cost));
        }
        if let Some(m) = &f.measure {
            line(t, "    measure: ", "      ", &esc(m));
        }
    }
    line(t, "  change: ", "    ", &esc(&a.change));
    if a.tradeoff != "none" {
        line(t, "  trade-off: ", "    ", &esc(&a.tradeoff));
    }
}

use super::page::{Declared, Shape};

/// What the manual page adds to clap's help.
pub const PAGES: &[Declared] = &[Declared {
    words: &["apps"],
    documents: &["apps"],
    output: Shape::Document,
    examples: &[
        (
            "Every O_DIRECT user and what this kernel does with its writes.",
            "btrfs-lab apps",
        ),
        (
            "Only those with files on one filesystem, as JSON.",
            "btrfs-lab apps --json /srv",
        ),
        (
            "Audit the configuration files of another system's tree.",
            "btrfs-lab apps --sysroot /mnt/backup-root",
        ),
    ],
    see_also: &["losetup(8)", "virsh(1)"],
    ..Declared::NONE
}];
