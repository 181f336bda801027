use std::path::{Path, PathBuf};

use super::*;
use crate::sys::fs::root::SysRoot;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apps")
}

fn btrfs(nocow: bool, profile: Profile) -> Place {
    Place {
        fs_type: Some("btrfs".into()),
        fsid: Some("f5".into()),
        mount_point: Some("/srv".into()),
        data_profiles: vec![profile],
        nocow: Some(nocow),
        note: None,
    }
}

fn found(kind: AppKind, o_direct: Option<bool>, files: Vec<(&str, Place)>) -> Found {
    Found {
        kind,
        name: "x".into(),
        source: "s".into(),
        pid: Some(7),
        setting: "cache=none".into(),
        o_direct,
        files: files
            .into_iter()
            .map(|(p, pl)| (PathBuf::from(p), pl))
            .collect(),
    }
}

#[test]
fn verdict_per_file_from_the_kernel_profile_and_nocow() {
    let facts = Facts {
        kernel: "6.12.117+deb13-amd64".into(),
        found: vec![
            found(
                AppKind::Qemu,
                Some(true),
                vec![
                    ("/srv/vm/a.img", btrfs(false, Profile::Single)),
                    ("/srv/nocow/b.img", btrfs(true, Profile::Single)),
                ],
            ),
            found(
                AppKind::Loop,
                Some(false),
                vec![("/srv/l.img", btrfs(false, Profile::Single))],
            ),
            found(
                AppKind::Mysql,
                Some(true),
                vec![("/srv/db", btrfs(true, Profile::Dup))],
            ),
        ],
        notes: vec![],
    };
    let r = analyse(&facts);
    assert_eq!(r.falling_back, 2);
    // Worst first: profile-forced, then the fallback, then the loop device.
    assert_eq!(r.apps[0].kind, AppKind::Mysql);
    assert_eq!(r.apps[0].verdict, Some(Verdict::ProfileForced));
    assert!(
        r.apps[0].change.contains("NOCOW does not help"),
        "{}",
        r.apps[0].change
    );
    let q = &r.apps[1];
    assert_eq!(q.files[0].expected, Some(Verdict::BufferedFallback));
    assert_eq!(q.files[1].expected, Some(Verdict::Direct));
    assert!(
        q.change.contains("btrfs-lab nocow --migrate /srv/vm"),
        "{}",
        q.change
    );
    assert!(q.tradeoff.contains("no btrfs checksums"), "{}", q.tradeoff);
    assert!(q.files[0].basis.starts_with("expected, not measured"));
    assert_eq!(
        q.files[0].measure.as_deref(),
        Some("btrfs-lab probe-dio --pid 7 (its writes now), or btrfs-lab probe-dio /srv/vm")
    );
    let l = &r.apps[2];
    assert_eq!(l.verdict, None);
    assert!(l.change.starts_with("none"));
    // doctor: one finding per app that falls back, on its filesystem only.
    let f = findings(&r, "f5");
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|x| x.code == Code::AppDioFallback));
    assert_eq!(f[1].command.as_deref(), Some("btrfs-lab probe-dio --pid 7"));
    assert!(findings(&r, "other").is_empty());
    // 7.3 bounces: nothing falls back.
    let r = analyse(&Facts {
        kernel: "7.3.4".into(),
        ..facts
    });
    assert_eq!(r.falling_back, 0);
    assert_eq!(r.apps[0].verdict, Some(Verdict::DirectBounced));
}

#[test]
fn the_real_configs_of_the_fixture_tree() {
    let root = SysRoot::new(fixtures().join("sysroot"));
    let facts = gather::gather(&root);
    let r = analyse(&facts);
    let kinds: Vec<(AppKind, Option<bool>)> = r.apps.iter().map(|a| (a.kind, a.o_direct)).collect();
    // libvirt's disk-cache.xml: five disks, none and directsync are O_DIRECT.
    let libvirt: Vec<&App> = r
        .apps
        .iter()
        .filter(|a| a.kind == AppKind::Libvirt)
        .collect();
    assert_eq!(libvirt.len(), 5, "{kinds:?}");
    assert_eq!(
        libvirt.iter().filter(|a| a.o_direct == Some(true)).count(),
        2
    );
    assert!(libvirt.iter().all(|a| a.name == "domain QEMUGuest1"));
    assert!(
        libvirt
            .iter()
            .filter(|a| a.o_direct == Some(true))
            .all(|a| a.files[0].basis.contains("block device")),
        "{:?}",
        libvirt[0].files
    );
    // Debian's MariaDB: my.cnf includes conf.d and mariadb.conf.d, which
    // set no innodb_flush_method: MariaDB's default, O_DIRECT.
    let m = r
        .apps
        .iter()
        .find(|a| a.kind == AppKind::Mysql)
        .expect("mysql");
    assert_eq!(m.o_direct, Some(true));
    assert!(m.setting.contains("MDEV-24854"), "{}", m.setting);
    assert_eq!(m.files[0].path, Path::new("/var/lib/mysql"));
    // PostgreSQL's sample: everything commented out, buffered.
    let p = r
        .apps
        .iter()
        .find(|a| a.kind == AppKind::Postgresql)
        .expect("postgresql");
    assert_eq!(p.o_direct, Some(false));
    assert!(p.files.is_empty(), "{:?}", p.files);
    assert_eq!(r.falling_back, 0);
}

/// An in-memory tree (generated text, for the settings the real files do
/// not set).
struct Mem(Vec<(&'static str, &'static str)>);

impl config::Tree for Mem {
    fn read(&self, path: &Path) -> Option<String> {
        self.0
            .iter()
            .find(|(p, _)| Path::new(p) == path)
            .map(|(_, t)| (*t).to_owned())
    }
    fn list(&self, dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self
            .0
            .iter()
            .map(|(p, _)| PathBuf::from(p))
            .filter(|p| p.parent() == Some(dir))
            .collect();
        v.sort();
        v
    }
}

#[test]
fn includes_are_followed_and_the_last_value_wins() {
    // Generated.
    let tree = Mem(vec![
        (
            "/etc/my.cnf",
            "[client]\ninnodb_flush_method=nosync\n[mysqld]\ninnodb-flush-method = fsync\n!includedir /etc/my.cnf.d\n",
        ),
        (
            "/etc/my.cnf.d/10-a.cnf",
            "[mariadb]\nloose-innodb_flush_method = \"O_DIRECT\" # fast\ndatadir=/srv/db\n",
        ),
        (
            "/etc/my.cnf.d/README",
            "[mysqld]\ninnodb_flush_method=fsync\n",
        ),
    ]);
    let mut files = Vec::new();
    let o = config::mysql_options(&tree, Path::new("/etc/my.cnf"), &mut files);
    assert_eq!(o["innodb_flush_method"].value, "O_DIRECT");
    assert_eq!(o["innodb_flush_method"].at, "/etc/my.cnf.d/10-a.cnf:2");
    assert_eq!(o["datadir"].value, "/srv/db");
    assert_eq!(files.len(), 2);
    let tree = Mem(vec![
        (
            "/etc/pg/postgresql.conf",
            "data_directory = '/srv/pg'\t# x\ninclude_dir 'conf.d'\n",
        ),
        (
            "/etc/pg/conf.d/90.conf",
            "debug_io_direct = 'data, wal'\nIO_METHOD = io_uring\n",
        ),
    ]);
    let mut s = std::collections::BTreeMap::new();
    config::postgres_settings(
        &tree,
        Path::new("/etc/pg/postgresql.conf"),
        &mut s,
        &mut files,
    );
    assert_eq!(s["data_directory"].value, "/srv/pg");
    assert!(config::pg_direct(&s["debug_io_direct"].value));
    assert_eq!(s["io_method"].value, "io_uring");
}

#[test]
fn libvirt_file_disks_and_the_qemu_command_line_libvirt_makes() {
    // Generated (the shape of libvirt's formatdomain examples).
    let d = config::libvirt_domain(
        "<domain type='kvm'><name>vm1</name><devices>\
         <disk type='file' device='disk'><driver name='qemu' type='qcow2' cache='none' io='native'/>\
         <source file='/var/lib/libvirt/images/vm1.qcow2'/><target dev='vda'/></disk>\
         <disk type='file' device='cdrom'><driver name='qemu' type='raw'/><target dev='sda'/></disk>\
         <disk type='file'><driver name='qemu'/><source file='/x.img'/></disk>\
         </devices></domain>",
    )
    .unwrap();
    assert_eq!(d.name, "vm1");
    assert_eq!(d.disks.len(), 2);
    assert!(d.disks[0].direct);
    assert_eq!(d.disks[0].setting, "cache='none' io='native'");
    assert!(!d.disks[1].direct);
    // Real: libvirt's tests/qemuxmlconfdata/disk-cache.x86_64-latest.args.
    let args =
        std::fs::read_to_string(fixtures().join("qemu/disk-cache.x86_64-latest.args")).unwrap();
    let argv: Vec<String> = shlex::split(&args.replace("\\\n", " ")).unwrap();
    let disks = config::qemu_disks(&argv);
    assert_eq!(disks.len(), 5);
    let direct: Vec<bool> = disks.iter().map(|d| d.direct).collect();
    // writeback, unsafe, none, writethrough, directsync.
    assert_eq!(direct, [false, false, true, false, true]);
}

/// Processes and loop devices of a generated /proc and /sys tree (the QEMU
/// command line is libvirt's real one, from the fixtures).
#[test]
fn processes_and_loop_devices_of_a_tree() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let proc = |pid: u32, comm: &str, argv: &[String]| {
        let d = root.join(format!("proc/{pid}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
        let mut raw = argv.join("\0");
        raw.push('\0');
        std::fs::write(d.join("cmdline"), raw).unwrap();
    };
    let args =
        std::fs::read_to_string(fixtures().join("qemu/disk-cache.x86_64-latest.args")).unwrap();
    let argv: Vec<String> = shlex::split(&args.replace("\\\n", " "))
        .unwrap()
        .into_iter()
        .skip_while(|w| w.contains('='))
        .collect();
    proc(100, "qemu-system-x86", &argv);
    let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    proc(
        200,
        "mariadbd",
        &words("/usr/sbin/mariadbd --datadir=/srv/db --innodb-flush-method=fsync"),
    );
    proc(
        300,
        "postgres",
        &words(
            "/usr/lib/postgresql/17/bin/postgres -D /srv/pg -c config_file=/etc/pg/postgresql.conf",
        ),
    );
    proc(301, "postgres", &words("postgres: 17/main: checkpointer"));
    let pg = root.join("etc/pg");
    std::fs::create_dir_all(&pg).unwrap();
    std::fs::write(pg.join("postgresql.conf"), "debug_io_direct = 'data'\n").unwrap();
    let lo = root.join("sys/block/loop3/loop");
    std::fs::create_dir_all(&lo).unwrap();
    std::fs::write(lo.join("backing_file"), "/srv/img/disk.img (deleted)\n").unwrap();
    std::fs::write(lo.join("dio"), "1\n").unwrap();
    std::fs::create_dir_all(root.join("sys/block/loop4")).unwrap();
    let r = analyse(&gather::gather(&SysRoot::new(root)));
    let of = |k: AppKind| r.apps.iter().filter(move |a| a.kind == k);
    let q: Vec<&App> = of(AppKind::Qemu).collect();
    assert_eq!(q.len(), 5, "{r:#?}");
    assert!(q.iter().all(|a| a.pid == Some(100)));
    assert_eq!(q.iter().filter(|a| a.o_direct == Some(true)).count(), 2);
    let m: Vec<&App> = of(AppKind::Mysql).collect();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].o_direct, Some(false));
    assert!(
        m[0].setting
            .starts_with("innodb_flush_method=fsync (/proc/200/cmdline)"),
        "{}",
        m[0].setting
    );
    assert_eq!(m[0].files[0].path, Path::new("/srv/db"));
    let p: Vec<&App> = of(AppKind::Postgresql).collect();
    assert_eq!(p.len(), 1, "the checkpointer is not a postmaster");
    assert_eq!(p[0].o_direct, Some(true));
    assert_eq!(p[0].files[0].path, Path::new("/srv/pg"));
    let l: Vec<&App> = of(AppKind::Loop).collect();
    assert_eq!(l.len(), 1, "loop4 is not attached");
    assert_eq!(l[0].name, "/dev/loop3");
    assert_eq!(l[0].o_direct, Some(true));
    assert_eq!(l[0].files[0].path, Path::new("/srv/img/disk.img (deleted)"));
}
