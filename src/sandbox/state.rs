//! The record of what `sandbox up` made, written before and after every
//! step so `sandbox down` can remove exactly that, even after a crash.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::FsKind;
use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::sys::loopdev::FileIdentity;

/// Environment variable overriding where records are kept.
pub const STATE_DIR_ENV: &str = "BTRFS_LAB_STATE_DIR";
/// Default place for records (survives reboots, like the backing files).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/btrfs-lab/sandboxes";
const VERSION: u32 = 1;

/// One backing file and the loop device it was attached to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// The backing file.
    pub image: PathBuf,
    /// Its identity once created (so a loop device can be proven ours).
    pub identity: Option<FileIdentity>,
    /// The loop device once attached.
    pub loop_device: Option<PathBuf>,
}

/// Everything a sandbox consists of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Mount point.
    pub mount_point: PathBuf,
    /// True if `up` created the mount point directory.
    pub mount_point_created: bool,
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
    pub created_unix: u64,
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
            mount_point: plan.mount_point.clone(),
            mount_point_created: false,
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
        }
    }

    /// The loop devices recorded as attached.
    pub fn loop_devices(&self) -> impl Iterator<Item = &Path> {
        self.devices.iter().filter_map(|d| d.loop_device.as_deref())
    }
}

/// The directory of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    /// A store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$BTRFS_LAB_STATE_DIR`, else the default.
    pub fn from_env() -> Self {
        match std::env::var_os(STATE_DIR_ENV) {
            Some(d) if !d.is_empty() => Self::new(PathBuf::from(d)),
            _ => Self::new(DEFAULT_STATE_DIR),
        }
    }

    /// Where the records are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Claims `record.name`: fails if a record of that name exists.
    pub fn create(&self, record: &SandboxRecord) -> Result<()> {
        fs::create_dir_all(&self.dir)
            .map_err(|e| Error::from_io(&e, "cannot create state directory", &self.dir))?;
        let path = self.path_of(&record.name);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Error::new(ErrorKind::Busy, format!("a sandbox named '{}' already exists", record.name))
                        .with_hint("choose another --name, or remove it with: btrfs-lab sandbox down --yes NAME")
                } else {
                    Error::from_io(&e, "cannot create", &path)
                }
            })?;
        let text = serde_json::to_string_pretty(record).expect("record serializes");
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::from_io(&e, "cannot write", &path))
    }

    /// Replaces the record atomically (write, fsync, rename).
    pub fn save(&self, record: &SandboxRecord) -> Result<()> {
        let path = self.path_of(&record.name);
        let tmp = self.dir.join(format!(".{}.json.tmp", record.name));
        let _ = fs::remove_file(&tmp);
        let text = serde_json::to_string_pretty(record).expect("record serializes");
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| Error::from_io(&e, "cannot create", &tmp))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::from_io(&e, "cannot write", &tmp))?;
        fs::rename(&tmp, &path).map_err(|e| Error::from_io(&e, "cannot replace", &path))
    }

    /// Deletes the record.
    pub fn remove(&self, name: &str) -> Result<()> {
        let path = self.path_of(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::from_io(&e, "cannot remove", &path)),
        }
    }

    /// Every record, sorted by name. A record that cannot be read is an
    /// error: silently skipping it could leak a sandbox.
    pub fn load_all(&self) -> Result<Vec<SandboxRecord>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::from_io(&e, "cannot read", &self.dir)),
        };
        let mut records = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::from_io(&e, "cannot read", &self.dir))?;
            let path = entry.path();
            let is_record = path.extension().is_some_and(|x| x == "json")
                && !entry.file_name().to_string_lossy().starts_with('.');
            if !is_record {
                continue;
            }
            let text =
                fs::read_to_string(&path).map_err(|e| Error::from_io(&e, "cannot read", &path))?;
            let record: SandboxRecord = serde_json::from_str(&text).map_err(|e| {
                Error::new(
                    ErrorKind::State,
                    format!("{} is not a sandbox record: {e}", path.display()),
                )
                .with_hint("inspect it by hand; btrfs-lab will not guess what it describes")
            })?;
            records.push(record);
        }
        records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(records)
    }
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

    #[test]
    fn unreadable_record_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("x.json"), "{garbage").unwrap();
        let e = StateStore::new(t.path()).load_all().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::State);
    }
}
