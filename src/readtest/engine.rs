//! The readers: one timed pass of one method over the whole file, into the
//! destination ring, with the checksum folded in as the bytes land.
//!
//! Every method runs on worker threads (one for the single-threaded ones)
//! while the calling thread only watches: it reports progress, and turns
//! SIGINT/SIGTERM into an abort the workers see between chunks.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::digest::{BLOCK, Digest, VerifyMode};
use super::method::Method;
use crate::error::{Error, ErrorKind, Result};
use crate::hooks::Pause;
use crate::sys::kernel::memio::{self, FileMap, MappedBuffer, RingBuffer};
use crate::sys::kernel::signals;

/// Bytes per `read()` call of the buffered and dontcache methods.
pub(crate) const READ_CALL: usize = 1 << 20;
/// The mmap method touches the mapping this much at a time between
/// progress updates and abort checks.
const MMAP_WINDOW: u64 = 2 << 20;

/// What a pass reads and how.
pub(crate) struct Pass<'a> {
    /// The file, for messages.
    pub path: &'a Path,
    /// Its size.
    pub size: u64,
    /// A plain (page-cache) handle.
    pub plain: &'a File,
    /// An O_DIRECT handle, when O_DIRECT works here.
    pub direct: Option<&'a File>,
    /// Worker threads of direct and direct-copy.
    pub threads: usize,
    /// O_DIRECT offset and length alignment.
    pub(crate) align: usize,
    /// How much to checksum.
    pub verify: VerifyMode,
}

/// What a pass measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassResult {
    /// Bytes read.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// CPU time of the whole process (all threads) during the pass.
    pub cpu_seconds: f64,
    /// Checksum of what was read.
    pub digest: Digest,
}

/// Runs one timed pass of `method`. `ring` is the destination (reset here);
/// `bounce` holds one buffer per thread for direct-copy. `progress(done)`
/// is called from this thread a few times a second.
pub(crate) fn run_pass(
    method: Method,
    pass: &Pass<'_>,
    ring: &mut RingBuffer,
    bounce: &mut [MappedBuffer],
    progress: &mut dyn FnMut(u64),
) -> Result<PassResult> {
    ring.reset();
    let ring = &*ring;
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let next_chunk = AtomicU64::new(0);
    let chunks = pass.size.div_ceil(ring.slot_len() as u64);
    let finished_ns = AtomicU64::new(0);
    let cpu_before = memio::process_cpu_seconds();
    let start = Instant::now();
    let ctx = Workers {
        pass,
        ring,
        done: &done,
        stop: &stop,
        next_chunk: &next_chunk,
        chunks,
        start,
        finished_ns: &finished_ns,
    };
    let results: Vec<Result<Digest>> = thread::scope(|s| {
        let handles: Vec<_> = match method {
            Method::Direct | Method::DirectCopy => {
                let copy = method == Method::DirectCopy;
                let mut spare = bounce.iter_mut();
                (0..pass.threads.max(1))
                    .map(|_| {
                        let b = if copy { spare.next() } else { None };
                        let ctx = &ctx;
                        s.spawn(move || ctx.chunk_worker(b))
                    })
                    .collect()
            }
            Method::Buffered => vec![s.spawn(|| ctx.sequential_worker(false))],
            Method::Dontcache => vec![s.spawn(|| ctx.sequential_worker(true))],
            Method::Mmap => vec![s.spawn(|| ctx.mmap_worker())],
        };
        let mut interrupted = false;
        while !handles.iter().all(|h| h.is_finished()) {
            thread::sleep(Duration::from_millis(20));
            if signals::interrupted() && !interrupted {
                interrupted = true;
                ctx.abort();
            }
            progress(done.load(Ordering::Relaxed));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::new(ErrorKind::Io, "a reader thread panicked")))
            })
            .collect()
    });
    // The watcher notices the end up to a tick late: time the workers.
    let seconds = finished_ns.load(Ordering::SeqCst) as f64 / 1e9;
    let cpu_seconds = (memio::process_cpu_seconds() - cpu_before).max(0.0);
    signals::check()?;
    let mut digest = Digest::new(pass.verify, pass.size);
    for r in results {
        digest.merge(&r?);
    }
    progress(done.load(Ordering::Relaxed));
    Ok(PassResult {
        bytes: done.load(Ordering::Relaxed),
        seconds,
        cpu_seconds,
        digest,
    })
}

/// What the worker threads share.
struct Workers<'a> {
    pass: &'a Pass<'a>,
    ring: &'a RingBuffer,
    done: &'a AtomicU64,
    stop: &'a AtomicBool,
    next_chunk: &'a AtomicU64,
    chunks: u64,
    start: Instant,
    /// When the last worker finished, in nanoseconds after `start`.
    finished_ns: &'a AtomicU64,
}

impl Workers<'_> {
    fn abort(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.ring.abort();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Runs `body`, aborting the other workers if it fails, and notes
    /// when it ended.
    fn guarded(&self, body: impl FnOnce() -> Result<Digest>) -> Result<Digest> {
        let r = body();
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.finished_ns.fetch_max(ns, Ordering::SeqCst);
        if r.is_err() {
            self.abort();
        }
        r
    }

    /// The chunk `i`: its file offset and length.
    fn chunk(&self, i: u64) -> (u64, usize) {
        let slot = self.ring.slot_len() as u64;
        let off = i * slot;
        (off, (self.pass.size - off).min(slot) as usize)
    }

    /// direct / direct-copy: take chunks from the shared counter; read each
    /// with O_DIRECT into its slot of the destination, or into `bounce`
    /// and copy it there.
    fn chunk_worker(&self, mut bounce: Option<&mut MappedBuffer>) -> Result<Digest> {
        self.guarded(|| {
            let mut digest = Digest::new(self.pass.verify, self.pass.size);
            while !self.stopped() {
                let i = self.next_chunk.fetch_add(1, Ordering::Relaxed);
                if i >= self.chunks {
                    break;
                }
                let (off, len) = self.chunk(i);
                match bounce.as_deref_mut() {
                    None => {
                        let Some(mut slot) = self.ring.claim(i) else {
                            break;
                        };
                        self.read_chunk(&mut slot, off, len)?;
                        digest.feed(off, &slot[..len]);
                    }
                    Some(b) => {
                        let b = b.as_mut_slice();
                        self.read_chunk(b, off, len)?;
                        let Some(mut slot) = self.ring.claim(i) else {
                            break;
                        };
                        slot[..len].copy_from_slice(&b[..len]);
                        digest.feed(off, &slot[..len]);
                    }
                }
                self.done.fetch_add(len as u64, Ordering::Relaxed);
            }
            Ok(digest)
        })
    }

    /// Reads `len` bytes at `off` into `buf[..len]`. With O_DIRECT the
    /// request is rounded up to the alignment (the kernel stops at the end
    /// of the file); a short read that leaves an unaligned offset is
    /// finished through the page cache.
    fn read_chunk(&self, buf: &mut [u8], off: u64, len: usize) -> Result<()> {
        let Some(direct) = self.pass.direct else {
            return read_exact_at(self.pass.plain, &mut buf[..len], off, self.pass.path);
        };
        let align = self.pass.align;
        let want = len.div_ceil(align) * align;
        let mut got = 0usize;
        while got < len {
            if !got.is_multiple_of(align) {
                return read_exact_at(
                    self.pass.plain,
                    &mut buf[got..len],
                    off + got as u64,
                    self.pass.path,
                );
            }
            match direct.read_at(&mut buf[got..want], off + got as u64) {
                Ok(0) => return Err(shrank(self.pass.path, off + got as u64)),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_error(&e, self.pass.path, off + got as u64)),
            }
        }
        Ok(())
    }

    /// buffered / dontcache: one thread, front to back, 1 MiB calls, into
    /// the destination.
    fn sequential_worker(&self, dontcache: bool) -> Result<Digest> {
        self.guarded(|| {
            let pass = self.pass;
            let mut digest = Digest::new(pass.verify, pass.size);
            let mut file = pass.plain;
            file.seek(SeekFrom::Start(0))
                .map_err(|e| Error::from_io(&e, "cannot seek in", pass.path))?;
            for i in 0..self.chunks {
                if self.stopped() {
                    break;
                }
                let (off, len) = self.chunk(i);
                let Some(mut slot) = self.ring.claim(i) else {
                    break;
                };
                let mut got = 0usize;
                while got < len {
                    let to = (got + READ_CALL).min(len);
                    let at = off + got as u64;
                    let r = if dontcache {
                        memio::pread_dontcache(pass.plain, &mut slot[got..to], at)
                    } else {
                        file.read(&mut slot[got..to])
                    };
                    match r {
                        Ok(0) => return Err(shrank(pass.path, at)),
                        Ok(n) => {
                            got += n;
                            self.done.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(read_error(&e, pass.path, at)),
                    }
                }
                digest.feed(off, &slot[..len]);
            }
            Ok(digest)
        })
    }

    /// mmap: map the file, ask for sequential readahead, fault every page
    /// in front to back (what a program using the mapping pays).
    ///
    /// The mapping is never read with a load instruction: a page the file
    /// no longer reaches (another process truncated it) would be a SIGBUS
    /// that kills the process. Each window is faulted in with
    /// `MADV_POPULATE_READ` and read through the kernel (see
    /// [`FileMap::touch_pages`]); both report such a page as `EFAULT`,
    /// which is "the file shrank", as the other methods say it.
    fn mmap_worker(&self) -> Result<Digest> {
        self.guarded(|| {
            let pass = self.pass;
            let mut digest = Digest::new(pass.verify, pass.size);
            if pass.size == 0 {
                return Ok(digest);
            }
            let len = usize::try_from(pass.size)
                .map_err(|_| Error::new(ErrorKind::Unsupported, "the file is too large to map"))?;
            let map = FileMap::new(pass.plain, len)
                .map_err(|e| Error::from_io(&e, "cannot map", pass.path))?;
            map.advise_sequential();
            let page = memio::page_size();
            let mut block = [0u8; BLOCK as usize];
            let mut sink = 0u64;
            let mut start = 0u64;
            let fault = |e: io::Error, at: u64| self.mapping_error(&e, at);
            while start < pass.size && !self.stopped() {
                let end = (start + MMAP_WINDOW).min(pass.size);
                map.populate(start as usize, end as usize)
                    .map_err(|e| fault(e, start))?;
                let touched = map
                    .touch_pages(start as usize, end as usize, page)
                    .map_err(|e| fault(e, start))?;
                sink = sink.wrapping_add(touched);
                for b in digest.blocks_in(start, end) {
                    let (s, e) = digest.block_range(b);
                    let n = (e - s) as usize;
                    map.copy_out(s as usize, &mut block[..n])
                        .map_err(|err| fault(err, s))?;
                    digest.add_block(b, &block[..n]);
                }
                self.done.fetch_add(end - start, Ordering::Relaxed);
                start = end;
                // A signal only ends the wait: the pass's own checks stop it.
                let _ = Pause::ReadTestMmap.here(" after its first window", &|| self.stopped());
            }
            std::hint::black_box(sink);
            // A file cut inside its last page reads as zeros, no fault: the
            // size says it.
            self.check_size(start)?;
            Ok(digest)
        })
    }

    /// What a failed read of the mapping at `at` means: EFAULT is a page
    /// beyond the end of the file.
    fn mapping_error(&self, e: &io::Error, at: u64) -> Error {
        if crate::sys::kernel::measure::files::is_bad_address(e) {
            let now = self.pass.plain.metadata().map_or(at, |m| m.len());
            shrank(self.pass.path, now)
        } else {
            read_error(e, self.pass.path, at)
        }
    }

    /// Fails with "it shrank" when the file is now shorter than `read`
    /// bytes.
    fn check_size(&self, read: u64) -> Result<()> {
        let now = self
            .pass
            .plain
            .metadata()
            .map_err(|e| Error::from_io(&e, "cannot stat", self.pass.path))?
            .len();
        if now < read {
            return Err(shrank(self.pass.path, now));
        }
        Ok(())
    }
}

/// Reads exactly `buf.len()` bytes at `off` through `file`.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], off: u64, path: &Path) -> Result<()> {
    let mut got = 0usize;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => return Err(shrank(path, off + got as u64)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_error(&e, path, off + got as u64)),
        }
    }
    Ok(())
}

fn shrank(path: &Path, at: u64) -> Error {
    Error::new(
        ErrorKind::State,
        format!(
            "{} ended at byte {at}, before its size: it shrank while read-test read it",
            path.display()
        ),
    )
    .with_hint("run read-test on a file nothing else is writing")
}

fn read_error(e: &io::Error, path: &Path, at: u64) -> Error {
    let base = Error::from_io(e, "cannot read", path);
    let mut err = Error::new(base.kind(), format!("{} (at byte {at})", base.message()));
    if let Some(h) = base.hint() {
        err = err.with_hint(h);
    }
    err
}
