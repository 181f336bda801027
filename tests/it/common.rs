//! Shared test harness: root gating, a per-test environment whose drop
//! removes every sandbox, mount and loop device the test made (panics
//! included), and helpers to run the built binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use btrfs_lab::report::envelope::{Document, Envelope, SCHEMA_VERSION};
use btrfs_lab::sandbox::{self, Sandbox, SandboxRequest, StateStore, plan_up};
use serde_json::Value;

/// The binary under test.
/// `COLUMNS` for the tests that look for a phrase in the output: text is
/// not wrapped (the transcripts check the output at 80 columns).
pub const WIDE: &str = "1000";

/// The test hook that moves btrfs-progs' scrub records out of
/// `/var/lib/btrfs` (`TestEnv::progs_dir`).
pub const PROGS_DIR_ENV: &str = "BTRFS_LAB_SCRUB_PROGS_DIR";

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_btrfs-lab"))
}

/// Checks the prerequisites of a test that makes loop devices and mounts:
/// root, btrfs-progs, e2fsprogs (`mkfs.ext4`, `lsattr`) and
/// `/dev/loop-control`. Such a test carries
/// `#[cfg_attr(root_tests_ignored, ignore = "needs root ...")]`: built by a
/// user who is not root it is ignored (build.rs), so it only runs when it
/// was built to run. Then a missing prerequisite **fails** it with the
/// reason (a binary built by root and run by another user, a tool not
/// installed): it never passes without having run. Always returns true
/// (the `bool` keeps `if !require_root(..) { return; }` call sites as they
/// are).
pub fn require_root(test: &str) -> bool {
    let missing = missing_root_prerequisites();
    if !missing.is_empty() {
        panic!(
            "{test} needs {} (run the suite as root: scripts/test.sh; built by a user \
             who is not root, these tests are reported as ignored)",
            missing.join(", ")
        );
    }
    true
}

/// What [`require_root`] found missing, empty when a root test can run.
pub fn missing_root_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_owned());
    }
    for tool in ["mkfs.btrfs", "btrfs", "mkfs.ext4", "lsattr"] {
        if btrfs_lab::sys::tools::find(tool, "").is_err() {
            missing.push(tool.to_owned());
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        missing.push("/dev/loop-control".to_owned());
    }
    missing
}

/// One test's private world: a directory under /var/tmp (a disk
/// filesystem, as loop devices with direct I/O need) holding the sandbox
/// state and data. Dropping it removes every sandbox recorded there, any
/// extra mount the test registered, then the directory.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    extra_mounts: Vec<PathBuf>,
    /// The fsids of the filesystems this environment made: btrfs-progs'
    /// scrub records of them (`btrfs scrub` run by a test writes one in
    /// /var/lib/btrfs, the machine's) are removed when it ends.
    fsids: std::cell::RefCell<Vec<String>>,
}

impl TestEnv {
    pub fn new() -> Self {
        fs::create_dir_all("/var/tmp").unwrap();
        let dir = tempfile::Builder::new()
            .prefix("btrfs-lab-test-")
            .tempdir_in("/var/tmp")
            .expect("temp dir in /var/tmp");
        Self {
            dir,
            extra_mounts: Vec::new(),
            fsids: std::cell::RefCell::new(Vec::new()),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn store(&self) -> StateStore {
        StateStore::new(self.path().join("state"))
    }

    pub fn sandbox_root(&self) -> PathBuf {
        self.path().join("sandboxes")
    }

    /// A sandbox made through the library; torn down when dropped.
    pub fn sandbox(&self, request: SandboxRequest) -> Sandbox {
        let plan = plan_up(&request, &self.sandbox_root(), &sandbox::random_name()).unwrap();
        let sbx = Sandbox::up(&plan, &self.store())
            .unwrap_or_else(|e| panic!("sandbox up: {} ({:?})", e.message(), e.hint()));
        if let Ok(fsid) = btrfs_lab::sys::kernel::btrfs::fsid(sbx.mount_point()) {
            self.fsids.borrow_mut().push(fsid);
        }
        sbx
    }

    /// The binary with this environment's state and sandbox directories,
    /// given as the global options (as root the environment variables are
    /// ignored).
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(bin());
        c.args(self.location_args())
            .env_remove("BTRFS_LAB_STATE_DIR")
            .env_remove("BTRFS_LAB_SANDBOX_ROOT")
            .env("NO_COLOR", "1")
            .env("COLUMNS", WIDE)
            .env(PROGS_DIR_ENV, self.progs_dir())
            .stdin(Stdio::null());
        c
    }

    /// Where this environment's runs write btrfs-progs' scrub records
    /// (not `/var/lib/btrfs`: a test's filesystems leave nothing there).
    pub fn progs_dir(&self) -> PathBuf {
        self.path().join("var-lib-btrfs")
    }

    /// `--state-dir DIR --sandbox-root DIR` for this environment.
    pub fn location_args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--state-dir".into(),
            self.store().dir().into(),
            "--sandbox-root".into(),
            self.sandbox_root().into(),
        ]
    }

    /// Mounts a tmpfs the test owns; unmounted when the environment drops.
    pub fn tmpfs(&mut self, name: &str) -> PathBuf {
        let p = self.path().join(name);
        fs::create_dir_all(&p).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            &p,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=64m"),
        )
        .unwrap();
        self.extra_mounts.push(p.clone());
        p
    }

    /// Registers a mount the test made itself, to be unmounted on drop.
    pub fn track_mount(&mut self, p: PathBuf) {
        self.extra_mounts.push(p);
    }

    /// A spare loop device (sparse file, direct I/O) that is not part of any
    /// filesystem; detached when the environment drops.
    pub fn spare_device(&self, name: &str, size: u64) -> PathBuf {
        let image = self.path().join(format!("{name}.img"));
        fs::File::create_new(&image).unwrap().set_len(size).unwrap();
        btrfs_lab::sys::block::loopdev::attach(&image, true)
            .unwrap()
            .path
    }

    /// The binary run as user `nobody`: it is copied into this environment,
    /// which (with `dirs`) is made traversable, so that `nobody` is refused
    /// only where the command under test should refuse it.
    pub fn as_nobody(&self, dirs: &[&Path]) -> Command {
        use std::os::unix::fs::PermissionsExt;
        for d in std::iter::once(self.path()).chain(dirs.iter().copied()) {
            fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let exe = self.path().join("btrfs-lab");
        if !exe.exists() {
            fs::copy(bin(), &exe).unwrap();
        }
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(exe)
            .env("NO_COLOR", "1")
            .env("COLUMNS", WIDE)
            .stdin(Stdio::null());
        c
    }

    /// Loop devices and mounts that still refer to this environment.
    pub fn leftovers(&self) -> Vec<String> {
        leftovers_under(self.path())
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

/// Loop devices backed by files under `dir`, and mounts under it.
pub fn leftovers_under(dir: &Path) -> Vec<String> {
    // A detached loop device with autoclear is freed when its last opener
    // closes it (udev's blkid, another test's scan): give that a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = leftovers_now(dir);
        if found.is_empty() || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// [`leftovers_under`] as it is this instant (for a test that expects some).
pub fn leftovers_now(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let mut found = Vec::new();
    if let Ok(entries) = fs::read_dir("/sys/block") {
        for e in entries.flatten() {
            if let Ok(b) = fs::read_to_string(e.path().join("loop/backing_file"))
                && b.starts_with(&prefix)
            {
                found.push(format!(
                    "loop device {} -> {}",
                    e.file_name().to_string_lossy(),
                    b.trim()
                ));
            }
        }
    }
    if let Ok(m) = fs::read_to_string("/proc/self/mountinfo") {
        for entry in btrfs_lab::parse::mountinfo::parse_mountinfo(&m) {
            if entry.mount_point.starts_with(dir) {
                found.push(format!("mount {}", entry.mount_point.display()));
            }
        }
    }
    found.sort();
    found
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let store = self.store();
        if let Ok(records) = store.load_all() {
            for r in records {
                if let Ok(fsid) = btrfs_lab::sys::kernel::btrfs::fsid(&r.mount_point) {
                    self.fsids.borrow_mut().push(fsid);
                }
                if let Err(e) = sandbox::teardown(&store, &r) {
                    eprintln!(
                        "test env: could not remove sandbox {}: {}",
                        r.name,
                        e.message()
                    );
                }
            }
        }
        // btrfs-progs' scrub records of this environment's filesystems
        // (new fsids: nobody else's).
        for fsid in self.fsids.borrow().iter() {
            let _ = fs::remove_file(
                Path::new(btrfs_lab::scrub::progs::PROGS_DIR)
                    .join(btrfs_lab::scrub::progs::file_name(fsid)),
            );
        }
        for m in self.extra_mounts.iter().rev() {
            let _ = nix::mount::umount2(m, nix::mount::MntFlags::empty());
        }
        // Anything else still mounted under this directory was mounted by the
        // test (a transcript's `mount`): unmount it, deepest first.
        if let Ok(m) = fs::read_to_string("/proc/self/mountinfo") {
            let mut under: Vec<PathBuf> = btrfs_lab::parse::mountinfo::parse_mountinfo(&m)
                .into_iter()
                .map(|e| e.mount_point)
                .filter(|p| p.starts_with(self.path()))
                .collect();
            under.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for p in under {
                let _ = nix::mount::umount2(&p, nix::mount::MntFlags::empty());
            }
        }
        // Loop devices bound to files under this directory were attached by
        // the test: detach them (only while still bound to that very file).
        for line in leftovers_now(self.path()) {
            if let Some(rest) = line.strip_prefix("loop device ")
                && let Some((name, backing)) = rest.split_once(" -> ")
                && let Ok(f) = fs::File::open(backing)
                && let Ok(id) = btrfs_lab::sys::block::loopdev::FileIdentity::of(&f)
            {
                let dev = PathBuf::from(format!("/dev/{name}"));
                btrfs_lab::sys::kernel::btrfs::forget_device(&dev);
                let _ = btrfs_lab::sys::block::loopdev::detach_if_ours(
                    &btrfs_lab::sys::fs::root::SysRoot::host(),
                    &dev,
                    id,
                );
            }
        }
        let left = self.leftovers();
        if !left.is_empty() {
            eprintln!(
                "test env {}: still present after clean-up: {left:?}",
                self.path().display()
            );
        }
    }
}

/// Runs a command, returning (exit code, stdout, stderr).
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    if !cmd.get_envs().any(|(k, _)| k == "COLUMNS") {
        cmd.env("COLUMNS", WIDE);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run btrfs-lab");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Parses stdout as exactly one JSON document, checked against the JSON
/// Schema of the document it names ([`validate`]).
pub fn json(stdout: &str) -> Value {
    let v = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}"));
    validate(&v, stdout);
    v
}

/// Reads stdout back as the library's report type: first checked against
/// the published JSON Schema of the document (docs/schema/), then read as
/// `T`, whose document it must be. A renamed or missing field fails here
/// instead of reading as null.
pub fn typed<T: serde::de::DeserializeOwned + Document>(stdout: &str) -> T {
    let v: Value = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}"));
    let name = validate(&v, stdout);
    assert_eq!(
        name,
        T::NAME,
        "stdout is a {name} document, not a {} ({}):\n{stdout}",
        T::NAME,
        std::any::type_name::<T>()
    );
    serde_json::from_value(v).unwrap_or_else(|e| {
        panic!(
            "stdout is not a {} ({e}):\n{stdout}",
            std::any::type_name::<T>()
        )
    })
}

/// Reads a JSON Lines stream back as records of type `T`: each line is
/// checked against the schema of the document it names (a record of `T`,
/// or the `error` record that ends a stream that failed; that one fails
/// here, as it is not a `T`).
/// A JSON Lines stream of a job that reports progress (`device replace
/// --json`, ...): every line but the last a `progress` record (validated,
/// its counts consistent), the last the job's own document.
pub fn streamed<T: serde::de::DeserializeOwned + Document>(
    stdout: &str,
) -> (Vec<btrfs_lab::report::progress::ProgressRecord>, T) {
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let (last, progress) = lines
        .split_last()
        .unwrap_or_else(|| panic!("no JSON on stdout:\n{stdout}"));
    let records: Vec<btrfs_lab::report::progress::ProgressRecord> =
        progress.iter().map(|l| typed(l)).collect();
    for r in &records {
        let reading = &r.reading;
        assert!(
            reading.total_bytes == 0 || reading.done_bytes <= reading.total_bytes,
            "{r:?}"
        );
        assert!(reading.rate_bytes_per_sec.is_none_or(|v| v > 0.0), "{r:?}");
    }
    (records, typed(last))
}

/// A JSON Lines stream of records `T` with `progress` records among them
/// (`rescue --list --copy-to --json`), ending with a document `L`.
pub fn records_and_last<T, L>(
    stdout: &str,
) -> (Vec<T>, Vec<btrfs_lab::report::progress::ProgressRecord>, L)
where
    T: serde::de::DeserializeOwned + Document,
    L: serde::de::DeserializeOwned + Document,
{
    let mut lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines
        .pop()
        .unwrap_or_else(|| panic!("no JSON on stdout:\n{stdout}"));
    let (mut records, mut progress) = (Vec::new(), Vec::new());
    for l in lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        if v["btrfs_lab"]["document"] == "progress" {
            progress.push(typed(l));
        } else {
            records.push(typed(l));
        }
    }
    (records, progress, typed(last))
}

pub fn typed_lines<T: serde::de::DeserializeOwned + Document>(stdout: &str) -> Vec<T> {
    stdout.lines().map(typed).collect()
}

/// Checks a document (or one JSON Lines record) the tool printed against
/// the JSON Schema of the document its envelope names,
/// `docs/schema/<btrfs_lab.document>.schema.json` (docs/json.md), and
/// that the envelope is this build's. Returns the document's name.
pub fn validate(value: &Value, text: &str) -> String {
    let envelope: Envelope = serde_json::from_value(value["btrfs_lab"].clone())
        .unwrap_or_else(|e| panic!("no btrfs_lab envelope ({e}):\n{text}"));
    assert_eq!(envelope.version, env!("CARGO_PKG_VERSION"), "{text}");
    assert_eq!(envelope.schema, SCHEMA_VERSION, "{text}");
    assert_eq!(
        envelope.host,
        btrfs_lab::report::envelope::hostname(),
        "{text}"
    );
    let name = envelope.document;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/schema")
        .join(format!("{name}.schema.json"));
    let schema: Value = serde_json::from_str(
        &fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("no schema for document {name} ({e}):\n{text}")),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let url = format!("https://btrfs-lab.invalid/schema/{name}.schema.json");
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler
        .add_resource(&url, schema)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let id = compiler
        .compile(&url, &mut schemas)
        .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    if let Err(e) = schemas.validate(value, id) {
        panic!("the {name} document does not match docs/schema/{name}.schema.json:\n{e:#}\n{text}");
    }
    name
}

/// Asserts that `value` has each `key` with a value of the named JSON type
/// ("string", "number", "bool", "array", "object", "null", or "a|b").
pub fn assert_shape(value: &Value, fields: &[(&str, &str)]) {
    for (path, want) in fields {
        let v = path
            .split('.')
            .fold(value, |v, k| match k.parse::<usize>() {
                Ok(i) => &v[i],
                Err(_) => &v[k],
            });
        let got = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        assert!(
            want.split('|').any(|w| w == got),
            "field {path}: expected {want}, found {got} ({v}) in\n{value:#}"
        );
    }
}

/// The names in a directory, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The schemas are strict enough to catch a document that lost a field: a
/// real `df --parse --json` document passes [`validate`], and the same
/// document without a required field (at the top, inside a record, in the
/// envelope), with `null` where a number must be, or named as another
/// document, fails it.
#[test]
fn a_real_document_that_lost_a_field_fails_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("df.txt");
    fs::write(
        &input,
        "Data, single: total=1.00GiB, used=512.00MiB\n\
         System, single: total=4.00MiB, used=16.00KiB\n\
         Metadata, single: total=256.00MiB, used=1.00MiB\n\
         GlobalReserve, single: total=3.25MiB, used=0.00B\n",
    )
    .unwrap();
    let (code, stdout, stderr) = run(Command::new(bin())
        .args(["df", "--parse", "--json"])
        .arg(&input));
    assert_eq!(code, 0, "{stderr}");
    let doc = json(&stdout);
    assert_eq!(validate(&doc, &stdout), "df");
    assert_eq!(doc["records"][0]["total_bytes"], 1u64 << 30);
    let fails = |bad: &Value| {
        let text = bad.to_string();
        let bad = bad.clone();
        std::panic::catch_unwind(move || validate(&bad, &text)).is_err()
    };
    for pointer in [
        "/records",
        "/interpretation",
        "/records/0/total_bytes",
        "/records/1/profile",
        "/btrfs_lab/time",
    ] {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let mut bad = doc.clone();
        let removed = bad
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .and_then(|o| o.remove(key));
        assert!(removed.is_some(), "{pointer} is not in the document");
        assert!(fails(&bad), "{pointer} removed, and it still passed");
    }
    let mut bad = doc.clone();
    bad["records"][0]["used_bytes"] = Value::Null;
    assert!(fails(&bad), "null used_bytes passed");
    let mut bad = doc.clone();
    bad["btrfs_lab"]["document"] = "usage".into();
    assert!(fails(&bad), "a df document named usage passed");
    // And the unchanged document still passes: the failures above are the
    // removed fields, not the harness.
    assert!(!fails(&doc));
}

/// Runs `c` and fails the test, with its output, unless it succeeds.
pub fn must(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mount -o remount,OPTIONS M` of a test's own mount.
pub fn remount(m: &Path, options: &str) {
    must(
        Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(m),
    );
}

/// A member lost: unmounts `m`, makes the kernel forget `gone`, mounts
/// `first` alone with `options` (`degraded`, `degraded,ro`).
pub fn lose_member(m: &Path, first: &Path, gone: &Path, options: &str) {
    must(Command::new("umount").arg(m));
    // Right after the unmount the filesystem can still be open for a while:
    // another test's process that made a private mount namespace while it
    // was mounted (probe-dio's tracefs, debugfs) keeps its copy of the mount
    // until it exits. EBUSY until then (seen in CI on two rescue tests).
    let forget = || {
        let mut c = Command::new("btrfs");
        c.args(["device", "scan", "--forget"]).arg(gone);
        c
    };
    let forgot = (0..300).any(|_| {
        let ok = forget().output().is_ok_and(|o| o.status.success());
        if !ok {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        ok
    });
    if !forgot {
        must(&mut forget());
    }
    must(
        Command::new("mount")
            .args(["-t", "btrfs", "-o", options])
            .arg(first)
            .arg(m),
    );
}

/// Runs `args` with the run paused at `point` (test hook); while it waits
/// there `meanwhile` runs (given the run's pid: it may signal it); then the
/// run goes on. Returns its output.
#[cfg(feature = "test-hooks")]
pub fn with_pause_at(
    env: &TestEnv,
    point: &str,
    args: &[&std::ffi::OsStr],
    meanwhile: impl FnOnce(u32),
) -> (i32, String, String) {
    use std::io::{BufRead, BufReader, Read};
    let pause = btrfs_lab::hooks::Pause::named(point).unwrap();
    let go = env.path().join(format!("go-{point}"));
    let mut child = env
        .cmd()
        .env(btrfs_lab::hooks::PAUSE_ENV, pause.until(&go))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // stdout is drained meanwhile, so the run never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let drain = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    // stderr up to the pause line (or its end, when the run never got there).
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    let reached = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break false;
        }
        err.push_str(&line);
        if line.contains(&pause.message()) {
            break true;
        }
    };
    if reached {
        meanwhile(child.id());
    }
    fs::write(&go, "").unwrap();
    let _ = stderr.read_to_string(&mut err);
    let status = child.wait().unwrap();
    let out = drain.join().unwrap();
    assert!(reached, "the run never reached {point}: {err}");
    (status.code().unwrap_or(-1), out, err)
}

/// `promtool check metrics` on a text: (success, its output).
pub fn promtool_check_metrics(text: &str) -> (bool, String) {
    btrfs_lab::sys::tools::promtool_check_metrics(text)
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh installs it)")
}
