//! Reads what [`super::analyse`] needs: the processes' command lines and
//! O_DIRECT descriptors (`/proc`, through [`crate::sys::proc`]), the
//! configuration files (under `--sysroot`, through [`SysRoot`]: bounded
//! reads inside the prefix), the loop devices (sysfs), and where each file
//! is (its filesystem, profile and NOCOW flag: on the running system only).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::config::{self, Tree};
use super::{AppKind, Facts, Found, Place};
use crate::probe::pid::PidFile;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::ioctl;
use crate::sys::proc::fdinfo;

/// The largest configuration file or command line read.
const CAP: usize = 1 << 20;

/// The configuration files under a [`SysRoot`]'s prefix.
struct RootTree<'a>(&'a SysRoot);

impl RootTree<'_> {
    fn at(&self, p: &Path) -> PathBuf {
        self.0.prefix().join(p.strip_prefix("/").unwrap_or(p))
    }
}

impl Tree for RootTree<'_> {
    /// On the running system a configuration file may lie in a tree another
    /// user owns (a PostgreSQL data directory, an `!includedir`): it is read
    /// as a file a user placed (links followed only when root owns them);
    /// in a captured tree, inside the prefix.
    fn read(&self, path: &Path) -> Option<String> {
        let bytes = if self.0.prefix() == Path::new("/") {
            crate::sys::fs::input::read_user_file(path, CAP as u64).ok()?
        } else {
            self.0.read_bytes(&self.at(path), CAP).ok()?
        };
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn list(&self, dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(self.at(dir))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| dir.join(e.file_name()))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// A process: pid, command line.
struct Proc {
    pid: u32,
    argv: Vec<String>,
    comm: String,
}

fn processes(root: &SysRoot) -> Vec<Proc> {
    let me = std::process::id();
    let mut out: Vec<Proc> = fs::read_dir(root.proc(""))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| *p != me || !root.is_host())
                .filter_map(|pid| {
                    let raw = root
                        .read_bytes(&root.proc(&format!("{pid}/cmdline")), CAP)
                        .ok()?;
                    let argv: Vec<String> = raw
                        .split(|b| *b == 0)
                        .filter(|w| !w.is_empty())
                        .map(|w| String::from_utf8_lossy(w).into_owned())
                        .collect();
                    Some(Proc {
                        pid,
                        argv,
                        comm: fdinfo::comm(root, pid),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|p| p.pid);
    out
}

fn base(argv0: &str) -> &str {
    argv0.rsplit('/').next().unwrap_or(argv0)
}

fn is_qemu(p: &Proc) -> bool {
    p.argv
        .first()
        .is_some_and(|a| base(a).starts_with("qemu-system-") || base(a) == "qemu-kvm")
}

fn is_mysqld(p: &Proc) -> bool {
    matches!(p.comm.as_str(), "mysqld" | "mariadbd")
}

/// The postmaster (its children are `postgres: ...` with a rewritten
/// command line).
fn is_postmaster(p: &Proc) -> bool {
    p.comm == "postgres" && p.argv.first().is_some_and(|a| !a.starts_with("postgres:"))
}

/// `--name=value` or `--name value` of a command line (dashes and
/// underscores alike).
fn long_opt(argv: &[String], name: &str) -> Option<String> {
    let norm = |s: &str| s.replace('_', "-");
    let want = norm(name);
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        let Some(rest) = a.strip_prefix("--") else {
            continue;
        };
        match rest.split_once('=') {
            Some((k, v)) if norm(k) == want => return Some(v.to_owned()),
            None if norm(rest) == want => return it.next().cloned(),
            _ => {}
        }
    }
    None
}

/// `-D DIR` / `-c name=value` of postgres.
fn pg_opt(argv: &[String], flag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        if a == flag {
            if let Some(v) = it.next() {
                out.push(v.clone());
            }
        } else if let Some(v) = a.strip_prefix(flag) {
            out.push(v.to_owned());
        }
    }
    out
}

/// Where `path` is, on the running system; under another root nothing is
/// looked at (the files of an offline tree are not this system's).
pub fn place_of(root: &SysRoot, path: &Path) -> Place {
    if path.starts_with("/dev/") {
        return Place {
            note: Some("a block device: not a file on a filesystem".to_owned()),
            ..Place::default()
        };
    }
    if !root.is_host() {
        return Place {
            note: Some("read from --sysroot: the files themselves are not looked at".to_owned()),
            ..Place::default()
        };
    }
    let facts = match crate::sys::fs::filesystem::describe(root, path) {
        Ok(f) => f,
        Err(e) => {
            return Place {
                note: Some(format!("cannot be looked at: {}", e.message())),
                ..Place::default()
            };
        }
    };
    let Some(mount) = facts.mount else {
        return Place {
            note: Some("no mount contains it".to_owned()),
            ..Place::default()
        };
    };
    let mut place = Place {
        fs_type: Some(mount.fs_type.clone()),
        mount_point: Some(mount.mount_point.clone()),
        ..Place::default()
    };
    if mount.fs_type == "btrfs" {
        place.fsid = facts.fsid;
        place.data_profiles = facts.data_profiles;
        place.nocow = facts.flags.map(|f| f.intersects(ioctl::FS_NOCOW_FL));
        let no_sums = mount
            .options()
            .any(|o| o == "nodatacow" || o == "nodatasum");
        if no_sums && place.nocow != Some(true) {
            // Mounted without data checksums: as good as NOCOW for O_DIRECT.
            place.nocow = Some(true);
            place.note = Some("mounted with nodatacow/nodatasum: no data checksums".to_owned());
        }
    }
    place
}

fn from_pid_file(f: &PidFile, fsid: Option<String>) -> Place {
    Place {
        fs_type: Some(f.fs_type.clone()),
        fsid,
        mount_point: None,
        data_profiles: f.data_profiles.clone(),
        nocow: f.nocow,
        note: f.note.clone(),
    }
}

/// Reads everything: the processes, the configuration files under `root`,
/// the loop devices.
pub fn gather(root: &SysRoot) -> Facts {
    let mut notes = Vec::new();
    let mut found = Vec::new();
    let tree = RootTree(root);
    let procs = processes(root);
    // Running QEMU processes.
    for p in procs.iter().filter(|p| is_qemu(p)) {
        let disks = config::qemu_disks(&p.argv);
        if disks.is_empty() {
            continue;
        }
        for d in disks {
            found.push(Found {
                kind: AppKind::Qemu,
                name: format!("pid {} ({})", p.pid, base(&p.argv[0])),
                source: format!("/proc/{}/cmdline", p.pid),
                pid: Some(p.pid),
                setting: d.setting,
                o_direct: Some(d.direct),
                files: vec![(PathBuf::from(&d.file), place_of(root, Path::new(&d.file)))],
            });
        }
    }
    // libvirt domains.
    for xml in tree.list(Path::new("/etc/libvirt/qemu")) {
        if !xml.to_string_lossy().ends_with(".xml") {
            continue;
        }
        let Some(text) = tree.read(&xml) else {
            notes.push(format!("{}: cannot be read", xml.display()));
            continue;
        };
        match config::libvirt_domain(&text) {
            Ok(dom) => {
                for d in dom.disks {
                    found.push(Found {
                        kind: AppKind::Libvirt,
                        name: format!("domain {}", dom.name),
                        source: xml.display().to_string(),
                        pid: None,
                        setting: d.setting,
                        o_direct: Some(d.direct),
                        files: vec![(PathBuf::from(&d.file), place_of(root, Path::new(&d.file)))],
                    });
                }
            }
            Err(e) => notes.push(format!("{}: not a domain XML: {e}", xml.display())),
        }
    }
    mysql(root, &tree, &procs, &mut found);
    postgres(root, &tree, &procs, &mut found, &mut notes);
    loops(root, &mut found);
    odirect_processes(root, &procs, &mut found, &mut notes);
    Facts {
        kernel: crate::sys::kernel_release(),
        found,
        notes,
    }
}

fn mysql(root: &SysRoot, tree: &RootTree<'_>, procs: &[Proc], found: &mut Vec<Found>) {
    let servers: Vec<&Proc> = procs.iter().filter(|p| is_mysqld(p)).collect();
    let mut starts: Vec<(PathBuf, Option<&Proc>)> = servers
        .iter()
        .filter_map(|p| long_opt(&p.argv, "defaults-file").map(|f| (PathBuf::from(f), Some(*p))))
        .collect();
    if starts.is_empty() {
        let first = ["/etc/mysql/my.cnf", "/etc/my.cnf"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| tree.read(p).is_some());
        match first {
            Some(p) => starts.push((p, servers.first().copied())),
            None if !servers.is_empty() => {
                starts.push((PathBuf::from("/etc/my.cnf"), Some(servers[0])))
            }
            None => return,
        }
    }
    for (start, server) in starts {
        let mut files = Vec::new();
        let mut opts = config::mysql_options(tree, &start, &mut files);
        let mut source = start.display().to_string();
        if let Some(p) = server {
            for k in [
                "innodb_flush_method",
                "innodb_data_file_buffering",
                "datadir",
            ] {
                if let Some(v) = long_opt(&p.argv, k) {
                    opts.insert(
                        k.to_owned(),
                        config::Setting {
                            value: v,
                            at: format!("/proc/{}/cmdline", p.pid),
                        },
                    );
                }
            }
            source = format!("pid {} ({}), {source}", p.pid, p.comm);
        }
        let mariadb = server.is_some_and(|p| p.comm == "mariadbd")
            || files
                .iter()
                .any(|f| f.to_string_lossy().contains("mariadb"));
        let (setting, o_direct) = match (
            opts.get("innodb_data_file_buffering"),
            opts.get("innodb_flush_method"),
        ) {
            (Some(b), _) if matches!(b.value.to_ascii_lowercase().as_str(), "on" | "1") => (
                format!("innodb_data_file_buffering={} ({})", b.value, b.at),
                Some(false),
            ),
            (_, Some(m)) => (
                format!("innodb_flush_method={} ({})", m.value, m.at),
                config::innodb_direct(&m.value),
            ),
            (_, None) if mariadb => (
                "innodb_flush_method not set: O_DIRECT, MariaDB's default since 10.6 (MDEV-24854)".to_owned(),
                Some(true),
            ),
            (_, None) => (
                "innodb_flush_method not set: fsync in MySQL 8.0 and before, O_DIRECT in MySQL from 8.4 LTS (its new InnoDB defaults) and MariaDB from 10.6; the version is not read here".to_owned(),
                None,
            ),
        };
        let datadir = opts
            .get("datadir")
            .map_or_else(|| "/var/lib/mysql".to_owned(), |s| s.value.clone());
        found.push(Found {
            kind: AppKind::Mysql,
            name: if mariadb {
                "MariaDB".to_owned()
            } else {
                "MySQL/MariaDB".to_owned()
            },
            source,
            pid: server.map(|p| p.pid),
            setting,
            o_direct,
            files: vec![(PathBuf::from(&datadir), place_of(root, Path::new(&datadir)))],
        });
    }
}

fn postgres(
    root: &SysRoot,
    tree: &RootTree<'_>,
    procs: &[Proc],
    found: &mut Vec<Found>,
    notes: &mut Vec<String>,
) {
    // (config file, data directory known, its server).
    let mut confs: Vec<(PathBuf, Option<String>, Option<&Proc>)> = Vec::new();
    for p in procs.iter().filter(|p| is_postmaster(p)) {
        let data = pg_opt(&p.argv, "-D").into_iter().next();
        let conf = pg_opt(&p.argv, "-c")
            .into_iter()
            .find_map(|c| c.strip_prefix("config_file=").map(str::to_owned))
            .map(PathBuf::from)
            .or_else(|| data.as_ref().map(|d| Path::new(d).join("postgresql.conf")));
        match conf {
            Some(c) => confs.push((c, data, Some(p))),
            None => notes.push(format!(
                "postgres pid {}: no -D or config_file on its command line",
                p.pid
            )),
        }
    }
    for version in tree.list_dirs(Path::new("/etc/postgresql")) {
        for cluster in tree.list_dirs(&version) {
            let c = cluster.join("postgresql.conf");
            if tree.read(&c).is_some() && !confs.iter().any(|(x, _, _)| *x == c) {
                confs.push((c, None, None));
            }
        }
    }
    for (conf, data, server) in confs {
        let mut settings = BTreeMap::new();
        let mut files = Vec::new();
        config::postgres_settings(tree, &conf, &mut settings, &mut files);
        let data = data
            .or_else(|| settings.get("data_directory").map(|s| s.value.clone()))
            .or_else(|| {
                conf.parent()
                    .map(|d| d.display().to_string())
                    .filter(|_| server.is_some())
            });
        if let Some(d) = &data {
            // ALTER SYSTEM's file wins.
            config::postgres_settings(
                tree,
                &Path::new(d).join("postgresql.auto.conf"),
                &mut settings,
                &mut files,
            );
        }
        let io_method = settings
            .get("io_method")
            .map(|s| format!(", io_method={} ({})", s.value, s.at))
            .unwrap_or_default();
        let (setting, o_direct) = match settings.get("debug_io_direct") {
            Some(s) => (
                format!("debug_io_direct='{}' ({}){io_method}", s.value, s.at),
                Some(config::pg_direct(&s.value)),
            ),
            None => (
                format!(
                    "debug_io_direct not set (off: PostgreSQL writes through the page cache){io_method}"
                ),
                Some(false),
            ),
        };
        let files = data
            .iter()
            .map(|d| (PathBuf::from(d), place_of(root, Path::new(d))))
            .collect();
        found.push(Found {
            kind: AppKind::Postgresql,
            name: match server {
                Some(p) => format!("pid {} (postgres)", p.pid),
                None => conf.display().to_string(),
            },
            source: conf.display().to_string(),
            pid: server.map(|p| p.pid),
            setting,
            o_direct,
            files,
        });
    }
}

impl RootTree<'_> {
    fn list_dirs(&self, dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(self.at(dir))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| dir.join(e.file_name()))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn loops(root: &SysRoot, found: &mut Vec<Found>) {
    let Ok(rd) = fs::read_dir(root.sys("block")) else {
        return;
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.strip_prefix("loop")
                .is_some_and(|i| i.parse::<u32>().is_ok())
        })
        .collect();
    names.sort_by_key(|n| n[4..].parse::<u32>().unwrap_or(0));
    for n in names {
        let Ok(backing) = root.read_attr(&root.sys(&format!("block/{n}/loop/backing_file"))) else {
            continue;
        };
        let backing = backing.trim_end_matches('\n').to_owned();
        let dio = root
            .read_attr(&root.sys(&format!("block/{n}/loop/dio")))
            .map(|s| s.trim() == "1")
            .unwrap_or(false);
        let file = backing.trim_end_matches(" (deleted)");
        found.push(Found {
            kind: AppKind::Loop,
            name: format!("/dev/{n}"),
            source: format!("/sys/block/{n}/loop"),
            pid: None,
            setting: format!("dio={}", u8::from(dio)),
            o_direct: Some(dio),
            files: vec![(PathBuf::from(&backing), place_of(root, Path::new(file)))],
        });
    }
}

/// Whether any descriptor of `pid` is open O_DIRECT (fdinfo `flags:`,
/// text only: nothing is opened).
fn has_odirect_fd(root: &SysRoot, pid: u32) -> bool {
    let dir = root.proc(&format!("{pid}/fdinfo"));
    let Ok(rd) = fs::read_dir(&dir) else {
        return false;
    };
    rd.flatten().any(|e| {
        root.read_text(&e.path(), 64 << 10)
            .ok()
            .and_then(|t| fdinfo::parse_fdinfo(&t))
            .is_some_and(|i| i.direct() && i.writable())
    })
}

fn odirect_processes(
    root: &SysRoot,
    procs: &[Proc],
    found: &mut Vec<Found>,
    notes: &mut Vec<String>,
) {
    if !root.is_host() {
        return;
    }
    if !crate::sys::is_root() {
        notes.push(
            "not root: the O_DIRECT files of other users' processes were not read (run as root)"
                .to_owned(),
        );
    }
    for p in procs {
        if !has_odirect_fd(root, p.pid) {
            continue;
        }
        let files = match crate::probe::pid::open_for_writing(root, p.pid) {
            Ok(f) => f,
            Err(e) => {
                notes.push(format!("pid {}: {}", p.pid, e.message()));
                continue;
            }
        };
        let direct: Vec<(PathBuf, Place)> = files
            .into_iter()
            .filter(|(f, _)| f.o_direct)
            .map(|(f, fsid)| {
                let place = from_pid_file(&f, fsid);
                (f.path, place)
            })
            .collect();
        if direct.is_empty() {
            continue;
        }
        // A QEMU process already listed: its files' places come from its
        // own descriptors (what it really has open O_DIRECT).
        let mut rest = Vec::new();
        for (path, place) in direct {
            let known = found.iter_mut().find(|a| {
                a.pid == Some(p.pid) && a.files.iter().any(|(fp, _)| same_file(fp, &path))
            });
            match known {
                Some(a) => {
                    for (fp, pl) in a.files.iter_mut().filter(|(fp, _)| same_file(fp, &path)) {
                        let mount_point = pl.mount_point.take();
                        *pl = place.clone();
                        pl.mount_point = mount_point;
                        *fp = path.clone();
                    }
                    a.setting.push_str(" [open O_DIRECT: fdinfo]");
                }
                None => rest.push((path, place)),
            }
        }
        if rest.is_empty() {
            continue;
        }
        let kind = if is_mysqld(p) {
            AppKind::Mysql
        } else if is_postmaster(p) || p.comm == "postgres" {
            AppKind::Postgresql
        } else if is_qemu(p) {
            AppKind::Qemu
        } else {
            AppKind::Process
        };
        found.push(Found {
            kind,
            name: format!("pid {} ({})", p.pid, p.comm),
            source: format!("/proc/{}/fdinfo", p.pid),
            pid: Some(p.pid),
            setting: "files open O_DIRECT (fdinfo flags)".to_owned(),
            o_direct: Some(true),
            files: rest,
        });
    }
}

/// The same file, one path as given and one as the kernel names it.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    a == b
        || matches!((fs::metadata(a), fs::metadata(b)), (Ok(x), Ok(y)) if x.dev() == y.dev() && x.ino() == y.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn options_of_command_lines() {
        let a =
            v("/usr/sbin/mariadbd --basedir=/usr --datadir /srv/db --innodb-flush-method=fsync");
        assert_eq!(long_opt(&a, "datadir").as_deref(), Some("/srv/db"));
        assert_eq!(
            long_opt(&a, "innodb_flush_method").as_deref(),
            Some("fsync")
        );
        assert_eq!(long_opt(&a, "defaults-file"), None);
        let p = v(
            "/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main -c config_file=/etc/postgresql/15/main/postgresql.conf",
        );
        assert_eq!(pg_opt(&p, "-D"), vec!["/var/lib/postgresql/15/main"]);
        assert_eq!(pg_opt(&p, "-c").len(), 1);
    }
}
