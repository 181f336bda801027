//! The sandbox request and its plan: pure code, testable without root.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::profile::Profile;
use crate::parse::size::format_iec;
use crate::sys::tools::display_argv;

/// Which filesystem the sandbox carries.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FsKind {
    /// btrfs over all the devices (the point of the tool).
    #[default]
    Btrfs,
    /// ext4 on one device, for comparisons.
    Ext4,
}

impl FsKind {
    /// The mkfs program for this filesystem.
    pub fn mkfs(self) -> &'static str {
        match self {
            FsKind::Btrfs => "mkfs.btrfs",
            FsKind::Ext4 => "mkfs.ext4",
        }
    }

    /// The Debian package that provides the mkfs program.
    pub fn package(self) -> &'static str {
        match self {
            FsKind::Btrfs => "btrfs-progs",
            FsKind::Ext4 => "e2fsprogs",
        }
    }

    /// The name `mount(2)` wants.
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Btrfs => "btrfs",
            FsKind::Ext4 => "ext4",
        }
    }
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRequest {
    /// Name; a random one when absent.
    pub name: Option<String>,
    /// Number of loop devices.
    pub devices: u32,
    /// Size of each device in bytes (sparse).
    pub size_bytes: u64,
    /// Filesystem.
    pub fs: FsKind,
    /// Data profile (mkfs.btrfs -d), mkfs's default when absent.
    pub data: Option<Profile>,
    /// Metadata profile (mkfs.btrfs -m), mkfs's default when absent.
    pub metadata: Option<Profile>,
    /// Extra mkfs arguments, passed as given.
    pub mkfs_args: Vec<String>,
    /// Directory for the backing files and mount point.
    pub dir: Option<PathBuf>,
}

impl Default for SandboxRequest {
    fn default() -> Self {
        Self {
            name: None,
            devices: 1,
            size_bytes: DEFAULT_SIZE,
            fs: FsKind::Btrfs,
            data: None,
            metadata: None,
            mkfs_args: Vec::new(),
            dir: None,
        }
    }
}

/// Default size of each backing file.
pub(crate) const DEFAULT_SIZE: u64 = 2 << 30;
/// The most devices a sandbox may have.
pub(crate) const MAX_DEVICES: u32 = 16;
/// Smallest device mkfs.btrfs reliably accepts with DUP metadata.
pub(crate) const MIN_BTRFS_SIZE: u64 = 256 << 20;
/// Smallest ext4 device we create.
pub(crate) const MIN_EXT4_SIZE: u64 = 16 << 20;
/// Largest device we create (sparse, but a typo should not make 8 EiB).
pub(crate) const MAX_SIZE: u64 = 64 << 40;

/// The resolved plan for `sandbox up`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxPlan {
    /// Sandbox name.
    pub name: String,
    /// Filesystem.
    pub fs: FsKind,
    /// Directory that holds images and the mount point.
    pub dir: PathBuf,
    /// Backing files, one per device.
    pub images: Vec<PathBuf>,
    /// Size of each device.
    pub size_bytes: u64,
    /// Where it will be mounted.
    pub mount_point: PathBuf,
    /// Requested data profile.
    pub data: Option<Profile>,
    /// Requested metadata profile.
    pub metadata: Option<Profile>,
    /// mkfs arguments, devices excluded.
    pub mkfs_args: Vec<String>,
    /// True when the directory was given (`--dir`): its parent may then be
    /// a sticky shared directory; the default parent must be root's alone.
    #[serde(skip)]
    pub(crate) dir_given: bool,
}

/// Checks a sandbox name: short, lowercase letters, digits, `-` and `_`.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::usage(format!("invalid sandbox name '{name}'"))
            .with_hint("use up to 40 lowercase letters, digits, '-' or '_', starting with a letter or digit"))
    }
}

/// Turns a request into a plan. `data_root` is where sandboxes live by
/// default; `random_name` is used when the request has no name.
pub fn plan_up(req: &SandboxRequest, data_root: &Path, random_name: &str) -> Result<SandboxPlan> {
    let name = req.name.clone().unwrap_or_else(|| random_name.to_owned());
    validate_name(&name)?;
    if req.devices == 0 || req.devices > MAX_DEVICES {
        return Err(Error::usage(format!(
            "--devices must be between 1 and {MAX_DEVICES}, not {}",
            req.devices
        )));
    }
    let min = match req.fs {
        FsKind::Btrfs => MIN_BTRFS_SIZE,
        FsKind::Ext4 => MIN_EXT4_SIZE,
    };
    if req.size_bytes < min {
        return Err(Error::usage(format!(
            "--device-size {} is too small for {}: use at least {}",
            format_iec(req.size_bytes),
            req.fs.name(),
            format_iec(min)
        )));
    }
    if req.size_bytes > MAX_SIZE {
        return Err(Error::usage(format!(
            "--device-size {} is too large: at most {}",
            format_iec(req.size_bytes),
            format_iec(MAX_SIZE)
        )));
    }
    if !req.size_bytes.is_multiple_of(4096) {
        return Err(Error::usage("--device-size must be a multiple of 4KiB"));
    }
    match req.fs {
        FsKind::Ext4 => {
            if req.devices != 1 {
                return Err(Error::usage("an ext4 sandbox has exactly one device")
                    .with_hint("drop --devices"));
            }
            if req.data.is_some() || req.metadata.is_some() {
                return Err(Error::usage(
                    "--data and --metadata are btrfs profiles; ext4 has none",
                ));
            }
        }
        FsKind::Btrfs => {
            for (what, profile) in [("data", req.data), ("metadata", req.metadata)] {
                if let Some(p) = profile
                    && p.min_devices() > req.devices
                {
                    return Err(Error::usage(format!(
                        "{what} profile {p} needs at least {} devices, the sandbox has {}",
                        p.min_devices(),
                        req.devices
                    ))
                    .with_hint(format!("add --devices {}", p.min_devices())));
                }
            }
        }
    }
    let dir = match &req.dir {
        Some(d) => absolute(d)?,
        None => data_root.join(&name),
    };
    let images = (0..req.devices)
        .map(|i| dir.join(format!("dev{i}.img")))
        .collect();
    Ok(SandboxPlan {
        mount_point: dir.join("mnt"),
        name,
        fs: req.fs,
        dir,
        images,
        size_bytes: req.size_bytes,
        data: req.data,
        metadata: req.metadata,
        mkfs_args: req.mkfs_args.clone(),
        dir_given: req.dir.is_some(),
    })
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p)
        .map_err(|e| Error::usage(format!("invalid directory {}: {e}", p.display())))
}

impl SandboxPlan {
    /// mkfs arguments before the device list.
    pub(crate) fn mkfs_arguments(&self) -> Vec<String> {
        let mut args = Vec::new();
        match self.fs {
            FsKind::Btrfs => {
                args.extend([
                    "-q".to_owned(),
                    "-L".to_owned(),
                    format!("btrfs-lab-{}", self.name),
                ]);
                if let Some(d) = self.data {
                    args.extend(["-d".to_owned(), d.name().to_owned()]);
                }
                if let Some(m) = self.metadata {
                    args.extend(["-m".to_owned(), m.name().to_owned()]);
                }
            }
            FsKind::Ext4 => {
                args.extend(["-q".to_owned(), "-L".to_owned(), label_ext4(&self.name)]);
            }
        }
        args.extend(self.mkfs_args.iter().cloned());
        args
    }

    /// The steps, as shown before running them (`--dry-run`). Loop device
    /// names are only known once attached, so they appear as `<loopN>`.
    pub fn describe(&self) -> Vec<String> {
        let mut steps = vec![format!(
            "create directory {} (mode 0700)",
            self.dir.display()
        )];
        for image in &self.images {
            steps.push(format!(
                "create sparse file {} ({})",
                image.display(),
                format_iec(self.size_bytes)
            ));
        }
        for (i, image) in self.images.iter().enumerate() {
            steps.push(format!(
                "attach {} to a free loop device <loop{i}> with direct I/O on",
                image.display()
            ));
        }
        let mut argv = vec![self.fs.mkfs().to_owned()];
        argv.extend(self.mkfs_arguments());
        argv.extend((0..self.images.len()).map(|i| format!("<loop{i}>")));
        steps.push(format!("run: {}", display_argv(&argv)));
        steps.push(format!("mount <loop0> at {}", self.mount_point.display()));
        steps
    }
}

/// ext4 labels hold at most 16 bytes.
fn label_ext4(name: &str) -> String {
    let mut l = format!("bl-{name}");
    l.truncate(16);
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> SandboxRequest {
        SandboxRequest::default()
    }

    #[test]
    fn default_plan() {
        let p = plan_up(&req(), Path::new("/var/tmp/btrfs-lab"), "sbx-1").unwrap();
        assert_eq!(p.name, "sbx-1");
        assert_eq!(p.dir, PathBuf::from("/var/tmp/btrfs-lab/sbx-1"));
        assert_eq!(
            p.images,
            vec![PathBuf::from("/var/tmp/btrfs-lab/sbx-1/dev0.img")]
        );
        assert_eq!(p.mount_point, PathBuf::from("/var/tmp/btrfs-lab/sbx-1/mnt"));
        assert_eq!(p.mkfs_arguments(), vec!["-q", "-L", "btrfs-lab-sbx-1"]);
        let steps = p.describe();
        assert!(
            steps
                .iter()
                .any(|s| s == "run: mkfs.btrfs -q -L btrfs-lab-sbx-1 '<loop0>'"),
            "{steps:?}"
        );
    }

    #[test]
    fn profiles_need_devices() {
        let r = SandboxRequest {
            devices: 2,
            metadata: Some(Profile::Raid1c3),
            ..req()
        };
        let e = plan_up(&r, Path::new("/x"), "n").unwrap_err();
        assert_eq!(
            e.message(),
            "metadata profile raid1c3 needs at least 3 devices, the sandbox has 2"
        );
        let r = SandboxRequest {
            devices: 3,
            data: Some(Profile::Raid0),
            metadata: Some(Profile::Raid1c3),
            mkfs_args: vec!["--nodiscard".into()],
            ..req()
        };
        let p = plan_up(&r, Path::new("/x"), "n").unwrap();
        assert_eq!(p.images.len(), 3);
        assert_eq!(
            p.mkfs_arguments(),
            vec![
                "-q",
                "-L",
                "btrfs-lab-n",
                "-d",
                "raid0",
                "-m",
                "raid1c3",
                "--nodiscard"
            ]
        );
    }

    #[test]
    fn rejects_bad_requests() {
        let cases = [
            SandboxRequest {
                devices: 0,
                ..req()
            },
            SandboxRequest {
                devices: 17,
                ..req()
            },
            SandboxRequest {
                size_bytes: 1 << 20,
                ..req()
            },
            SandboxRequest {
                size_bytes: (1 << 30) + 1,
                ..req()
            },
            SandboxRequest {
                size_bytes: u64::MAX,
                ..req()
            },
            SandboxRequest {
                name: Some("Bad Name".into()),
                ..req()
            },
            SandboxRequest {
                name: Some("../x".into()),
                ..req()
            },
            SandboxRequest {
                fs: FsKind::Ext4,
                devices: 2,
                ..req()
            },
            SandboxRequest {
                fs: FsKind::Ext4,
                data: Some(Profile::Dup),
                ..req()
            },
        ];
        for r in cases {
            let e = plan_up(&r, Path::new("/x"), "n").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{r:?}");
        }
    }

    #[test]
    fn ext4_plan_and_explicit_dir() {
        let r = SandboxRequest {
            fs: FsKind::Ext4,
            name: Some("a-very-long-sandbox-name".into()),
            dir: Some(PathBuf::from("/srv/sbx")),
            ..req()
        };
        let p = plan_up(&r, Path::new("/x"), "n").unwrap();
        assert_eq!(p.dir, PathBuf::from("/srv/sbx"));
        assert_eq!(p.mkfs_arguments(), vec!["-q", "-L", "bl-a-very-long-s"]);
    }
}
