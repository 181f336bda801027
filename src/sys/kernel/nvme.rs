//! The NVMe admin passthrough ioctl (`NVME_IOCTL_ADMIN_CMD` on the
//! controller's character device, `/dev/nvmeN`), used for Get Log Page.
//! The kernel allows Get Log Page only with CAP_SYS_ADMIN.
//!
//! One of the two modules of the crate allowed to use `unsafe`, for the one
//! ioctl: the struct layout, the request number and the safe wrapper stay
//! together, as in [`crate::sys::kernel::ioctl`].
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use nix::errno::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::parse::nvme_smart::{SMART_LOG_ID, SMART_LOG_LEN};

/// `struct nvme_passthru_cmd` (alias `nvme_admin_cmd`) from
/// <linux/nvme_ioctl.h>.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NvmePassthruCmd {
    pub(crate) opcode: u8,
    pub flags: u8,
    pub(crate) rsvd1: u16,
    pub(crate) nsid: u32,
    pub(crate) cdw2: u32,
    pub(crate) cdw3: u32,
    pub metadata: u64,
    pub(crate) addr: u64,
    pub(crate) metadata_len: u32,
    pub(crate) data_len: u32,
    pub(crate) cdw10: u32,
    pub(crate) cdw11: u32,
    pub(crate) cdw12: u32,
    pub(crate) cdw13: u32,
    pub(crate) cdw14: u32,
    pub(crate) cdw15: u32,
    pub(crate) timeout_ms: u32,
    pub result: u32,
}

/// Admin opcode Get Log Page.
pub(crate) const NVME_ADMIN_GET_LOG_PAGE: u8 = 0x02;
/// The namespace id that asks for the controller-wide log.
pub(crate) const NVME_NSID_ALL: u32 = 0xffff_ffff;

// NVME_IOCTL_ADMIN_CMD = _IOWR('N', 0x41, struct nvme_admin_cmd)
nix::ioctl_readwrite!(nvme_admin_cmd_raw, b'N', 0x41, NvmePassthruCmd);

/// Why an admin command failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminError {
    /// The ioctl itself failed.
    Errno(Errno),
    /// The controller completed the command with this NVMe status.
    Status(u32),
}

/// Command dword 10 of Get Log Page: the log id in bits 7:0 and the
/// number of dwords minus one (lower 16 bits) in bits 31:16.
pub(crate) fn get_log_page_cdw10(log_id: u8, len: usize) -> u32 {
    let dwords = u32::try_from(len / 4).unwrap_or(u32::MAX).max(1) - 1;
    ((dwords & 0xffff) << 16) | u32::from(log_id)
}

/// Get Log Page into `buf` (whose length is a multiple of 4 and at most
/// 256 KiB), controller-wide.
pub(crate) fn get_log_page(
    fd: BorrowedFd<'_>,
    log_id: u8,
    buf: &mut [u8],
) -> Result<(), AdminError> {
    if buf.is_empty() || !buf.len().is_multiple_of(4) || buf.len() > (256 << 10) {
        return Err(AdminError::Errno(Errno::EINVAL));
    }
    let len = u32::try_from(buf.len()).map_err(|_| AdminError::Errno(Errno::EINVAL))?;
    let dwords = (len / 4) - 1;
    let mut cmd = NvmePassthruCmd {
        opcode: NVME_ADMIN_GET_LOG_PAGE,
        nsid: NVME_NSID_ALL,
        addr: buf.as_mut_ptr() as u64,
        data_len: len,
        cdw10: get_log_page_cdw10(log_id, buf.len()),
        cdw11: dwords >> 16,
        ..NvmePassthruCmd::default()
    };
    // SAFETY: `cmd` is a valid nvme_passthru_cmd; `addr`/`data_len` describe
    // `buf`, which is writable and outlives the call; the kernel writes at
    // most `data_len` bytes there.
    let status =
        unsafe { nvme_admin_cmd_raw(fd.as_raw_fd(), &mut cmd) }.map_err(AdminError::Errno)?;
    match u32::try_from(status) {
        Ok(0) => Ok(()),
        Ok(s) => Err(AdminError::Status(s)),
        Err(_) => Err(AdminError::Errno(Errno::EIO)),
    }
}

/// Opens a controller's character device read-only, refusing symlinks and
/// anything that is not a character device.
pub(crate) fn open_controller(dev: &Path) -> Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(dev)
        .map_err(|e| Error::from_io(&e, "cannot open", dev))?;
    let meta = f
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", dev))?;
    if !meta.file_type().is_char_device() {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not an NVMe controller device", dev.display()),
        ));
    }
    Ok(f)
}

/// Reads the SMART / Health log page of the controller at `dev`
/// (`/dev/nvme0`).
pub(crate) fn read_smart_log(dev: &Path) -> Result<[u8; SMART_LOG_LEN]> {
    let f = open_controller(dev)?;
    let mut page = [0u8; SMART_LOG_LEN];
    use std::os::fd::AsFd;
    get_log_page(f.as_fd(), SMART_LOG_ID, &mut page).map_err(|e| match e {
        AdminError::Errno(Errno::EPERM | Errno::EACCES) => Error::new(
            ErrorKind::Permission,
            format!(
                "cannot read the SMART log of {}: the NVMe admin ioctl needs root (CAP_SYS_ADMIN)",
                dev.display()
            ),
        )
        .with_hint("run as root, or leave out --thermal"),
        AdminError::Errno(errno) => Error::from_errno(errno, "cannot read the SMART log of", dev),
        AdminError::Status(s) => Error::new(
            ErrorKind::Io,
            format!(
                "{} refused Get Log Page for the SMART log (NVMe status {s:#x})",
                dev.display()
            ),
        ),
    })?;
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layout_and_request_number_match_the_kernel() {
        assert_eq!(std::mem::size_of::<NvmePassthruCmd>(), 72);
        assert_eq!(std::mem::offset_of!(NvmePassthruCmd, addr), 24);
        assert_eq!(std::mem::offset_of!(NvmePassthruCmd, data_len), 36);
        assert_eq!(std::mem::offset_of!(NvmePassthruCmd, cdw10), 40);
        assert_eq!(std::mem::offset_of!(NvmePassthruCmd, result), 68);
        // _IOWR('N', 0x41, 72 bytes) = 0xC0484E41, as nvme-cli uses.
        let request =
            nix::request_code_readwrite!(b'N', 0x41, std::mem::size_of::<NvmePassthruCmd>());
        assert_eq!(request as u64, 0xC048_4E41);
    }

    #[test]
    fn get_log_page_dword10() {
        // 512 bytes = 128 dwords: NUMDL 127, log id 2.
        assert_eq!(get_log_page_cdw10(0x02, 512), 0x007f_0002);
        assert_eq!(get_log_page_cdw10(0x01, 4), 0x0000_0001);
    }

    #[test]
    fn refuses_what_is_not_a_controller() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("plain");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(
            read_smart_log(&f).unwrap_err().kind(),
            ErrorKind::WrongTarget
        );
        assert_eq!(
            read_smart_log(&t.path().join("missing"))
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
        std::os::unix::fs::symlink("/dev/null", t.path().join("link")).unwrap();
        assert_eq!(
            read_smart_log(&t.path().join("link")).unwrap_err().kind(),
            ErrorKind::WrongTarget
        );
        // A character device that is not NVMe: the ioctl is refused.
        let e = read_smart_log(Path::new("/dev/null")).unwrap_err();
        assert_ne!(e.kind(), ErrorKind::WrongTarget, "{}", e.message());
    }
}
