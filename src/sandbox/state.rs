//! The record of what `sandbox up` made, written before and after every
//! step so `sandbox down` can remove exactly that, even after a crash.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::FsKind;
use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::{Leaf, TrustedDir};

/// Environment variable overriding where records are kept (ignored as
/// root: use `--state-dir`).
pub const STATE_DIR_ENV: &str = "BTRFS_LAB_STATE_DIR";
/// Default place for records (survives reboots, like the backing files).
pub(crate) const DEFAULT_STATE_DIR: &str = "/var/lib/btrfs-lab/sandboxes";
const VERSION: u32 = 1;

/// One backing file and the loop device it was attached to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceRecord {
    /// The backing file.
    pub image: PathBuf,
    /// Its identity once created (so a loop device can be proven ours).
    pub identity: Option<FileIdentity>,
    /// The loop device once attached.
    pub loop_device: Option<PathBuf>,
    /// The loop device's disk sequence number at attach time (Linux 5.15+):
    /// only that very attachment is ever detached.
    #[serde(default)]
    pub diskseq: Option<u64>,
}

/// Who made a sandbox: what `down --all` goes by (only the same user's,
/// unless `--everyone`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Maker {
    /// The real user id of `up`.
    pub uid: u32,
    /// `SUDO_UID` when `up` ran through sudo (root for several people).
    pub sudo_uid: Option<u32>,
    /// The audit login session (`/proc/self/sessionid`), when there is one.
    pub session: Option<u32>,
    /// The command line of `up`.
    pub command: Vec<String>,
}

impl Maker {
    /// This process.
    pub fn current() -> Self {
        let sudo_uid = std::env::var("SUDO_UID")
            .ok()
            .and_then(|v| v.trim().parse().ok());
        let session = std::fs::read_to_string("/proc/self/sessionid")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&s| s != u32::MAX);
        Self {
            uid: crate::sys::uid(),
            sudo_uid,
            session,
            command: std::env::args().collect(),
        }
    }

    /// The person: the sudo user, else the real user.
    pub fn user(&self) -> u32 {
        self.sudo_uid.unwrap_or(self.uid)
    }

    /// One line: `uid 1000 (through sudo), session 3: btrfs-lab sandbox up`.
    pub fn describe(&self) -> String {
        format!(
            "uid {}{}{}: {}",
            self.user(),
            if self.sudo_uid.is_some() {
                " (through sudo)"
            } else {
                ""
            },
            self.session
                .map_or(String::new(), |s| format!(", session {s}")),
            self.command.join(" ")
        )
    }
}

/// Everything a sandbox consists of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxRecord {
    /// Format version of this record.
    pub version: u32,
    /// Sandbox name (also the record's file name).
    pub name: String,
    /// Filesystem.
    pub fs: FsKind,
    /// Directory with images and mount point.
    pub dir: PathBuf,
    /// True if `up` created `dir` (then `down` removes it when empty).
    pub dir_created: bool,
    /// Identity of `dir` (`down` removes only that directory).
    #[serde(default)]
    pub dir_identity: Option<FileIdentity>,
    /// Mount point.
    pub mount_point: PathBuf,
    /// True if `up` created the mount point directory.
    pub mount_point_created: bool,
    /// Identity of the mount point directory `up` created.
    #[serde(default)]
    pub(crate) mount_point_identity: Option<FileIdentity>,
    /// True once mounted.
    pub mounted: bool,
    /// Size of each device.
    pub size_bytes: u64,
    /// Requested data profile.
    pub data: Option<Profile>,
    /// Requested metadata profile.
    pub metadata: Option<Profile>,
    /// Devices, in order.
    pub devices: Vec<DeviceRecord>,
    /// True once `up` finished.
    pub complete: bool,
    /// Process that ran `up`.
    pub pid: u32,
    /// Seconds since the epoch when `up` started.
    pub(crate) created_unix: u64,
    /// Who ran `up` (absent in records of earlier versions).
    #[serde(default)]
    pub made_by: Option<Maker>,
}

impl SandboxRecord {
    /// A fresh record for a plan, nothing created yet.
    pub fn new(plan: &super::plan::SandboxPlan) -> Self {
        Self {
            version: VERSION,
            name: plan.name.clone(),
            fs: plan.fs,
            dir: plan.dir.clone(),
            dir_created: false,
            dir_identity: None,
            mount_point: plan.mount_point.clone(),
            mount_point_created: false,
            mount_point_identity: None,
            mounted: false,
            size_bytes: plan.size_bytes,
            data: plan.data,
            metadata: plan.metadata,
            devices: Vec::new(),
            complete: false,
            pid: std::process::id(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            made_by: Some(Maker::current()),
        }
    }

    /// Checks that the record describes a sandbox the way `up` writes it:
    /// a valid name, an absolute directory, the mount point `DIR/mnt` and
    /// images `DIR/devN.img`. Anything else is never acted on.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| {
            Err(Error::new(
                ErrorKind::State,
                format!("record '{}' is not one sandbox up wrote: {what}", self.name),
            )
            .with_hint("inspect it by hand; btrfs-lab will not act on it"))
        };
        if super::plan::validate_name(&self.name).is_err() {
            return bad("invalid name");
        }
        if self.version != VERSION {
            return bad("unknown version");
        }
        let plain = self.dir.is_absolute()
            && self.dir.parent().is_some()
            && self.dir.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            });
        if !plain {
            return bad("the directory is not a plain absolute path");
        }
        if self.mount_point != self.dir.join("mnt") {
            return bad("the mount point is not DIR/mnt");
        }
        for (i, d) in self.devices.iter().enumerate() {
            if d.image != self.dir.join(format!("dev{i}.img")) {
                return bad("an image is not DIR/devN.img");
            }
            if let Some(l) = &d.loop_device
                && (l.parent() != Some(Path::new("/dev"))
                    || crate::sys::block::loopdev::loop_index(l).is_none())
            {
                return bad("a loop device is not /dev/loopN");
            }
        }
        Ok(())
    }

    /// The loop devices recorded as attached.
    pub(crate) fn loop_devices(&self) -> impl Iterator<Item = &Path> {
        self.devices.iter().filter_map(|d| d.loop_device.as_deref())
    }
}

/// The directory of records. As root it must be root's alone (owned by
/// root, not writable by group or others, all the way up): a record
/// steers what `down` removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStore {
    dir: PathBuf,
}

/// What [`StateStore::load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Records that passed every check, sorted by name.
    pub records: Vec<SandboxRecord>,
    /// Files that are not valid records, with why: reported, never acted on.
    pub bad: Vec<Error>,
}

impl StateStore {
    /// A store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The command that removes sandbox `target` from this store, with
    /// `--state-dir` when the store is not the default one (a command
    /// printed for copying must work as printed).
    pub fn down_command(&self, target: &str) -> String {
        let flag = if self.dir == Path::new(DEFAULT_STATE_DIR) {
            String::new()
        } else {
            format!(
                "--state-dir {} ",
                crate::sys::tools::display_argv(&[self.dir.display().to_string()])
            )
        };
        format!(
            "btrfs-lab {flag}sandbox down --yes {}",
            crate::sys::tools::display_argv(&[target])
        )
    }

    /// Where the records are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file_name(name: &str) -> String {
        format!("{name}.json")
    }

    /// The directory, checked; created (0700) when `create`.
    fn open(&self, create: bool) -> Result<Option<TrustedDir>> {
        if create {
            return TrustedDir::create(&self.dir, Leaf::Private, 0o700).map(|(d, _)| Some(d));
        }
        match TrustedDir::open(&self.dir, Leaf::Private) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Claims `record.name`: fails if a record of that name exists. The
    /// record is written whole to a temporary file first and then renamed
    /// to its name without replacing anything (`RENAME_NOREPLACE`), so a
    /// record is never seen half-written, even when `up` is killed here.
    pub fn create(&self, record: &SandboxRecord) -> Result<()> {
        super::plan::validate_name(&record.name)?;
        let dir = self.open(true)?.expect("created");
        let name = Self::file_name(&record.name);
        let exists = || name_taken(self, &record.name);
        if dir.stat(&name)?.is_some() {
            return Err(exists());
        }
        // Our own temporary name: another `up` claiming the same name at
        // the same time has its own.
        let tmp = format!(".{}.json.new-{}", record.name, std::process::id());
        dir.remove_entry_file(&tmp)?;
        let text = serde_json::to_string_pretty(record).expect("record serializes");
        let mut f = dir.create_file(&tmp, 0o600)?;
        let written = f
            .write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::from_io(&e, "cannot write", &dir.join(&tmp)));
        drop(f);
        let claimed = written.and_then(|()| {
            dir.rename_noreplace(&tmp, &name).map_err(|e| {
                if dir.stat(&name).ok().flatten().is_some() {
                    exists()
                } else {
                    e
                }
            })
        });
        if claimed.is_err() {
            let _ = dir.remove_entry_file(&tmp);
        }
        claimed
    }

    /// Fails as [`StateStore::create`] would if a record of `name` exists:
    /// `up` asks first, before it looks at anything else.
    pub fn check_free(&self, name: &str) -> Result<()> {
        if self.has_record_file(name)? {
            Err(name_taken(self, name))
        } else {
            Ok(())
        }
    }

    /// The record file of sandbox `name`.
    pub fn record_path(&self, name: &str) -> PathBuf {
        self.dir.join(Self::file_name(name))
    }

    /// Whether there is a record file for `name`, valid or not.
    pub fn has_record_file(&self, name: &str) -> Result<bool> {
        super::plan::validate_name(name)?;
        match self.open(false)? {
            Some(dir) => Ok(dir.stat(Self::file_name(name))?.is_some()),
            None => Ok(false),
        }
    }

    /// Replaces the record atomically (write, fsync, rename).
    pub fn save(&self, record: &SandboxRecord) -> Result<()> {
        super::plan::validate_name(&record.name)?;
        let dir = self.open(true)?.expect("created");
        let name = Self::file_name(&record.name);
        let tmp = format!(".{}.json.tmp", record.name);
        dir.remove_entry_file(&tmp)?;
        let text = serde_json::to_string_pretty(record).expect("record serializes");
        let mut f = dir.create_file(&tmp, 0o600)?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::from_io(&e, "cannot write", &dir.join(&tmp)))?;
        dir.rename_replace(&tmp, &name)
    }

    /// Deletes the record.
    pub fn remove(&self, name: &str) -> Result<()> {
        super::plan::validate_name(name)?;
        match self.open(false)? {
            Some(dir) => dir.remove_entry_file(Self::file_name(name)),
            None => Ok(()),
        }
    }

    /// Every valid record, sorted by name, and the files that are not.
    /// A record must be a regular file owned by root (as root) and writable
    /// only by its owner, named after the sandbox it describes, and pass
    /// [`SandboxRecord::validate`]. An untrusted directory is an error.
    pub fn load(&self) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        let Some(dir) = self.open(false)? else {
            return Ok(loaded);
        };
        for name in dir.names()? {
            let text_name = name.to_string_lossy().into_owned();
            let Some(stem) = text_name.strip_suffix(".json") else {
                continue;
            };
            if text_name.starts_with('.') {
                continue;
            }
            match read_record(&dir, &text_name, stem) {
                Ok(r) => loaded.records.push(r),
                Err(e) => loaded.bad.push(e),
            }
        }
        loaded.records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(loaded)
    }

    /// The valid records (see [`StateStore::load`]); bad ones are skipped.
    pub fn load_all(&self) -> Result<Vec<SandboxRecord>> {
        self.load().map(|l| l.records)
    }
}

fn name_taken(store: &StateStore, name: &str) -> Error {
    Error::new(
        ErrorKind::Busy,
        format!("a sandbox named '{name}' already exists"),
    )
    .with_hint(format!(
        "choose another --name, or remove it with: {}",
        store.down_command(name)
    ))
}

fn read_record(dir: &TrustedDir, file: &str, stem: &str) -> Result<SandboxRecord> {
    let path = dir.join(file);
    let mut f = dir.open_file(file, false)?;
    let (uid, mode) = crate::sys::fs::filesystem::owner_and_mode(&f, &path)?;
    let me = crate::sys::euid();
    if uid != me || mode & 0o022 != 0 {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} is owned by uid {} with mode {:04o}, not written by btrfs-lab; not acting on it",
                path.display(),
                uid,
                mode & 0o7777
            ),
        )
        .with_hint("inspect it by hand and remove it if it is not yours"));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| Error::from_io(&e, "cannot read", &path))?;
    let record: SandboxRecord = serde_json::from_str(&text).map_err(|e| {
        Error::new(
            ErrorKind::State,
            format!("{} is not a sandbox record: {e}", path.display()),
        )
        .with_hint("inspect it by hand; btrfs-lab will not guess what it describes")
    })?;
    if record.name != stem {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} describes sandbox '{}', not '{stem}'; not acting on it",
                path.display(),
                record.name
            ),
        ));
    }
    record.validate()?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::plan::{SandboxRequest, plan_up};

    #[test]
    fn create_save_load_remove() {
        let t = tempfile::tempdir().unwrap();
        let store = StateStore::new(t.path().join("state"));
        let plan = plan_up(&SandboxRequest::default(), Path::new("/var/tmp/x"), "s1").unwrap();
        let mut rec = SandboxRecord::new(&plan);
        store.create(&rec).unwrap();
        let e = store.create(&rec).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        rec.devices.push(DeviceRecord {
            image: plan.images[0].clone(),
            identity: Some(FileIdentity { dev: 1, ino: 2 }),
            loop_device: Some("/dev/loop9".into()),
            diskseq: Some(7),
        });
        store.save(&rec).unwrap();
        assert_eq!(store.load_all().unwrap(), vec![rec.clone()]);
        assert_eq!(
            rec.loop_devices().collect::<Vec<_>>(),
            vec![Path::new("/dev/loop9")]
        );
        store.remove("s1").unwrap();
        assert!(store.load_all().unwrap().is_empty());
    }

    /// `create` writes a temporary file and renames it into place: no
    /// temporary is left, a refused second claim leaves the first record
    /// whole, and a temporary a killed `up` left is never read as a record.
    #[test]
    fn create_is_atomic_and_leaves_no_temporary() {
        let t = tempfile::tempdir().unwrap();
        let store = StateStore::new(t.path().join("state"));
        let plan = plan_up(&SandboxRequest::default(), Path::new("/var/tmp/x"), "s1").unwrap();
        let rec = SandboxRecord::new(&plan);
        store.create(&rec).unwrap();
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(store.dir())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(), ["s1.json"]);
        let mut other = rec.clone();
        other.pid = rec.pid + 1;
        assert_eq!(store.create(&other).unwrap_err().kind(), ErrorKind::Busy);
        assert_eq!(names(), ["s1.json"]);
        assert_eq!(store.load_all().unwrap(), vec![rec.clone()]);
        // What a create killed before its rename leaves: skipped.
        std::fs::write(store.dir().join(".s2.json.new-1"), "{half").unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.records, vec![rec]);
        assert!(loaded.bad.is_empty());
        assert!(store.has_record_file("s1").unwrap());
        assert!(!store.has_record_file("s2").unwrap());
    }

    #[test]
    fn bad_records_are_reported_and_skipped() {
        let t = tempfile::tempdir().unwrap();
        let store = StateStore::new(t.path().join("state"));
        let plan = plan_up(&SandboxRequest::default(), Path::new("/var/tmp/x"), "good").unwrap();
        store.create(&SandboxRecord::new(&plan)).unwrap();
        std::fs::write(t.path().join("state/x.json"), "{garbage").unwrap();
        let mut other = SandboxRecord::new(&plan);
        other.name = "renamed".into();
        std::fs::write(
            t.path().join("state/y.json"),
            serde_json::to_string(&other).unwrap(),
        )
        .unwrap();
        let mut planted = SandboxRecord::new(&plan);
        planted.name = "planted".into();
        planted.devices.push(DeviceRecord {
            image: "/etc/shadow".into(),
            identity: None,
            loop_device: None,
            diskseq: None,
        });
        std::fs::write(
            t.path().join("state/planted.json"),
            serde_json::to_string(&planted).unwrap(),
        )
        .unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.records.len(), 1);
        assert_eq!(loaded.records[0].name, "good");
        let msgs: Vec<String> = loaded.bad.iter().map(|e| e.message().to_owned()).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        for want in [
            "record 'planted' is not one sandbox up wrote: an image is not DIR/devN.img",
            "x.json is not a sandbox record",
            "y.json describes sandbox 'renamed', not 'y'",
        ] {
            assert!(msgs.iter().any(|m| m.contains(want)), "{want}: {msgs:?}");
        }
    }
}
