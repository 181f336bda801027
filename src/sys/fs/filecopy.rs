//! The file operations a safe in-place migration is built from: unnamed
//! temporary files (O_TMPFILE) that get a name only when complete, a copy
//! that keeps holes (SEEK_DATA/SEEK_HOLE), content hashes read back from the
//! disk, and durable names (fsync of file and directory).

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{Advice, AtFlags, CWD, Mode, OFlags, SeekFrom, fadvise, linkat, openat, seek};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::kernel::errno::to_error;

/// Bytes per read and write.
pub(crate) const CHUNK: usize = 1 << 20;

/// The buffer size for a file of `len` bytes: [`CHUNK`], or less for a
/// smaller file (one page more than it holds, so one read also sees its
/// end). Several files are migrated at once, each with a few buffers.
fn chunk_for(len: u64) -> usize {
    usize::try_from(len.saturating_add(1).next_multiple_of(4096))
        .unwrap_or(CHUNK)
        .min(CHUNK)
}

/// Creates an unnamed regular file in `dir` (O_TMPFILE, mode 0600): if the
/// process dies, the kernel frees it; nothing is left to clean up. `None`
/// when the filesystem cannot do it.
pub(crate) fn create_unnamed(dir: &File, dir_path: &Path) -> Result<Option<File>> {
    match openat(
        dir.as_fd(),
        ".",
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => Ok(None),
        Err(e) => Err(to_error(e, "cannot create a file in", dir_path)),
    }
}

/// Reads of `file` no longer update its access time (O_NOATIME on the open
/// file description; allowed to the file's owner and to CAP_FOWNER).
pub(crate) fn read_without_atime(file: &File, path: &Path) -> Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)
        .map_err(|e| to_error(e, "cannot read the descriptor flags of", path))?;
    rustix::fs::fcntl_setfl(file, flags | OFlags::NOATIME)
        .map_err(|e| to_error(e, "cannot stop access-time updates on", path))
}

/// Creates `name` in `dir`, failing if anything of that name exists (a
/// symbolic link included), mode 0600.
/// (nocow no longer names a copy before it carries its marker: only the
/// tests use it.)
#[cfg(test)]
pub(crate) fn create_exclusive(dir: &File, dir_path: &Path, name: &str) -> Result<File> {
    let fd = openat(
        dir.as_fd(),
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| to_error(e, "cannot create a file in", dir_path))?;
    Ok(File::from(fd))
}

/// Gives the unnamed file `file` the name `name` in `dir` (never replacing
/// anything).
pub(crate) fn link_into(file: &File, dir: &File, dir_path: &Path, name: &str) -> Result<()> {
    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd works for anyone.
    let direct = linkat(file.as_fd(), "", dir.as_fd(), name, AtFlags::EMPTY_PATH);
    let result = match direct {
        Err(Errno::NOENT | Errno::PERM | Errno::INVAL) => {
            let via_proc = format!("/proc/self/fd/{}", file.as_raw_fd());
            linkat(
                CWD,
                via_proc.as_str(),
                dir.as_fd(),
                name,
                AtFlags::SYMLINK_FOLLOW,
            )
        }
        other => other,
    };
    result.map_err(|e| to_error(e, "cannot name a file in", dir_path))
}

/// fsync, with the path in the error.
pub fn sync(file: &File, path: &Path) -> Result<()> {
    file.sync_all()
        .map_err(|e| Error::from_io(&e, "cannot flush to disk", path))
}

/// Drops the file's clean cached pages, so the next read comes from the disk.
pub(crate) fn drop_cached_pages(file: &File) {
    let _ = fadvise(file, 0, None, Advice::DontNeed);
}

/// The data regions of `file` below `len`, as (start, end): what SEEK_DATA
/// and SEEK_HOLE report. A filesystem without them gives one region.
pub(crate) fn data_regions(file: &File, len: u64, path: &Path) -> Result<Vec<(u64, u64)>> {
    let mut regions = Vec::new();
    let mut pos: u64 = 0;
    while pos < len {
        if i64::try_from(pos).is_err() {
            return Err(Error::new(ErrorKind::Io, "file too large"));
        }
        let start = match seek(file, SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(Errno::NXIO) => break,
            Err(Errno::INVAL) if regions.is_empty() => return Ok(vec![(0, len)]),
            Err(e) => return Err(to_error(e, "cannot look for data in", path)),
        };
        if start >= len {
            break;
        }
        let end = match seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(len),
            Err(Errno::NXIO) => len,
            Err(e) => return Err(to_error(e, "cannot look for holes in", path)),
        };
        if end <= start {
            break;
        }
        regions.push((start, end));
        pos = end;
    }
    Ok(regions)
}

/// Copies the data regions of `src` (of `len` bytes) to the same offsets of
/// the empty `dst`, so holes stay holes, and sets `dst`'s length. Returns the
/// bytes copied. `progress` is called after each chunk with its size; an
/// error from it stops the copy. copy_file_range is not used on purpose: on
/// btrfs it clones extents, which a NOCOW file would share with the original.
pub(crate) fn copy_data(
    src: &File,
    src_path: &Path,
    dst: &File,
    dst_path: &Path,
    len: u64,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<u64> {
    let _ = fadvise(src, 0, None, Advice::Sequential);
    let mut buf = vec![0u8; chunk_for(len)];
    let mut copied = 0u64;
    for (start, end) in data_regions(src, len, src_path)? {
        let mut pos = start;
        while pos < end {
            let want = usize::try_from(end - pos)
                .unwrap_or(buf.len())
                .min(buf.len());
            let n = read_full_at(src, &mut buf[..want], pos, src_path)?;
            if n < want {
                return Err(Error::new(
                    ErrorKind::State,
                    format!("{} became shorter while it was copied", src_path.display()),
                ));
            }
            dst.write_all_at(&buf[..n], pos)
                .map_err(|e| Error::from_io(&e, "cannot write", dst_path))?;
            pos += n as u64;
            copied += n as u64;
            progress(n as u64)?;
        }
    }
    dst.set_len(len)
        .map_err(|e| Error::from_io(&e, "cannot set the length of", dst_path))?;
    Ok(copied)
}

fn read_full_at(file: &File, buf: &mut [u8], mut pos: u64, path: &Path) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], pos) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                pos += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::from_io(&e, "cannot read", path)),
        }
    }
    Ok(done)
}

/// What [`compare_contents`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compared {
    /// Byte for byte the same; the BLAKE3 of that content.
    Same(blake3::Hash),
    /// Different from this byte offset on (at most `len` bytes compared).
    DifferAt(u64),
}

/// Compares the whole content of `copy` and `original` byte for byte (holes
/// read as zeros), both of which must be exactly `len` bytes long, and
/// hashes it (BLAKE3) on a second thread while the next chunks are read.
/// An `original` of another length is an error of kind `State` (it
/// changed); a `copy` of another length one of kind `Io`. `progress` gets
/// the bytes read from both.
pub(crate) fn compare_contents(
    copy: &File,
    copy_path: &Path,
    original: &File,
    original_path: &Path,
    len: u64,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Compared> {
    let _ = fadvise(copy, 0, None, Advice::Sequential);
    let chunk = chunk_for(len);
    // Chunks of the copy go to the hashing thread and come back to be
    // filled again: three in all.
    let (to_hasher, hasher_in) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(2);
    let (to_reader, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..3 {
        let _ = to_reader.send(vec![0u8; chunk]);
    }
    std::thread::scope(|scope| {
        let hashing = scope.spawn(move || {
            let mut hasher = blake3::Hasher::new();
            for (buf, n) in hasher_in {
                hasher.update(&buf[..n]);
                // The reader may have stopped (an error): nothing to return.
                let _ = to_reader.send(buf);
            }
            hasher.finalize()
        });
        let stopped = || Error::new(ErrorKind::Io, "the hashing thread stopped");
        let mut other = vec![0u8; chunk];
        let mut pos = 0u64;
        // Where each ended, when it did: (copy, original).
        let outcome = loop {
            let Ok(mut buf) = spare.recv() else {
                break Err(stopped());
            };
            let n = match read_full_at(copy, &mut buf, pos, copy_path) {
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            let m = match read_full_at(original, &mut other, pos, original_path) {
                Ok(m) => m,
                Err(e) => break Err(e),
            };
            let both = n.min(m);
            if let Some(i) = buf[..both]
                .iter()
                .zip(&other[..both])
                .position(|(a, b)| a != b)
            {
                break Ok(Err(pos + i as u64));
            }
            if let Err(e) = progress(2 * both as u64) {
                break Err(e);
            }
            if to_hasher.send((buf, both)).is_err() {
                break Err(stopped());
            }
            let ends = (
                (n < chunk).then_some(pos + n as u64),
                (m < chunk).then_some(pos + m as u64),
            );
            pos += both as u64;
            if ends != (None, None) {
                break Ok(Ok(ends));
            }
        };
        drop(to_hasher);
        let hash = hashing.join();
        let (copy_end, original_end) = match outcome? {
            Err(at) => return Ok(Compared::DifferAt(at)),
            Ok(ends) => ends,
        };
        // Not ended: longer than what was compared, as long as it says.
        let size_of = |f: &File, p: &Path| -> Result<u64> {
            f.metadata()
                .map(|m| m.len())
                .map_err(|e| Error::from_io(&e, "cannot stat", p))
        };
        let original_end = match original_end {
            Some(e) => e,
            None => size_of(original, original_path)?.max(pos + 1),
        };
        if original_end != len {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} holds {original_end} bytes, expected {len}: it changed while it was copied",
                    original_path.display()
                ),
            ));
        }
        if copy_end != Some(len) {
            let holds = match copy_end {
                Some(e) => e,
                None => size_of(copy, copy_path)?.max(pos + 1),
            };
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{} reads back {holds} bytes, expected {len}",
                    copy_path.display()
                ),
            ));
        }
        hash.map(Compared::Same)
            .map_err(|_| Error::new(ErrorKind::Io, "the hashing thread failed"))
    })
}

/// BLAKE3 of the whole content of `file` (holes read as zeros), which must
/// be exactly `len` bytes long.
#[cfg(test)]
pub(crate) fn hash_contents(
    file: &File,
    path: &Path,
    len: u64,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut pos = 0u64;
    loop {
        let n = read_full_at(file, &mut buf, pos, path)?;
        hasher.update(&buf[..n]);
        pos += n as u64;
        progress(n as u64)?;
        if n < buf.len() {
            break;
        }
    }
    if pos != len {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} holds {pos} bytes, expected {len}: it changed while it was copied",
                path.display()
            ),
        ));
    }
    Ok(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir_in("/var/tmp").unwrap()
    }

    #[test]
    fn copy_keeps_holes_and_content() {
        let t = scratch();
        let src_path = t.path().join("src");
        let src = File::create(&src_path).unwrap();
        let len: u64 = 64 << 20;
        src.set_len(len).unwrap();
        src.write_all_at(&[7u8; 8192], 1 << 20).unwrap();
        src.write_all_at(b"tail", len - 4).unwrap();
        src.sync_all().unwrap();
        let src = File::open(&src_path).unwrap();
        let dir = File::open(t.path()).unwrap();
        let dst = create_unnamed(&dir, t.path())
            .unwrap()
            .unwrap_or_else(|| create_exclusive(&dir, t.path(), "dst").unwrap());
        let dst_path = t.path().join("dst");
        let mut seen = 0;
        let copied = copy_data(&src, &src_path, &dst, &dst_path, len, &mut |n| {
            seen += n;
            Ok(())
        })
        .unwrap();
        assert_eq!(copied, seen);
        assert!(
            copied < len / 4,
            "copied {copied} of {len}: holes were filled"
        );
        sync(&dst, &dst_path).unwrap();
        assert_eq!(dst.metadata().unwrap().len(), len);
        assert!(dst.metadata().unwrap().blocks() * 512 < len / 4);
        let h1 = hash_contents(&src, &src_path, len, &mut |_| Ok(())).unwrap();
        drop_cached_pages(&dst);
        let h2 = hash_contents(&dst, &dst_path, len, &mut |_| Ok(())).unwrap();
        assert_eq!(h1, h2);
        let e = hash_contents(&dst, &dst_path, len + 1, &mut |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::State);
        link_into(&dst, &dir, t.path(), "named").unwrap_or(());
    }

    #[test]
    fn compare_finds_the_first_difference_and_a_wrong_length() {
        let t = scratch();
        let len = CHUNK * 2 + 12345;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let write = |name: &str, bytes: &[u8]| {
            let p = t.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            (File::open(&p).unwrap(), p)
        };
        let (a, ap) = write("a", &data);
        let (b, bp) = write("b", &data);
        let mut seen = 0;
        let got = compare_contents(&a, &ap, &b, &bp, len as u64, &mut |n| {
            seen += n;
            Ok(())
        })
        .unwrap();
        let want = hash_contents(&b, &bp, len as u64, &mut |_| Ok(())).unwrap();
        assert_eq!(got, Compared::Same(want));
        assert_eq!(seen, 2 * len as u64);
        let mut other = data.clone();
        other[CHUNK + 5] ^= 1;
        let (c, cp) = write("c", &other);
        let got = compare_contents(&a, &ap, &c, &cp, len as u64, &mut |_| Ok(())).unwrap();
        assert_eq!(got, Compared::DifferAt((CHUNK + 5) as u64));
        // The original longer (or shorter) than planned: it changed.
        let (d, dp) = write("d", &[&data[..], b"more"].concat());
        let e = compare_contents(&a, &ap, &d, &dp, len as u64, &mut |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::State);
        let (f, fp) = write("f", &data[..CHUNK]);
        let e = compare_contents(&a, &ap, &f, &fp, len as u64, &mut |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::State);
        // The copy short: an I/O error, not a change of the original.
        let e = compare_contents(&f, &fp, &a, &ap, len as u64, &mut |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        // An error from progress stops it.
        let e = compare_contents(&a, &ap, &b, &bp, len as u64, &mut |_| {
            Err(Error::interrupted())
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted);
    }

    #[test]
    fn progress_errors_stop_the_copy() {
        let t = scratch();
        let src_path = t.path().join("src");
        std::fs::write(&src_path, vec![1u8; CHUNK * 2]).unwrap();
        let src = File::open(&src_path).unwrap();
        let dir = File::open(t.path()).unwrap();
        let dst = create_exclusive(&dir, t.path(), "dst").unwrap();
        let e = copy_data(
            &src,
            &src_path,
            &dst,
            t.path(),
            (CHUNK * 2) as u64,
            &mut |_| Err(Error::interrupted()),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted);
        assert_eq!(
            create_exclusive(&dir, t.path(), "dst").unwrap_err().kind(),
            ErrorKind::Io
        );
    }
}
