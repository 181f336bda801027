//! Getting a file out of the page cache, and proving it is out.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use nix::errno::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::kernel::memio;

/// Writes back the file's dirty pages (DONTNEED skips dirty ones), then
/// asks the kernel to drop its cached pages.
pub fn evict(file: &File, path: &Path) -> Result<()> {
    match file.sync_data() {
        Ok(()) => {}
        // Nothing can be dirty on a read-only mount; some filesystems have
        // no fsync at all.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EROFS | libc::EINVAL)) => {}
        Err(e) => return Err(Error::from_io(&e, "cannot write back", path)),
    }
    rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot drop the cached pages of", path))
}

/// Bytes of the file's first `size` bytes in the page cache (cachestat,
/// or mincore before Linux 6.5).
pub(crate) fn resident_bytes(file: &File, size: u64, path: &Path) -> Result<u64> {
    memio::resident_bytes(file, size)
        .map_err(|e| Error::from_io(&e, "cannot check the cached pages of", path))
}

/// Reads the file's first `size` bytes through the page cache (1 MiB
/// `pread`s into a scratch buffer), so that its pages become resident:
/// how `read-test` makes a warm cache. Whether they stayed is for
/// [`resident_bytes`] to say.
pub fn load(file: &File, size: u64, path: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        // An 80 GB model takes a while: Ctrl-C must not wait for the end.
        if off.is_multiple_of(64 << 20) {
            crate::sys::kernel::signals::check()?;
        }
        let want = (size - off).min(buf.len() as u64) as usize;
        match file.read_at(&mut buf[..want], off) {
            Ok(0) => break,
            Ok(n) => off += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::from_io(&e, "cannot read", path)),
        }
    }
    Ok(())
}

/// Writes back everything and drops the whole page cache, dentries and
/// inodes (`/proc/sys/vm/drop_caches`). Root only.
pub(crate) fn drop_all_caches() -> Result<()> {
    rustix::fs::sync();
    let p = Path::new("/proc/sys/vm/drop_caches");
    OpenOptions::new()
        .write(true)
        .open(p)
        .and_then(|mut f| f.write_all(b"3\n"))
        .map_err(|e| match e.raw_os_error().map(Errno::from_raw) {
            Some(Errno::EACCES | Errno::EPERM) => Error::new(
                ErrorKind::Permission,
                "--drop-caches needs root: cannot write /proc/sys/vm/drop_caches",
            )
            .with_hint(
                "run as root, or leave out --drop-caches (the file's own pages are still evicted)",
            ),
            _ => Error::from_io(&e, "cannot write", p),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_a_written_file() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 1 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        // Just written: in the page cache.
        assert_eq!(resident_bytes(&f, 1 << 20, &p).unwrap(), 1 << 20);
        evict(&f, &p).unwrap();
        // Nobody else knows this file: nothing stays after the eviction.
        assert_eq!(resident_bytes(&f, 1 << 20, &p).unwrap(), 0);
    }
}
