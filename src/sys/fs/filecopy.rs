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
use crate::sys::kernel::memio::MappedBuffer;

/// Bytes per read and write of a large file ([`chunk_for`]).
pub(crate) const CHUNK: usize = 4 << 20;

/// Bytes per read and write of a file smaller than [`LARGE`]: several such
/// files are migrated at once, each with a few buffers, and for them a
/// smaller buffer was faster too (200 files of 4 MiB, 16 at once: 0.80 s
/// with 1 MiB, 0.94 s with 4 MiB).
const SMALL_CHUNK: usize = 1 << 20;

/// From this size on a file is read and written [`CHUNK`] at a time (a
/// 1 GiB file: copied in 1.07 s with 4 MiB, 1.39 s with 1 MiB), and
/// `nocow --migrate` verifies its copy while making it ([`copy_verified`]).
pub(crate) const LARGE: u64 = 64 << 20;

/// The buffer size for a file of `len` bytes: [`CHUNK`] for a large file,
/// [`SMALL_CHUNK`] or less for a smaller one (one page more than it holds,
/// so one read also sees its end).
fn chunk_for(len: u64) -> usize {
    if len >= LARGE {
        return CHUNK;
    }
    usize::try_from(len.saturating_add(1).next_multiple_of(4096))
        .unwrap_or(SMALL_CHUNK)
        .min(SMALL_CHUNK)
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
        Err(e) => Err(Error::from_errno(e, "cannot create a file in", dir_path)),
    }
}

/// Reads of `file` no longer update its access time (O_NOATIME on the open
/// file description; allowed to the file's owner and to CAP_FOWNER).
pub(crate) fn read_without_atime(file: &File, path: &Path) -> Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)
        .map_err(|e| Error::from_errno(e, "cannot read the descriptor flags of", path))?;
    rustix::fs::fcntl_setfl(file, flags | OFlags::NOATIME)
        .map_err(|e| Error::from_errno(e, "cannot stop access-time updates on", path))
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
    .map_err(|e| Error::from_errno(e, "cannot create a file in", dir_path))?;
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
    result.map_err(|e| Error::from_errno(e, "cannot name a file in", dir_path))
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
            Err(e) => return Err(Error::from_errno(e, "cannot look for data in", path)),
        };
        if start >= len {
            break;
        }
        let end = match seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(len),
            Err(Errno::NXIO) => len,
            Err(e) => return Err(Error::from_errno(e, "cannot look for holes in", path)),
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

fn read_full_at(file: &File, buf: &mut [u8], pos: u64, path: &Path) -> Result<usize> {
    read_direct_at(file, buf, pos, 1, path)
}

/// What [`copy_verified`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verified {
    /// The copy reads back from the disk byte for byte as the original was
    /// read: the data bytes written, and the BLAKE3 of the content.
    Same { copied: u64, hash: blake3::Hash },
    /// The copy reads back differently from this byte offset on.
    DifferAt(u64),
}

/// Chunks of a copy written ahead of the one read back ([`copy_verified`]).
const READ_BACK_LAG: usize = 1;

/// Copies `src` (of `len` bytes, [`LARGE`] or more) into the empty `dst`
/// and verifies the copy while it is made: each chunk of the original is
/// read once (holes too, as zeros), its data regions are written to `dst`
/// with O_DIRECT (holes stay holes; the bytes go to the disk, not the page
/// cache), and right after the chunk is read back from `dst` with O_DIRECT
/// and compared byte for byte with what was read, then hashed (BLAKE3) on a
/// second thread. So a region the filesystem called a hole that held data
/// shows as a difference, as does any byte the disk does not return as
/// written. `intact` is asked after every chunk read whether the original
/// is still unwritten (its lease); an error from it, or from `progress`
/// (bytes written and compared), stops the copy. The original becoming
/// shorter or longer is an error of kind `State`; `dst` refusing O_DIRECT
/// before anything was written one of kind `Unsupported` (the caller copies
/// the other way).
pub(crate) fn copy_verified(
    src: &File,
    src_path: &Path,
    dst: &File,
    dst_path: &Path,
    len: u64,
    intact: &mut dyn FnMut() -> Result<()>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Verified> {
    let block = dio_block(dst);
    let unsupported = || {
        Error::new(
            ErrorKind::Unsupported,
            format!("{} cannot be written with O_DIRECT", dst_path.display()),
        )
    };
    if !(CHUNK as u64).is_multiple_of(block) {
        return Err(unsupported());
    }
    let page = block as usize;
    let _ = fadvise(src, 0, None, Advice::Sequential);
    let regions = data_regions(src, len, src_path)?;
    // The length first: the chunks read back end in holes, not at the end
    // of the file, until the last is written.
    dst.set_len(len)
        .map_err(|e| Error::from_io(&e, "cannot set the length of", dst_path))?;
    if !DirectReads::start(dst) {
        return Err(unsupported());
    }
    let _direct = DirectReads(dst);
    let map = |n| {
        crate::sys::kernel::memio::MappedBuffer::new(n)
            .map_err(|e| Error::from_io(&e, "cannot map a buffer for", dst_path))
    };
    let mut back = map(CHUNK)?;
    let (to_hasher, hasher_in) = std::sync::mpsc::sync_channel::<(MappedBuffer, usize)>(2);
    let (to_reader, spare) = std::sync::mpsc::channel::<MappedBuffer>();
    for _ in 0..READ_BACK_LAG + 3 {
        let _ = to_reader.send(map(CHUNK)?);
    }
    std::thread::scope(|scope| {
        let to_hasher = to_hasher;
        let hashing = spawn_hasher(
            scope,
            hasher_in,
            to_reader,
            MappedBuffer::as_mut_slice,
            src_path,
        )?;
        let stopped = || Error::new(ErrorKind::Io, "the hashing thread stopped");
        type Pending = std::collections::VecDeque<(u64, MappedBuffer, usize)>;
        let mut pending = Pending::new();
        // Reads the oldest pending chunk back and compares it: `Some(at)`
        // where it differs.
        let mut verify_oldest = |pending: &mut Pending,
                                 progress: &mut dyn FnMut(u64) -> Result<()>|
         -> Result<Option<u64>> {
            let Some((pos, mut buf, n)) = pending.pop_front() else {
                return Ok(None);
            };
            let want = n.next_multiple_of(page).min(CHUNK);
            let back = back.as_mut_slice();
            let read = read_direct_at(dst, &mut back[..want], pos, page, dst_path)?;
            let (got, expected) = (&back[..read.min(n)], &buf.as_mut_slice()[..read.min(n)]);
            if got != expected {
                let i = got.iter().zip(expected).position(|(a, b)| a != b);
                return Ok(Some(pos + i.unwrap_or(0) as u64));
            }
            if read < n {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "{} reads back {} bytes, expected {len}",
                        dst_path.display(),
                        pos + read as u64
                    ),
                ));
            }
            progress(2 * n as u64)?;
            to_hasher.send((buf, n)).map_err(|_| stopped())?;
            Ok(None)
        };
        let mut copied = 0u64;
        let mut run = || -> Result<Verified> {
            let mut pos = 0u64;
            let mut next_region = 0;
            while pos < len {
                let Ok(mut held) = spare.recv() else {
                    return Err(stopped());
                };
                let buf = held.as_mut_slice();
                let want = usize::try_from(len - pos).unwrap_or(CHUNK).min(CHUNK);
                let n = read_full_at(src, &mut buf[..want], pos, src_path)?;
                if n < want {
                    return Err(Error::new(
                        ErrorKind::State,
                        format!("{} became shorter while it was copied", src_path.display()),
                    ));
                }
                intact()?;
                // An O_DIRECT write is whole blocks: the tail of the last
                // chunk is padded with zeros (cut off again at the end).
                let padded = n.next_multiple_of(page).min(CHUNK);
                buf[n..padded].fill(0);
                let end = pos + n as u64;
                // The data regions within [pos, end), each widened to whole
                // blocks (btrfs's are already), written; holes skipped.
                while next_region < regions.len() && regions[next_region].1 <= pos {
                    next_region += 1;
                }
                let mut r = next_region;
                let mut wrote = 0u64;
                let mut written_to = pos;
                while r < regions.len() && regions[r].0 < end {
                    let a = (regions[r].0.max(pos) / block * block).max(written_to);
                    let b = regions[r]
                        .1
                        .min(end)
                        .next_multiple_of(block)
                        .min(pos + padded as u64);
                    if a < b {
                        let range = usize::try_from(a - pos).unwrap_or(0)
                            ..usize::try_from(b - pos).unwrap_or(0);
                        if let Err(e) = dst.write_all_at(&buf[range], a) {
                            if e.raw_os_error() == Some(libc::EINVAL) && copied == 0 {
                                return Err(unsupported());
                            }
                            return Err(Error::from_io(&e, "cannot write", dst_path));
                        }
                        wrote += b.min(end) - a;
                        written_to = b;
                    }
                    r += 1;
                }
                copied += wrote;
                progress(wrote)?;
                pending.push_back((pos, held, n));
                pos = end;
                if pending.len() > READ_BACK_LAG
                    && let Some(at) = verify_oldest(&mut pending, progress)?
                {
                    return Ok(Verified::DifferAt(at));
                }
            }
            // Nothing beyond the end either.
            let mut one = [0u8; 1];
            if read_full_at(src, &mut one, len, src_path)? != 0 {
                return Err(Error::new(
                    ErrorKind::State,
                    format!("{} became longer while it was copied", src_path.display()),
                ));
            }
            // The padding of the last block off again.
            dst.set_len(len)
                .map_err(|e| Error::from_io(&e, "cannot set the length of", dst_path))?;
            while !pending.is_empty() {
                if let Some(at) = verify_oldest(&mut pending, progress)? {
                    return Ok(Verified::DifferAt(at));
                }
            }
            Ok(Verified::Same {
                copied,
                hash: blake3::Hash::from_bytes([0; 32]),
            })
        };
        let outcome = run();
        // The hashing thread ends when the last sender is gone (the
        // closures above only borrowed it).
        drop(to_hasher);
        let hash = hashing.join();
        match outcome? {
            Verified::Same { copied, .. } => hash
                .map(|hash| Verified::Same { copied, hash })
                .map_err(|_| Error::new(ErrorKind::Io, "the hashing thread failed")),
            other => Ok(other),
        }
    })
}

/// Starts the thread that hashes (BLAKE3) the first `n` bytes of each
/// buffer `from` sends, in order, and gives each back on `back` to be
/// filled again; it returns the hash once `from` is closed.
fn spawn_hasher<'scope, B: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    from: std::sync::mpsc::Receiver<(B, usize)>,
    back: std::sync::mpsc::Sender<B>,
    bytes: fn(&mut B) -> &mut [u8],
    path: &Path,
) -> Result<std::thread::ScopedJoinHandle<'scope, blake3::Hash>> {
    std::thread::Builder::new()
        .spawn_scoped(scope, move || {
            let mut hasher = blake3::Hasher::new();
            for (mut buf, n) in from {
                hasher.update(&bytes(&mut buf)[..n]);
                // The reader may have stopped (an error): nothing to return.
                let _ = back.send(buf);
            }
            hasher.finalize()
        })
        .map_err(|e| Error::from_io(&e, "cannot start the thread that hashes", path))
}

/// A buffer [`compare_contents`] reads the copy into: page-aligned
/// (mapped) for O_DIRECT reads.
enum Buffer {
    Heap(Vec<u8>),
    Mapped(MappedBuffer),
}

impl Buffer {
    fn new(len: usize, aligned: bool) -> Result<Self> {
        if aligned {
            crate::sys::kernel::memio::MappedBuffer::new(len)
                .map(Buffer::Mapped)
                .map_err(|e| Error::from_io(&e, "cannot map a buffer for", Path::new("the copy")))
        } else {
            Ok(Buffer::Heap(vec![0u8; len]))
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Buffer::Heap(v) => v,
            Buffer::Mapped(m) => m.as_mut_slice(),
        }
    }
}

/// O_DIRECT on a file's open description while it is read back, taken off
/// again when dropped.
struct DirectReads<'a>(&'a File);

impl DirectReads<'_> {
    /// Sets O_DIRECT on `file`; false where it cannot be (the reads then
    /// go through the page cache).
    fn start(file: &File) -> bool {
        rustix::fs::fcntl_getfl(file)
            .and_then(|f| rustix::fs::fcntl_setfl(file, f | OFlags::DIRECT))
            .is_ok()
    }

    /// Takes O_DIRECT off `file` again.
    fn stop(file: &File) {
        if let Ok(f) = rustix::fs::fcntl_getfl(file) {
            let _ = rustix::fs::fcntl_setfl(file, f - OFlags::DIRECT);
        }
    }
}

impl Drop for DirectReads<'_> {
    fn drop(&mut self) {
        Self::stop(self.0);
    }
}

/// The unit of O_DIRECT offsets and lengths on `file`'s filesystem: its
/// block size (btrfs: the sector size; statx's STATX_DIOALIGN says nothing
/// there), at least 4 KiB.
fn dio_block(file: &File) -> u64 {
    rustix::fs::fstatvfs(file)
        .map(|v| v.f_bsize)
        .unwrap_or(4096)
        .max(4096)
}

/// Reads `buf` full from `pos` on, or up to the end of the file: the bytes
/// read. With O_DIRECT (an aligned buffer at an aligned `pos`), a read that
/// ends short of a `block` boundary is the end of the file (another read
/// from there would not be aligned); `block` 1 for any other file.
fn read_direct_at(
    file: &File,
    buf: &mut [u8],
    mut pos: u64,
    block: usize,
    path: &Path,
) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], pos) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                pos += n as u64;
                if n % block != 0 {
                    break;
                }
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
    // A large copy is read back with O_DIRECT: from the disk by
    // construction, at the device's rate, without filling the page cache
    // (the cached pages were dropped all the same, for what btrfs reads
    // through the cache even then: inline extents).
    let block = usize::try_from(dio_block(copy)).unwrap_or(CHUNK);
    let direct = len >= LARGE && CHUNK.is_multiple_of(block) && DirectReads::start(copy);
    let _direct = direct.then_some(DirectReads(copy));
    // Chunks of the copy go to the hashing thread and come back to be
    // filled again: three in all (page-aligned when read with O_DIRECT).
    let (to_hasher, hasher_in) = std::sync::mpsc::sync_channel::<(Buffer, usize)>(2);
    let (to_reader, spare) = std::sync::mpsc::channel::<Buffer>();
    for _ in 0..3 {
        let _ = to_reader.send(Buffer::new(chunk, direct)?);
    }
    std::thread::scope(|scope| {
        let hashing = spawn_hasher(scope, hasher_in, to_reader, Buffer::bytes, copy_path)?;
        let stopped = || Error::new(ErrorKind::Io, "the hashing thread stopped");
        let mut other = vec![0u8; chunk];
        let mut pos = 0u64;
        // Where each ended, when it did: (copy, original).
        let outcome = loop {
            let Ok(mut held) = spare.recv() else {
                break Err(stopped());
            };
            let buf = held.bytes();
            let read = if direct {
                read_direct_at(copy, buf, pos, block, copy_path)
            } else {
                read_full_at(copy, buf, pos, copy_path)
            };
            let n = match read {
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            let m = match read_full_at(original, &mut other, pos, original_path) {
                Ok(m) => m,
                Err(e) => break Err(e),
            };
            let both = n.min(m);
            // memcmp first; the byte that differs only when one does.
            if buf[..both] != other[..both]
                && let Some(i) = buf[..both]
                    .iter()
                    .zip(&other[..both])
                    .position(|(a, b)| a != b)
            {
                break Ok(Err(pos + i as u64));
            }
            if let Err(e) = progress(2 * both as u64) {
                break Err(e);
            }
            if to_hasher.send((held, both)).is_err() {
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

    /// A large sparse file of a length that is not a whole page: verified
    /// while copied, holes kept, the same content and BLAKE3; a lease that
    /// breaks stops it.
    #[test]
    fn a_large_copy_is_verified_as_it_is_made_and_keeps_holes() {
        let t = scratch();
        let src_path = t.path().join("src");
        let src = File::create(&src_path).unwrap();
        let len: u64 = LARGE + (3 << 20) + 12345;
        src.set_len(len).unwrap();
        let data: Vec<u8> = (0..(CHUNK + 5000)).map(|i| (i * 7 % 251) as u8).collect();
        src.write_all_at(&data, 1 << 20).unwrap();
        src.write_all_at(&data[..20_000], len - 20_000).unwrap();
        src.sync_all().unwrap();
        let src = File::open(&src_path).unwrap();
        let dir = File::open(t.path()).unwrap();
        let new_copy = || {
            create_unnamed(&dir, t.path())
                .unwrap()
                .expect("O_TMPFILE on /var/tmp")
        };
        let dst = new_copy();
        let dst_path = t.path().join("dst");
        let mut seen = 0;
        let verified = match copy_verified(
            &src,
            &src_path,
            &dst,
            &dst_path,
            len,
            &mut || Ok(()),
            &mut |n| {
                seen += n;
                Ok(())
            },
        ) {
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                eprintln!("no O_DIRECT on /var/tmp: skipped");
                return;
            }
            other => other.unwrap(),
        };
        let Verified::Same { copied, hash } = verified else {
            panic!("{verified:?}");
        };
        assert!(copied >= (CHUNK + 5000 + 20_000) as u64, "{copied}");
        assert!(
            copied < len / 4,
            "copied {copied} of {len}: holes were filled"
        );
        // Data written once, each byte compared on both sides once.
        assert_eq!(seen, copied + 2 * len);
        assert_eq!(dst.metadata().unwrap().len(), len);
        assert!(dst.metadata().unwrap().blocks() * 512 < len / 4);
        let want = hash_contents(&src, &src_path, len, &mut |_| Ok(())).unwrap();
        assert_eq!(hash, want);
        drop_cached_pages(&dst);
        assert_eq!(
            hash_contents(&dst, &dst_path, len, &mut |_| Ok(())).unwrap(),
            want
        );

        // The original's lease broken after the third chunk: stopped, with
        // that error.
        let dst = new_copy();
        let mut chunks = 0;
        let e = copy_verified(
            &src,
            &src_path,
            &dst,
            &dst_path,
            len,
            &mut || {
                chunks += 1;
                if chunks > 3 {
                    Err(Error::new(ErrorKind::Busy, "opened for writing"))
                } else {
                    Ok(())
                }
            },
            &mut |_| Ok(()),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert_eq!(chunks, 4);
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
