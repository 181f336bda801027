//! Memory and read interfaces: anonymous huge-page buffers, a ring of slots
//! handed out to reader threads, read-only file mappings (rustix `mm`),
//! `mincore` (libc: neither rustix nor nix has it), reads of our own mapping
//! through the kernel (nix `process_vm_readv`), `statx` DIO alignment and
//! `preadv2(RWF_DONTCACHE)` (rustix, with libc's constants for the flags
//! rustix does not name) and `getrusage` (nix).
//!
//! Every `unsafe` block says why it is sound. What leaves this module is a
//! safe API: slices only exist while the protocol below makes them exclusive.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::ops::{Deref, DerefMut};

use nix::sys::uio::RemoteIoVec;
use rustix::fs::{AtFlags, StatxFlags};
use rustix::io::ReadWriteFlags;
use rustix::mm::{self, Advice, MapFlags, ProtFlags};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Transparent huge pages on x86-64 and arm64 (4 KiB base pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    crate::sys::proc::counters::page_size() as usize
}

// ------------------------------------------------------------ anonymous memory

/// What backs a [`MappedBuffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// Pages of the kernel's huge page pool (`MAP_HUGETLB`): every byte in
    /// huge pages, reserved when mapped.
    Hugetlb,
    /// Ordinary anonymous memory with transparent huge pages requested
    /// (`MADV_HUGEPAGE`): huge where the kernel found them.
    Transparent,
    /// Ordinary anonymous memory kept in base pages (`MADV_NOHUGEPAGE`).
    Base,
}

/// Anonymous memory aligned to 2 MiB (huge pages of the pool, or
/// transparent huge pages requested), faulted in before use, so a timed
/// read never pays for page faults.
pub(crate) struct MappedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    mapped: usize,
    backing: Backing,
}

// SAFETY: the buffer owns its mapping exclusively; moving it between threads
// moves that ownership. Shared access (`&MappedBuffer`) only reads metadata
// (pointer, lengths): the bytes are reached through `&mut self` or through
// `RingBuffer`'s exclusive slots.
unsafe impl Send for MappedBuffer {}
// SAFETY: see `Send`; no `&self` method reads or writes the bytes.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// `len` usable bytes in pages of the huge page pool (`huge_page`
    /// bytes each, the pool's size), prefaulted; `None` when the pool cannot
    /// give them now (the kernel reserves them when mapping: `ENOMEM` is
    /// "not enough free"), so the caller falls back to [`MappedBuffer::new`].
    pub fn new_hugetlb(len: usize, huge_page: usize) -> io::Result<Option<Self>> {
        if huge_page == 0 || !huge_page.is_power_of_two() {
            return Ok(None);
        }
        let mapped = round_up(len.max(1), huge_page);
        // SAFETY: a fresh private anonymous mapping of the default huge page
        // size; no existing memory is touched (the kernel picks the address,
        // aligned to the huge page). A failure is returned, nothing mapped.
        let raw = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                mapped,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::HUGETLB,
            )
        };
        let raw = match raw {
            Ok(p) => p,
            // Too few free pages (ENOMEM), no hugetlb support (EINVAL), or
            // a pool of another size than asked.
            Err(rustix::io::Errno::NOMEM | rustix::io::Errno::INVAL) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let buf = Self {
            ptr,
            len,
            mapped,
            backing: Backing::Hugetlb,
        };
        // The pages were reserved by mmap: faulting them in cannot fail for
        // want of pages, only zeroes them.
        buf.prefault()?;
        Ok(Some(buf))
    }

    /// `len` usable bytes (the mapping is rounded up to 2 MiB), 2 MiB-aligned,
    /// `MADV_HUGEPAGE` requested, every page written once (prefaulted).
    pub fn new(len: usize) -> io::Result<Self> {
        let buf = Self::map_aligned(len)?;
        // SAFETY: advice on our own mapping; it changes no memory contents.
        // EINVAL (THP compiled out or disabled) only means no huge pages.
        unsafe {
            let _ = mm::madvise(buf.ptr.as_ptr().cast(), buf.mapped, Advice::LinuxHugepage);
        }
        buf.prefault()?;
        Ok(buf)
    }

    /// A private anonymous mapping of `len` bytes rounded up to 2 MiB,
    /// starting on a 2 MiB boundary, not yet faulted in.
    fn map_aligned(len: usize) -> io::Result<Self> {
        let mapped = round_up(len.max(1), HUGE_PAGE);
        let over = mapped + HUGE_PAGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // touched (the kernel picks the address). A failure is an error.
        let raw = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                over,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        let start = raw as usize;
        let aligned = round_up(start, HUGE_PAGE);
        let head = aligned - start;
        let tail = over - head - mapped;
        // SAFETY: both ranges lie inside the mapping just made and are not
        // used again: we keep exactly [aligned, aligned + mapped).
        unsafe {
            if head > 0 {
                let _ = mm::munmap(raw, head);
            }
            if tail > 0 {
                let _ = mm::munmap((aligned + mapped) as *mut c_void, tail);
            }
        }
        let ptr = NonNull::new(aligned as *mut u8).ok_or_else(io::Error::last_os_error)?;
        Ok(Self {
            ptr,
            len,
            mapped,
            backing: Backing::Transparent,
        })
    }

    /// `len` usable bytes in ordinary base pages (`MADV_NOHUGEPAGE`: no
    /// transparent huge page backs any of it), 2 MiB-aligned, prefaulted:
    /// the buffers a program gets that asks for nothing.
    pub fn new_base_pages(len: usize) -> io::Result<Self> {
        let mut buf = Self::map_aligned(len)?;
        buf.backing = Backing::Base;
        // SAFETY: advice on our own mapping; it changes no contents.
        unsafe {
            mm::madvise(buf.ptr.as_ptr().cast(), buf.mapped, Advice::LinuxNoHugepage)?;
        }
        buf.prefault()?;
        Ok(buf)
    }

    fn prefault(&self) -> io::Result<()> {
        // SAFETY: MADV_POPULATE_WRITE (Linux 5.14) faults in our own mapping
        // writable without changing its contents (zeros).
        let r = unsafe {
            mm::madvise(
                self.ptr.as_ptr().cast(),
                self.mapped,
                Advice::LinuxPopulateWrite,
            )
        };
        match r {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
        // Older kernel: write one byte per page ourselves.
        let page = page_size();
        for off in (0..self.mapped).step_by(page) {
            // SAFETY: `off` is inside our writable mapping; nobody else
            // holds a reference to it yet (we are in the constructor).
            unsafe { self.ptr.as_ptr().add(off).write_volatile(0) };
        }
        Ok(())
    }

    /// Usable length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Start address (to find the mapping in /proc/self/smaps).
    pub fn address(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Bytes mapped (`len` rounded up to whole huge pages).
    pub fn mapped_len(&self) -> usize {
        self.mapped
    }

    /// What backs it.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// The bytes, exclusively.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: [ptr, ptr + len) is inside our live read-write mapping and
        // `&mut self` makes this the only reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: we own exactly this mapping; no slice into it outlives
        // `self` (they borrow it).
        unsafe {
            let _ = mm::munmap(self.ptr.as_ptr().cast(), self.mapped);
        }
    }
}

// ------------------------------------------------------------------ the ring

/// A destination buffer used as a ring of equal slots: chunk `i` of a file
/// lands in slot `i % slots`. Reader threads take slots through
/// [`RingBuffer::claim`], which hands chunk `i` its slot only after chunk
/// `i - slots` released it, so every slice handed out is exclusive.
pub(crate) struct RingBuffer {
    buf: MappedBuffer,
    slot_len: usize,
    /// Per slot: the chunk whose turn it is, or `BUSY` while held.
    turns: Vec<AtomicU64>,
    aborted: AtomicBool,
}

const BUSY: u64 = u64::MAX;

impl RingBuffer {
    /// `slots` slots of `slot_len` bytes, prefaulted, transparent huge
    /// pages requested.
    #[cfg(test)]
    pub fn new(slots: usize, slot_len: usize) -> io::Result<Self> {
        Self::with_pool(slots, slot_len, None)
    }

    /// As [`RingBuffer::new`], in pages of the huge page pool (pages of
    /// `huge_page` bytes) when given and the pool has them now, else in
    /// transparent huge pages.
    pub fn with_pool(slots: usize, slot_len: usize, huge_page: Option<usize>) -> io::Result<Self> {
        let slots = slots.max(1);
        let len = slots * slot_len;
        let pooled = match huge_page {
            Some(h) => MappedBuffer::new_hugetlb(len, h)?,
            None => None,
        };
        let buf = match pooled {
            Some(b) => b,
            None => MappedBuffer::new(len)?,
        };
        let mut ring = Self {
            buf,
            slot_len,
            turns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            aborted: AtomicBool::new(false),
        };
        ring.reset();
        Ok(ring)
    }

    /// Makes the ring ready for a new pass over a file (chunk 0 onwards).
    pub fn reset(&mut self) {
        for (i, t) in self.turns.iter_mut().enumerate() {
            *t.get_mut() = i as u64;
        }
        *self.aborted.get_mut() = false;
    }

    /// Bytes per slot.
    pub(crate) fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.turns.len()
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Start address of the buffer.
    pub fn address(&self) -> usize {
        self.buf.address()
    }

    /// What backs the buffer.
    pub fn backing(&self) -> Backing {
        self.buf.backing()
    }

    /// Bytes mapped.
    pub fn mapped_len(&self) -> usize {
        self.buf.mapped_len()
    }

    /// Makes every waiting and future `claim` return `None` (a reader failed
    /// or the user interrupted).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
    }

    /// True after [`RingBuffer::abort`].
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// The slot of `chunk`, exclusively, once the chunk before it in that
    /// slot is done. `None` after an abort, or if `chunk` was already
    /// claimed (each chunk is claimed once per pass).
    pub(crate) fn claim(&self, chunk: u64) -> Option<SlotGuard<'_>> {
        let slot = (chunk % self.turns.len() as u64) as usize;
        let turn = &self.turns[slot];
        let mut spins = 0u32;
        loop {
            if self.is_aborted() {
                return None;
            }
            let t = turn.load(Ordering::Acquire);
            if t == chunk {
                if turn
                    .compare_exchange(chunk, BUSY, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some(SlotGuard {
                        ring: self,
                        slot,
                        chunk,
                    });
                }
                continue;
            }
            if t != BUSY && t > chunk {
                return None;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Exclusive access to one slot of a [`RingBuffer`]; released on drop.
pub(crate) struct SlotGuard<'a> {
    ring: &'a RingBuffer,
    slot: usize,
    chunk: u64,
}

impl SlotGuard<'_> {
    /// Start of the slot (plain pointer arithmetic inside the mapping).
    fn start(&self) -> *mut u8 {
        self.ring
            .buf
            .ptr
            .as_ptr()
            .wrapping_add(self.slot * self.ring.slot_len)
    }
}

impl Deref for SlotGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the slot lies inside the ring's live mapping (slot <
        // slots, slots * slot_len <= len). The turn protocol gives this
        // guard the slot exclusively: its turn word holds BUSY, which only
        // this guard's drop replaces.
        unsafe { std::slice::from_raw_parts(self.start(), self.ring.slot_len) }
    }
}

impl DerefMut for SlotGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.start(), self.ring.slot_len) }
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let next = self.chunk + self.ring.turns.len() as u64;
        self.ring.turns[self.slot].store(next, Ordering::Release);
    }
}

// ------------------------------------------------------------- file mappings

/// A read-only shared mapping of a file. Its bytes are reached by copying
/// or by touching pages, never as a Rust slice: another process may change
/// the file underneath, which a `&[u8]` would not allow.
pub struct FileMap {
    ptr: NonNull<u8>,
    len: usize,
}

impl FileMap {
    /// Maps the first `len` bytes (`len` > 0) of `file`, opened for reading.
    pub fn new(file: &File, len: usize) -> io::Result<Self> {
        Self::map_at(file, len, 0)
    }

    /// Maps `len` bytes (> 0) of `file` from `offset`, a multiple of the
    /// page size.
    fn map_at(file: &File, len: usize, offset: u64) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a new shared read-only mapping of a file we hold open (the
        // kernel picks the address); a failure is an error.
        let raw = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
                file,
                offset,
            )
        }?;
        let ptr = NonNull::new(raw.cast()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { ptr, len })
    }

    /// Tells the kernel the mapping will be read front to back (more
    /// readahead, pages dropped behind).
    pub(crate) fn advise_sequential(&self) {
        // SAFETY: advice on our own mapping; contents are unchanged.
        unsafe {
            let _ = mm::madvise(self.ptr.as_ptr().cast(), self.len, Advice::Sequential);
        }
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the mapping is empty (never: `new` refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Faults the pages of `[start, end)` in with `MADV_POPULATE_READ`
    /// (Linux 5.14+), as a program touching them would. Returns `Ok(false)`
    /// when the kernel does not know the advice (nothing was done), and
    /// `EFAULT` when part of the range lies beyond the end of the file (it
    /// shrank): the kernel reports what would be a SIGBUS as an error.
    pub fn populate(&self, start: usize, end: usize) -> io::Result<bool> {
        let page = page_size();
        let end = end.min(self.len);
        let start = start - start % page;
        if start >= end {
            return Ok(true);
        }
        // SAFETY: [start, end) lies inside our mapping (start is rounded down
        // to a page, madvise needs an aligned address); POPULATE_READ only
        // faults pages in, it changes no contents and no mapping.
        let r = unsafe {
            mm::madvise(
                self.ptr.as_ptr().add(start).cast(),
                end - start,
                Advice::LinuxPopulateRead,
            )
        };
        match r {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::INVAL) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads one byte of every `page` bytes in `[start, end)`, faulting the
    /// pages in as a program using the mapping would. Returns their sum so
    /// the reads cannot be optimised away.
    ///
    /// The bytes are read by the kernel (`process_vm_readv` on ourselves),
    /// never by a load instruction: a page beyond the end of the file (it
    /// shrank after it was mapped) is then `EFAULT`, not a SIGBUS that
    /// kills the process.
    pub fn touch_pages(&self, start: usize, end: usize, page: usize) -> io::Result<u64> {
        const BATCH: usize = 512;
        let end = end.min(self.len);
        let mut sink = [0u8; BATCH];
        let mut sum = 0u64;
        let mut off = start;
        while off < end {
            let n = (end - off).div_ceil(page).min(BATCH);
            let remote: Vec<RemoteIoVec> = (0..n)
                .map(|i| RemoteIoVec {
                    // An address in our mapping, only passed to the kernel.
                    base: self.ptr.as_ptr() as usize + off + i * page,
                    len: 1,
                })
                .collect();
            self.read_remote(&remote, &mut sink[..n])?;
            sum = sink[..n]
                .iter()
                .fold(sum, |s, &b| s.wrapping_add(u64::from(b)));
            off += n * page;
        }
        Ok(sum)
    }

    /// Copies `dst.len()` bytes from `offset` out of the mapping (fewer at
    /// its end), through the kernel like [`FileMap::touch_pages`]: `EFAULT`
    /// when the file no longer reaches that far.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) -> io::Result<()> {
        let n = dst.len().min(self.len.saturating_sub(offset));
        if n == 0 {
            return Ok(());
        }
        let remote = [RemoteIoVec {
            base: self.ptr.as_ptr() as usize + offset,
            len: n,
        }];
        self.read_remote(&remote, &mut dst[..n])
    }

    /// Copies the bytes `remote` (ranges inside our mapping) name into
    /// `dst`, whose length is their total, with `process_vm_readv` on our
    /// own process. Anything short of all of them is `EFAULT`.
    fn read_remote(&self, remote: &[RemoteIoVec], dst: &mut [u8]) -> io::Result<()> {
        let want: usize = remote.iter().map(|v| v.len).sum();
        debug_assert_eq!(want, dst.len());
        // The kernel reads `remote` (addresses inside our own read-only
        // mapping) with its own fault handling: an unbacked page is an
        // error, not a signal. No Rust reference to the mapped bytes is made.
        let r = nix::sys::uio::process_vm_readv(
            nix::unistd::getpid(),
            &mut [io::IoSliceMut::new(dst)],
            remote,
        )
        .map_err(io::Error::from)?;
        if r != want {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        Ok(())
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: we own exactly this mapping and no pointer into it escapes.
        unsafe {
            let _ = mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Bytes of the first `size` bytes of `file` that are in the page cache:
/// `cachestat` where the kernel has it (6.5+: it walks only the pages that
/// are cached, so a cold 80 GB file costs next to nothing), else `mincore`
/// over a temporary mapping, 1 GiB at a time (every page of the file, each
/// call).
pub fn resident_bytes(file: &File, size: u64) -> io::Result<u64> {
    match cachestat_bytes(file, size)? {
        Some(b) => Ok(b.min(size)),
        None => mincore_bytes(file, size),
    }
}

/// `cachestat(2)` over `[0, size)`: the bytes cached, or `None` where it
/// cannot answer (a kernel before 6.5, a filesystem without a page cache,
/// or, since 6.16, a file the caller neither owns nor may write: mincore
/// then answers, with the same rule).
fn cachestat_bytes(file: &File, size: u64) -> io::Result<Option<u64>> {
    use linux_raw_sys::general::{__NR_cachestat, cachestat, cachestat_range};
    use std::os::fd::AsRawFd;
    if size == 0 {
        return Ok(Some(0));
    }
    let range = cachestat_range { off: 0, len: size };
    let mut stat = std::mem::MaybeUninit::<cachestat>::zeroed();
    // SAFETY: cachestat(fd, range, stat, flags) reads `range` (a live
    // struct of the kernel's layout, from linux-raw-sys) and writes one
    // `cachestat` into `stat` (ours, zeroed, the right size); flags must be
    // 0. The fd is borrowed from `file` for the call.
    let r = unsafe {
        libc::syscall(
            libc::c_long::from(__NR_cachestat as i32),
            file.as_raw_fd(),
            &range as *const cachestat_range,
            stat.as_mut_ptr(),
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM | libc::EBADF) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: the call succeeded, so the kernel filled it in (and it was
    // zeroed before: every bit pattern is a valid `cachestat`).
    let stat = unsafe { stat.assume_init() };
    Ok(Some(stat.nr_cache.saturating_mul(page_size() as u64)))
}

/// Which call [`resident_bytes`] answers with for `file`: `cachestat`,
/// or `mincore` where the kernel cannot use it.
pub fn residency_source(file: &File) -> &'static str {
    match cachestat_bytes(file, 1) {
        Ok(Some(_)) => "cachestat",
        _ => "mincore",
    }
}

/// `resident_bytes` by `mincore`.
pub(crate) fn mincore_bytes(file: &File, size: u64) -> io::Result<u64> {
    const WINDOW: u64 = 1 << 30;
    let page = page_size() as u64;
    let mut resident_pages = 0u64;
    let mut vec = Vec::new();
    let mut start = 0u64;
    while start < size {
        let len = (size - start).min(WINDOW) as usize;
        let pages = len.div_ceil(page as usize);
        vec.clear();
        vec.resize(pages, 0u8);
        // A multiple of 1 GiB is page-aligned.
        let map = FileMap::map_at(file, len, start)?;
        // SAFETY: `map` is our mapping of `len` bytes and `vec` has one byte
        // per page of it, as mincore writes. mincore faults nothing in.
        let r = unsafe { libc::mincore(map.ptr.as_ptr().cast(), len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        resident_pages += vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
        start += len as u64;
    }
    Ok((resident_pages * page).min(size))
}

// ------------------------------------------------------------------- statx

/// O_DIRECT alignment a file asks for (`statx` STATX_DIOALIGN, and
/// STATX_DIO_READ_ALIGN where the kernel has it, 6.14+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DioAlign {
    /// Alignment of the memory buffer.
    pub memory: u32,
    /// Alignment of file offsets and lengths for reads.
    pub offset: u32,
}

/// The DIO alignment of `file`, or `None` if the filesystem does not say
/// (btrfs, tmpfs) or says O_DIRECT is unsupported (both values 0).
pub(crate) fn dio_alignment(file: &File) -> Option<DioAlign> {
    // rustix names STATX_DIOALIGN, not STATX_DIO_READ_ALIGN (libc's constant).
    let read_align = StatxFlags::from_bits_retain(libc::STATX_DIO_READ_ALIGN);
    let stx = rustix::fs::statx(
        file,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::DIOALIGN | read_align,
    )
    .ok()?;
    if stx.stx_mask & StatxFlags::DIOALIGN.bits() == 0 {
        return None;
    }
    let read = if stx.stx_mask & read_align.bits() != 0 {
        stx.stx_dio_read_offset_align
    } else {
        0
    };
    let offset = if read != 0 {
        read
    } else {
        stx.stx_dio_offset_align
    };
    (offset != 0).then_some(DioAlign {
        memory: stx.stx_dio_mem_align.max(1),
        offset,
    })
}

// ----------------------------------------------------------------- preadv2

/// `preadv2(RWF_DONTCACHE)` (Linux 6.14+): a buffered read whose pages are
/// dropped once read. EOPNOTSUPP where the kernel or filesystem lacks it.
pub(crate) fn pread_dontcache(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    // rustix does not name RWF_DONTCACHE (libc's constant).
    let flags = ReadWriteFlags::from_bits_retain(libc::RWF_DONTCACHE as u32);
    Ok(rustix::io::preadv2(
        file,
        &mut [io::IoSliceMut::new(buf)],
        offset,
        flags,
    )?)
}

// ---------------------------------------------------------------- getrusage

/// CPU time (user + system) used so far by this process, all threads
/// included (`getrusage(RUSAGE_SELF)`), in seconds.
pub(crate) fn process_cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    #[test]
    fn buffer_is_huge_page_aligned_and_zeroed() {
        let mut b = MappedBuffer::new(3 << 20).unwrap();
        assert_eq!(b.address() % HUGE_PAGE, 0);
        assert_eq!(b.len(), 3 << 20);
        assert!(b.as_mut_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[(3 << 20) - 1] = 7;
    }

    #[test]
    fn ring_hands_out_slots_in_turn() {
        let mut ring = RingBuffer::new(2, 4096).unwrap();
        {
            let mut a = ring.claim(0).unwrap();
            a[0] = 1;
            let b = ring.claim(1).unwrap();
            assert_eq!(b.len(), 4096);
        }
        // Chunk 2 reuses slot 0 and sees what chunk 0 wrote.
        assert_eq!(ring.claim(2).unwrap()[0], 1);
        // Chunk 0 is done: claiming it again is refused, not a second slice.
        assert!(ring.claim(0).is_none());
        ring.reset();
        assert!(ring.claim(0).is_some());
    }

    #[test]
    fn ring_waiters_follow_the_order_and_abort_releases_them() {
        let ring = Arc::new(RingBuffer::new(1, 4096).unwrap());
        let held = ring.claim(0).unwrap();
        let r2 = Arc::clone(&ring);
        let waiter = std::thread::spawn(move || r2.claim(1).map(|s| s[0]));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished(), "chunk 1 must wait for chunk 0");
        drop(held);
        assert_eq!(waiter.join().unwrap(), Some(0));
        let r3 = Arc::clone(&ring);
        let _hold = ring.claim(2);
        let waiter = std::thread::spawn(move || r3.claim(3).is_none());
        ring.abort();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn file_map_touch_copy_and_mincore() {
        let mut f = tempfile::tempfile_in("/var/tmp").unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let m = FileMap::new(&f, data.len()).unwrap();
        m.advise_sequential();
        let mut out = vec![0u8; 100];
        m.copy_out(19_950, &mut out).unwrap();
        assert_eq!(&out[..50], &data[19_950..]);
        assert_eq!(out[50], 0, "copy stops at the end of the mapping");
        assert_eq!(m.touch_pages(0, 3, 1).unwrap(), 3);
        assert!(m.populate(0, data.len()).is_ok());
        let resident = resident_bytes(&f, data.len() as u64).unwrap();
        // Just written and populated: every page is in the cache.
        assert_eq!(resident, data.len() as u64);
        assert_eq!(resident_bytes(&f, 0).unwrap(), 0);
        assert!(FileMap::new(&f, 0).is_err());
    }

    #[test]
    fn cachestat_and_mincore_count_the_same_pages() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![3u8; 4 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        f.sync_all().unwrap();
        let size = 4 << 20;
        // Just written: all of it; then the second half dropped.
        assert_eq!(resident_bytes(&f, size).unwrap(), size);
        assert_eq!(mincore_bytes(&f, size).unwrap(), size);
        rustix::fs::fadvise(
            &f,
            2 << 20,
            std::num::NonZeroU64::new(2 << 20),
            rustix::fs::Advice::DontNeed,
        )
        .unwrap();
        let by_mincore = mincore_bytes(&f, size).unwrap();
        assert_eq!(resident_bytes(&f, size).unwrap(), by_mincore);
        assert!(by_mincore <= 2 << 20, "{by_mincore}");
        assert!(["cachestat", "mincore"].contains(&residency_source(&f)));
    }

    #[test]
    fn a_pool_page_size_that_is_not_a_power_of_two_maps_nothing() {
        assert!(
            MappedBuffer::new_hugetlb(1 << 20, 3 << 20)
                .unwrap()
                .is_none()
        );
        assert!(MappedBuffer::new_hugetlb(1 << 20, 0).unwrap().is_none());
    }

    #[test]
    fn a_mapping_beyond_the_end_of_the_file_is_an_error_not_sigbus() {
        let page = page_size();
        let mut f = tempfile::tempfile_in("/var/tmp").unwrap();
        f.write_all(&vec![7u8; 4 * page]).unwrap();
        let m = FileMap::new(&f, 4 * page).unwrap();
        assert_eq!(m.touch_pages(0, 4 * page, page).unwrap(), 4 * 7);
        f.set_len(page as u64 + 10).unwrap();
        // Page 1 still exists (zeros after byte 10); pages 2 and 3 do not.
        let mut out = [1u8; 20];
        m.copy_out(page, &mut out).unwrap();
        assert_eq!(&out[..10], &[7u8; 10]);
        assert_eq!(&out[10..], &[0u8; 10]);
        let efault = |e: io::Error| e.raw_os_error() == Some(libc::EFAULT);
        assert!(efault(m.touch_pages(0, 4 * page, page).unwrap_err()));
        assert!(efault(m.copy_out(3 * page, &mut out).unwrap_err()));
        match m.populate(2 * page, 4 * page) {
            Ok(false) => {} // kernel before 5.14
            Ok(true) => panic!("populating beyond the end succeeded"),
            Err(e) => assert!(efault(e)),
        }
    }

    #[test]
    fn cpu_time_moves_forward() {
        let a = process_cpu_seconds();
        let mut x = 0u64;
        // Work until the counter moves (its resolution is a tick or a
        // microsecond); a counter that never moves fails after many rounds.
        let mut moved = false;
        for _ in 0..200 {
            for i in 0..5_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            if process_cpu_seconds() > a {
                moved = true;
                break;
            }
        }
        assert!(moved, "CPU time stayed at {a} s");
    }
}
