//! O_DIRECT files and the aligned memory they need.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, ErrorKind, Result};

/// A heap buffer whose start is aligned for O_DIRECT. Built from an
/// over-sized `Vec`, so no unsafe allocation is needed.
pub(crate) struct AlignedBuffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuffer {
    /// `len` bytes starting at a multiple of `align` (a power of two).
    pub fn new(len: usize, align: usize) -> Self {
        assert!(align.is_power_of_two());
        let storage = vec![0u8; len + align];
        let offset = storage.as_ptr().align_offset(align);
        Self {
            storage,
            offset,
            len,
        }
    }

    /// Fills the buffer with pseudo-random bytes (xorshift64*) so neither
    /// compression nor zero detection can shrink the write; touching every
    /// byte also faults every page in before any timing starts.
    pub(crate) fn fill_random(&mut self, seed: u64) {
        let mut x = seed | 1;
        for chunk in self.as_mut_slice().chunks_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// The aligned bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }

    /// The aligned bytes, mutable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

/// Creates the new file `name` in the open directory `dir` for O_DIRECT
/// writing, as [`create_direct`] does, relative to the descriptor: a
/// directory swapped for a link after it was opened cannot redirect it.
/// `shown` names the file in messages.
pub(crate) fn create_direct_at(dir: &File, name: &str, shown: &Path) -> Result<File> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::DIRECT
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map(File::from)
    .map_err(|e| create_error(&std::io::Error::from(e), shown))
}

fn create_error(e: &std::io::Error, path: &Path) -> Error {
    if e.raw_os_error() == Some(libc::EINVAL) {
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "O_DIRECT is not supported by the filesystem of {}",
                parent_or_self(path)
            ),
        )
        .with_hint("probe a directory on a disk filesystem (btrfs, ext4, xfs)")
    } else {
        Error::from_io(
            e,
            "cannot create a test file in",
            Path::new(&parent_or_self(path)),
        )
    }
}

fn parent_or_self(path: &Path) -> String {
    path.parent().unwrap_or(path).display().to_string()
}

/// Writes all of `buf` at `offset`, continuing after short writes.
pub fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64, path: &Path) -> Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, offset) {
            Ok(0) => {
                return Err(Error::new(
                    ErrorKind::NoSpace,
                    format!("short write to {}", path.display()),
                ));
            }
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::from_io(&e, "cannot write", path)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_aligned_and_filled() {
        for align in [512, 4096, 65536] {
            let mut b = AlignedBuffer::new(10_000, align);
            assert_eq!(b.as_slice().as_ptr() as usize % align, 0);
            assert_eq!(b.as_slice().len(), 10_000);
            b.fill_random(7);
            let zeros = b.as_slice().iter().filter(|&&x| x == 0).count();
            assert!(zeros < 200, "random fill has {zeros} zero bytes");
        }
    }
}
