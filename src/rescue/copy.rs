//! Reading a file with every byte checked by btrfs (a read that returns EIO
//! is a range that cannot be read, never data), and writing what was read
//! into the target directory: an anonymous `O_TMPFILE` (or, where the
//! target has none, a temporary name removed on every path that runs)
//! linked under its name only once it is complete and synced.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::rescue::classify::Ranges;
use crate::rescue::verify::{Check, Csums};
pub(crate) use crate::sys::fs::rescue::SECTOR;
use crate::sys::fs::rescue::{Got, NewFile, Reader, next_data};
use crate::sys::kernel::direct_io::AlignedBuffer;
use crate::sys::kernel::extents::Extent;

/// Bytes per read.
const BLOCK: u64 = 1 << 20;

/// What reading a file found.
#[derive(Debug, Default)]
pub(crate) struct ReadOutcome {
    /// Ranges that returned EIO.
    pub bad: Ranges,
    /// Bytes read successfully.
    pub read_bytes: u64,
    /// The content hash of what was written ([`ContentHash`]; zeros where
    /// nothing could be read, and in holes).
    pub hash: String,
    /// Bytes in holes of the source (never read).
    pub holes: u64,
    /// Reading stopped at the first unreadable byte (not `keep_going`).
    pub stopped_early: bool,
    /// Bytes read without error that did not match btrfs' checksums
    /// (rescue's own check; they are in `bad` too).
    pub mismatched: u64,
    /// Bytes read and checked by rescue against the checksum tree.
    pub verified: u64,
    /// Bytes read that only the kernel could check (compressed, inline,
    /// without checksums, or no checksum check here).
    pub unchecked: u64,
}

/// The hash of a copy's content that never needs a hole read: blake3 over
/// the content in [`BLOCK`]s, where each block that holds data is hashed
/// as its length and bytes, and a run of all-zero blocks (holes, or
/// zeros) as its length only. It depends only on the content.
pub struct ContentHash {
    hasher: blake3::Hasher,
    zeros: u64,
}

impl Default for ContentHash {
    fn default() -> Self {
        Self::new()
    }
}

impl ContentHash {
    /// An empty hash.
    pub fn new() -> Self {
        ContentHash {
            hasher: blake3::Hasher::new(),
            zeros: 0,
        }
    }

    /// `n` zero bytes (whole blocks, or the file's tail).
    fn zeros(&mut self, n: u64) {
        self.zeros += n;
    }

    fn flush(&mut self) {
        if self.zeros > 0 {
            self.hasher.update(b"Z");
            self.hasher.update(&self.zeros.to_le_bytes());
            self.zeros = 0;
        }
    }

    /// One block (at a [`BLOCK`] boundary; shorter only at the end).
    fn block(&mut self, b: &[u8]) {
        if b.iter().all(|&x| x == 0) {
            self.zeros(b.len() as u64);
            return;
        }
        self.flush();
        self.hasher.update(b"D");
        self.hasher.update(&(b.len() as u64).to_le_bytes());
        self.hasher.update(b);
    }

    /// The hash, hex.
    pub fn finish(mut self) -> String {
        self.flush();
        self.hasher.finalize().to_hex().to_string()
    }
}

/// The [`ContentHash`] of `bytes` (what a manifest records for them).
pub fn content_hash(bytes: &[u8]) -> String {
    let mut h = ContentHash::new();
    for b in bytes.chunks(BLOCK as usize) {
        h.block(b);
    }
    h.finish()
}

/// The memory of reading files: a block and its sector-aligned twin (for
/// `O_DIRECT`), made once for a run and used for every file (no allocation,
/// no zeroing, no heap growth per file).
pub(crate) struct Buffers {
    block: Vec<u8>,
    aligned: AlignedBuffer,
}

impl Buffers {
    pub(crate) fn new() -> Self {
        Buffers {
            block: vec![0u8; BLOCK as usize],
            aligned: Reader::scratch(BLOCK),
        }
    }
}

/// The [`ContentHash`] of the regular file `f` of `size` bytes, holes
/// skipped (SEEK_DATA), checking for signals between blocks: what a
/// resumed run compares with the manifest before it keeps a copy.
pub(crate) fn hash_file(f: &File, size: u64, path: &Path, bufs: &mut Buffers) -> Result<String> {
    let mut h = ContentHash::new();
    let buf = &mut bufs.block;
    let mut off = 0u64;
    while off < size {
        crate::sys::kernel::signals::check()?;
        let data = next_data(f, off, size);
        let skip_to = (data / BLOCK * BLOCK).max(off);
        if skip_to > off {
            h.zeros(skip_to - off);
            off = skip_to;
            continue;
        }
        let len = BLOCK.min(size - off) as usize;
        f.read_exact_at(&mut buf[..len], off)
            .map_err(|e| Error::from_io(&e, "cannot read", path))?;
        h.block(&buf[..len]);
        off += len as u64;
    }
    Ok(h.finish())
}

/// The holes of a file of `size` bytes: what no extent (or only an
/// unwritten, preallocated one) covers. They read as zeros and are never
/// read.
pub(crate) fn holes_of(exts: &[Extent], size: u64) -> Ranges {
    let mut data = Ranges::default();
    for x in exts.iter().filter(|x| !x.unwritten) {
        data.add(x.file_offset, x.length);
    }
    let mut holes = Ranges::default();
    let mut at = 0u64;
    for r in &data.0 {
        if r.offset > at {
            holes.add(at, r.offset.min(size) - at);
        }
        at = at.max(r.offset + r.length);
    }
    if at < size {
        holes.add(at, size - at);
    }
    holes
}

/// Where the bytes go: a file being written, or nowhere (a verification).
pub(crate) trait Sink {
    /// Writes `data` at `offset`.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()>;
}

/// Reads `size` bytes of `src` in order, skipping `skip` (zeros in the
/// output, never read); a block that fails with EIO is read again sector by
/// sector, and each sector that fails is a bad range (zeros in the output).
/// Without `keep_going` the first bad sector ends the read. All-zero blocks
/// are not written (the target stays sparse). `progress` gets the bytes
/// done after each block.
///
/// Every byte comes from the disk, never from the page cache: through
/// `direct` (the same file opened `O_DIRECT`) where btrfs gives it, else
/// buffered after the range's cached pages are dropped. A cached page is
/// not checked again, and after a checksum failure 6.18 was seen to serve
/// the failed block's bytes from the cache on the next read, without EIO
/// (tests/it/rescue.rs): a copy that trusted it would be corrupt. So each
/// sector read is also checked by rescue against the checksum tree
/// (`check`: the checksums and the file's extents); a sector that does not
/// match is a bad range like an EIO.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_file(
    src: &File,
    direct: Option<&File>,
    mut check: Option<(&mut Csums, &[Extent])>,
    size: u64,
    skip: &Ranges,
    holes: &Ranges,
    keep_going: bool,
    sink: &mut dyn Sink,
    progress: &mut dyn FnMut(u64),
    path: &Path,
    bufs: &mut Buffers,
) -> Result<ReadOutcome> {
    let mut reader = Reader::new(src, direct, size, BLOCK, &mut bufs.aligned);
    let mut out = ReadOutcome::default();
    let mut hasher = ContentHash::new();
    let buf = &mut bufs.block;
    let noread = not_read(skip, holes);
    let mut off = 0u64;
    while off < size {
        // Between blocks: the first Ctrl-C is seen at once.
        crate::sys::kernel::signals::check()?;
        let len = BLOCK.min(size - off);
        // Whole blocks in a hole: not read, not written, hashed as zeros.
        if let Some(to) = hole_end(holes, off, len, size) {
            hasher.zeros(to - off);
            out.holes += to - off;
            progress(to - off);
            off = to;
            continue;
        }
        let block = &mut buf[..len as usize];
        if read_block(
            &mut reader,
            block,
            off,
            &noread,
            holes,
            keep_going,
            &mut out,
            path,
        )? == Flow::Stop
            || check_block(&mut check, block, off, &noread, keep_going, &mut out)? == Flow::Stop
        {
            out.stopped_early = true;
            return Ok(out);
        }
        hasher.block(block);
        write_read(sink, block, off, &noread, &out.bad)?;
        off += len;
        progress(len);
        if off < size {
            // A test's Ctrl-C in the middle of a file: the pause only
            // ends, and the check between blocks above must see it.
            let _ = crate::hooks::Pause::RescueBlock
                .here(&format!(" of {}", path.display()), &|| false);
        }
    }
    out.hash = hasher.finish();
    Ok(out)
}

/// The ranges never read: the skipped (damaged) ones and the holes.
fn not_read(skip: &Ranges, holes: &Ranges) -> Ranges {
    let mut noread = Ranges::default();
    let mut all: Vec<_> = skip.0.iter().chain(holes.0.iter()).copied().collect();
    all.sort_by_key(|r| r.offset);
    for r in all {
        noread.add(r.offset, r.length);
    }
    noread
}

/// Where the hole that covers the whole block `[off, off + len)` ends (at
/// a block boundary, or the file's end), if one does.
fn hole_end(holes: &Ranges, off: u64, len: u64, size: u64) -> Option<u64> {
    let h = holes.first_overlap(off, len)?;
    (h.offset <= off && h.offset + h.length >= off + len).then(|| {
        ((h.offset + h.length) / BLOCK * BLOCK)
            .max(off + len)
            .min(size)
    })
}

/// Whether reading a file goes on after a step: not after the first bad
/// sector without `keep_going`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// Reads the block at `off` into `block`, split at the ranges not read
/// (zeros); a run that fails with EIO is read again sector by sector.
#[allow(clippy::too_many_arguments)]
fn read_block(
    reader: &mut Reader<'_>,
    block: &mut [u8],
    off: u64,
    noread: &Ranges,
    holes: &Ranges,
    keep_going: bool,
    out: &mut ReadOutcome,
    path: &Path,
) -> Result<Flow> {
    let end = off + block.len() as u64;
    let mut n = 0u64;
    while off + n < end {
        let at = off + n;
        let (run, skipped) = match noread.first_overlap(at, end - at) {
            Some(r) if r.offset <= at => ((r.offset + r.length).min(end) - at, true),
            Some(r) => (r.offset - at, false),
            None => (end - at, false),
        };
        let piece = &mut block[n as usize..(n + run) as usize];
        n += run;
        if skipped {
            piece.fill(0);
            out.holes += intersect(holes, at, run);
            continue;
        }
        match reader.read_exact_at(piece, at, path)? {
            Got::Data => out.read_bytes += run,
            Got::Eio => {
                if read_sectors(reader, piece, at, keep_going, out, path)? == Flow::Stop {
                    return Ok(Flow::Stop);
                }
            }
        }
    }
    Ok(Flow::Go)
}

/// Reads `piece` (at `at`) sector by sector: a sector that returns EIO is
/// zeros and a bad range.
fn read_sectors(
    reader: &mut Reader<'_>,
    piece: &mut [u8],
    at: u64,
    keep_going: bool,
    out: &mut ReadOutcome,
    path: &Path,
) -> Result<Flow> {
    let run = piece.len() as u64;
    let mut s = 0u64;
    while s < run {
        let sl = (SECTOR - (at + s) % SECTOR).min(run - s);
        let sector = &mut piece[s as usize..(s + sl) as usize];
        match reader.read_exact_at(sector, at + s, path)? {
            Got::Data => out.read_bytes += sl,
            Got::Eio => {
                sector.fill(0);
                out.bad.add(at + s, sl);
                if !keep_going {
                    return Ok(Flow::Stop);
                }
            }
        }
        s += sl;
    }
    Ok(Flow::Go)
}

/// Rescue's own check of every sector of the block at `off` that was read:
/// one that does not match btrfs' checksums is zeros and a bad range.
fn check_block(
    check: &mut Option<(&mut Csums, &[Extent])>,
    block: &mut [u8],
    off: u64,
    noread: &Ranges,
    keep_going: bool,
    out: &mut ReadOutcome,
) -> Result<Flow> {
    let len = block.len() as u64;
    let mut s = 0u64;
    while s < len {
        let at = off + s;
        let sl = SECTOR.min(len - s);
        if !noread.overlaps(at, sl) && !out.bad.overlaps(at, sl) {
            let sector = &mut block[s as usize..(s + sl) as usize];
            let verdict = match check {
                Some((sums, exts)) => sums.check(exts, at, sector)?,
                None => Check::Unchecked,
            };
            match verdict {
                Check::Verified => out.verified += sl,
                Check::Unchecked => out.unchecked += sl,
                Check::Mismatch => {
                    sector.fill(0);
                    out.bad.add(at, sl);
                    out.read_bytes -= sl;
                    out.mismatched += sl;
                    if !keep_going {
                        return Ok(Flow::Stop);
                    }
                }
            }
        }
        s += sl;
    }
    Ok(Flow::Go)
}

/// Writes only what was read of the block at `off`: holes stay holes, and
/// so do the ranges that could not be read (and all-zero runs).
fn write_read(
    sink: &mut dyn Sink,
    block: &[u8],
    off: u64,
    noread: &Ranges,
    bad: &Ranges,
) -> Result<()> {
    let end = off + block.len() as u64;
    let mut at = off;
    while at < end {
        let (run, gap) = match noread
            .first_overlap(at, end - at)
            .or_else(|| bad.first_overlap(at, end - at))
            .map(|r| match bad.first_overlap(at, end - at) {
                Some(b) if b.offset < r.offset => b,
                _ => r,
            }) {
            Some(r) if r.offset <= at => ((r.offset + r.length).min(end) - at, true),
            Some(r) => (r.offset - at, false),
            None => (end - at, false),
        };
        let piece = &block[(at - off) as usize..(at - off + run) as usize];
        if !gap && piece.iter().any(|&x| x != 0) {
            sink.write_at(at, piece)?;
        }
        at += run;
    }
    Ok(())
}

/// Bytes of `r` inside `[at, at + len)`.
fn intersect(r: &Ranges, at: u64, len: u64) -> u64 {
    let end = at + len;
    let i = r.0.partition_point(|x| x.offset + x.length <= at);
    r.0[i..]
        .iter()
        .take_while(|x| x.offset < end)
        .map(|x| (x.offset + x.length).min(end) - x.offset.max(at))
        .sum()
}

impl Sink for NewFile<'_> {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        NewFile::write_at(self, offset, data)
    }
}
