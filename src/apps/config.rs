//! The O_DIRECT settings of the applications, from their own words: a QEMU
//! command line, a libvirt domain XML, MariaDB/MySQL option files and
//! PostgreSQL's configuration. Pure code: text in, settings out; the
//! includes are followed through a reader the caller gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One disk of a VM: its file (or device) and how it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// The image file or block device.
    pub file: String,
    /// Opened with O_DIRECT (`cache=none|directsync`, `cache.direct=on`,
    /// libvirt `cache='none'`); `false`: through the page cache.
    pub direct: bool,
    /// The words that say it (`cache=none,aio=native`; `cache=writeback
    /// (the default)`).
    pub setting: String,
}

/// `on`/`off`/`true`/`false` as QEMU reads them.
fn qemu_bool(v: &str) -> Option<bool> {
    match v {
        "on" | "true" | "yes" | "y" => Some(true),
        "off" | "false" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// Splits QEMU's `k=v,k=v` option syntax (`,,` is a literal comma).
fn qemu_opts(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    let mut parts = Vec::new();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                cur.push(',');
            } else {
                parts.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    for p in parts.into_iter().filter(|p| !p.is_empty()) {
        match p.split_once('=') {
            Some((k, v)) => out.push((k.to_owned(), v.to_owned())),
            None => out.push((p, String::new())),
        }
    }
    out
}

/// What `cache=MODE` means for O_DIRECT (qemu(1): none and directsync set
/// cache.direct=on; writeback, writethrough and unsafe do not).
fn cache_mode_direct(mode: &str) -> Option<bool> {
    match mode {
        "none" | "directsync" => Some(true),
        "writeback" | "writethrough" | "unsafe" => Some(false),
        _ => None,
    }
}

/// The disks of a QEMU command line (`-drive` and `-blockdev`, the latter
/// in its key=value or JSON form, as libvirt writes it): file-backed
/// drives only (no `file=` or `filename=`: nothing on a filesystem).
pub fn qemu_disks(argv: &[String]) -> Vec<Disk> {
    let mut disks = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let opt = argv[i].trim_start_matches('-');
        let is_opt = argv[i].starts_with('-');
        let value = argv.get(i + 1);
        match (is_opt, opt, value) {
            (true, "drive", Some(v)) => {
                disks.extend(drive(v));
                i += 2;
            }
            (true, "blockdev", Some(v)) => {
                disks.extend(blockdev(v));
                i += 2;
            }
            _ => i += 1,
        }
    }
    disks
}

fn drive(v: &str) -> Option<Disk> {
    let opts = qemu_opts(v);
    let get = |k: &str| {
        opts.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let file = get("file")?;
    if file.is_empty() {
        return None;
    }
    let mut said = Vec::new();
    let mut direct = false;
    if let Some(c) = get("cache") {
        said.push(format!("cache={c}"));
        direct = cache_mode_direct(c).unwrap_or(false);
    }
    if let Some(d) = get("cache.direct") {
        said.push(format!("cache.direct={d}"));
        direct = qemu_bool(d).unwrap_or(direct);
    }
    if let Some(a) = get("aio") {
        said.push(format!("aio={a}"));
    }
    if said.is_empty() {
        said.push("cache=writeback (QEMU's default)".to_owned());
    }
    Some(Disk {
        file: file.to_owned(),
        direct,
        setting: said.join(","),
    })
}

fn blockdev(v: &str) -> Option<Disk> {
    if v.trim_start().starts_with('{') {
        let j: serde_json::Value = serde_json::from_str(v).ok()?;
        let file = j.get("filename")?.as_str()?.to_owned();
        let direct = j
            .get("cache")
            .and_then(|c| c.get("direct"))
            .and_then(serde_json::Value::as_bool);
        let mut said = match direct {
            Some(d) => format!("cache.direct={d}"),
            None => "cache.direct=off (QEMU's default)".to_owned(),
        };
        if let Some(a) = j.get("aio").and_then(serde_json::Value::as_str) {
            said.push_str(&format!(",aio={a}"));
        }
        return Some(Disk {
            file,
            direct: direct.unwrap_or(false),
            setting: said,
        });
    }
    let opts = qemu_opts(v);
    let get = |k: &str| {
        opts.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let file = get("filename")?.to_owned();
    let direct = get("cache.direct").and_then(qemu_bool);
    let mut said = match get("cache.direct") {
        Some(d) => format!("cache.direct={d}"),
        None => "cache.direct=off (QEMU's default)".to_owned(),
    };
    if let Some(a) = get("aio") {
        said.push_str(&format!(",aio={a}"));
    }
    Some(Disk {
        file,
        direct: direct.unwrap_or(false),
        setting: said,
    })
}

/// A libvirt domain: its name and its file- or block-backed disks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// `<name>`.
    pub name: String,
    /// Its disks (`<disk>` with a `<source file=…>` or `<source dev=…>`).
    pub disks: Vec<Disk>,
}

/// Parses a libvirt domain XML (formatdomain.html: `<driver cache='none'
/// io='native'/>`; no `cache`: the hypervisor's default, writeback for
/// QEMU).
pub fn libvirt_domain(xml: &str) -> Result<Domain, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| e.to_string())?;
    let root = doc.root_element();
    if root.tag_name().name() != "domain" {
        return Err(format!(
            "the root element is <{}>, not <domain>",
            root.tag_name().name()
        ));
    }
    let name = root
        .children()
        .find(|n| n.has_tag_name("name"))
        .and_then(|n| n.text())
        .unwrap_or("?")
        .trim()
        .to_owned();
    let mut disks = Vec::new();
    for devices in root.children().filter(|n| n.has_tag_name("devices")) {
        for disk in devices.children().filter(|n| n.has_tag_name("disk")) {
            let Some(src) = disk.children().find(|n| n.has_tag_name("source")) else {
                continue;
            };
            let Some(file) = src.attribute("file").or_else(|| src.attribute("dev")) else {
                continue;
            };
            let driver = disk.children().find(|n| n.has_tag_name("driver"));
            let cache = driver.and_then(|d| d.attribute("cache"));
            let io = driver.and_then(|d| d.attribute("io"));
            let mut said = match cache {
                Some(c) => format!("cache='{c}'"),
                None => "no cache= (QEMU's default, writeback)".to_owned(),
            };
            if let Some(io) = io {
                said.push_str(&format!(" io='{io}'"));
            }
            disks.push(Disk {
                file: file.to_owned(),
                direct: cache.and_then(cache_mode_direct).unwrap_or(false),
                setting: said,
            });
        }
    }
    Ok(Domain { name, disks })
}

/// A setting and where it was read (`/etc/mysql/my.cnf:12`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Its value (quotes removed).
    pub value: String,
    /// File and line.
    pub at: String,
}

/// MariaDB/MySQL option-file names, in the sections the server reads.
/// Dashes and underscores are the same; `loose-` is dropped.
fn cnf_key(k: &str) -> String {
    let k = k.trim().to_ascii_lowercase().replace('-', "_");
    k.strip_prefix("loose_").unwrap_or(&k).to_owned()
}

/// The sections the server reads (mysqld(8), MariaDB "Configuring with
/// option files"): `[mysqld]`, `[server]`, `[mariadb]`, `[mariadbd]`,
/// `[mysqld-X.Y]`, `[mariadb-X.Y]`, `[galera]`.
fn server_section(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    matches!(
        n.as_str(),
        "mysqld" | "server" | "mariadb" | "mariadbd" | "galera"
    ) || n.starts_with("mysqld-")
        || n.starts_with("mariadb-")
}

/// Reads files for the parsers that follow includes: the text of a file,
/// the files of a directory (sorted). `None`: cannot be read.
pub trait Tree {
    /// The text of `path`.
    fn read(&self, path: &Path) -> Option<String>;
    /// The regular files in `dir`, sorted by name.
    fn list(&self, dir: &Path) -> Vec<PathBuf>;
}

/// The server options of a MariaDB/MySQL option file and what it includes
/// (`!include FILE`, `!includedir DIR`: its `*.cnf` files, in name order;
/// MariaDB also reads `*.ini`), the later value winning. `files` gets the
/// files read, in order.
pub fn mysql_options(
    tree: &dyn Tree,
    start: &Path,
    files: &mut Vec<PathBuf>,
) -> BTreeMap<String, Setting> {
    let mut out = BTreeMap::new();
    cnf_file(tree, start, &mut out, files, 0);
    out
}

/// The text of an included file, once (a file seen before, or includes
/// deeper than 10, give nothing: include loops end), noted in `files`.
fn enter(tree: &dyn Tree, path: &Path, files: &mut Vec<PathBuf>, depth: usize) -> Option<String> {
    if depth > 10 || files.iter().any(|f| f == path) {
        return None;
    }
    let text = tree.read(path)?;
    files.push(path.to_path_buf());
    Some(text)
}

fn cnf_file(
    tree: &dyn Tree,
    path: &Path,
    out: &mut BTreeMap<String, Setting>,
    files: &mut Vec<PathBuf>,
    depth: usize,
) {
    let Some(text) = enter(tree, path, files, depth) else {
        return;
    };
    let mut in_server = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(inc) = line.strip_prefix("!includedir") {
            for f in tree.list(Path::new(inc.trim())) {
                let name = f.to_string_lossy();
                if name.ends_with(".cnf") || name.ends_with(".ini") {
                    cnf_file(tree, &f, out, files, depth + 1);
                }
            }
            continue;
        }
        if let Some(inc) = line.strip_prefix("!include") {
            cnf_file(tree, Path::new(inc.trim()), out, files, depth + 1);
            continue;
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(sec) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_server = server_section(sec);
            continue;
        }
        if !in_server {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        let v = strip_comment(v.trim());
        out.insert(
            cnf_key(k),
            Setting {
                value: unquote(&v).to_owned(),
                at: format!("{}:{}", path.display(), n + 1),
            },
        );
    }
}

/// A value without its trailing ` # comment` (not inside quotes).
fn strip_comment(v: &str) -> String {
    let mut quote = None;
    for (i, c) in v.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') => return v[..i].trim_end().to_owned(),
            _ => {}
        }
    }
    v.to_owned()
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['\'', '"'] {
        if let Some(s) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return s;
        }
    }
    v
}

/// Whether `innodb_flush_method=VALUE` opens the data files with O_DIRECT
/// (MariaDB also takes the numbers 0 to 5: 4 is O_DIRECT, 5
/// O_DIRECT_NO_FSYNC). `None`: not a value known here.
pub fn innodb_direct(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "o_direct" | "o_direct_no_fsync" | "4" | "5" | "all_o_direct" => Some(true),
        "fsync" | "fdatasync" | "o_dsync" | "littlesync" | "nosync" | "0" | "1" | "2" | "3" => {
            Some(false)
        }
        _ => None,
    }
}

/// PostgreSQL's settings from `postgresql.conf` and what it includes
/// (`include`, `include_if_exists`, `include_dir`: its `*.conf` files in
/// name order; relative paths from the including file's directory), the
/// later value winning; names are case-insensitive.
pub fn postgres_settings(
    tree: &dyn Tree,
    start: &Path,
    out: &mut BTreeMap<String, Setting>,
    files: &mut Vec<PathBuf>,
) {
    pg_file(tree, start, out, files, 0);
}

fn pg_file(
    tree: &dyn Tree,
    path: &Path,
    out: &mut BTreeMap<String, Setting>,
    files: &mut Vec<PathBuf>,
    depth: usize,
) {
    let Some(text) = enter(tree, path, files, depth) else {
        return;
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    for (n, raw) in text.lines().enumerate() {
        let line = strip_comment(raw.trim());
        if line.is_empty() {
            continue;
        }
        let (k, v) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => match line.split_once(char::is_whitespace) {
                Some((k, v)) => (k.trim(), v.trim()),
                None => continue,
            },
        };
        let k = k.to_ascii_lowercase();
        let v = unquote(v).to_owned();
        match k.as_str() {
            "include" | "include_if_exists" => {
                pg_file(tree, &dir.join(&v), out, files, depth + 1);
            }
            "include_dir" => {
                for f in tree.list(&dir.join(&v)) {
                    if f.to_string_lossy().ends_with(".conf") {
                        pg_file(tree, &f, out, files, depth + 1);
                    }
                }
            }
            _ => {
                out.insert(
                    k,
                    Setting {
                        value: v,
                        at: format!("{}:{}", path.display(), n + 1),
                    },
                );
            }
        }
    }
}

/// Whether `debug_io_direct` (PostgreSQL 16+) opens data or WAL files with
/// O_DIRECT: a list of `data`, `wal`, `wal_init`; empty is off.
pub fn pg_direct(debug_io_direct: &str) -> bool {
    debug_io_direct
        .split(',')
        .map(|w| w.trim().to_ascii_lowercase())
        .any(|w| matches!(w.as_str(), "data" | "wal" | "wal_init"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn qemu_drives_and_blockdevs() {
        let d = qemu_disks(&argv(
            "qemu-system-x86_64 -machine none -drive file=/vm/a.img,,x,format=raw,if=none,cache=none,aio=native,id=d0 -drive file=/vm/b.qcow2,if=virtio -drive if=none,id=cd -drive file=/vm/c.img,cache=writeback,cache.direct=on",
        ));
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].file, "/vm/a.img,x");
        assert!(d[0].direct);
        assert_eq!(d[0].setting, "cache=none,aio=native");
        assert!(!d[1].direct);
        assert!(d[1].setting.contains("default"));
        assert!(d[2].direct);
        // libvirt's JSON -blockdev.
        let d = qemu_disks(&[
            "-blockdev".into(),
            r#"{"driver":"file","filename":"/var/lib/libvirt/images/x.qcow2","node-name":"libvirt-1-storage","cache":{"direct":true,"no-flush":false},"aio":"native"}"#.into(),
            "-blockdev".into(),
            "driver=file,filename=/vm/y.raw,node-name=y".into(),
        ]);
        assert_eq!(d.len(), 2);
        assert!(d[0].direct);
        assert_eq!(d[0].setting, "cache.direct=true,aio=native");
        assert!(!d[1].direct);
    }

    #[test]
    fn cnf_values_and_sections() {
        assert_eq!(cnf_key("loose-innodb-flush-method"), "innodb_flush_method");
        assert!(server_section("mariadb-10.6"));
        assert!(!server_section("client"));
        assert_eq!(strip_comment("O_DIRECT # fast"), "O_DIRECT");
        assert_eq!(strip_comment("'a#b' # c"), "'a#b'");
        assert_eq!(innodb_direct("O_DIRECT_NO_FSYNC"), Some(true));
        assert_eq!(innodb_direct("fsync"), Some(false));
        assert_eq!(innodb_direct("weird"), None);
        assert!(pg_direct("data, wal"));
        assert!(!pg_direct(""));
    }

    #[test]
    fn libvirt_without_domain_is_refused() {
        assert!(libvirt_domain("<pool/>").is_err());
        assert!(libvirt_domain("<domain").is_err());
    }
}
