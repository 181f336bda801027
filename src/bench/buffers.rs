//! What ordinary 4 KiB-page I/O buffers cost next to huge-page ones on this
//! machine, measured once per run when the sequential tests had to run with
//! ordinary buffers (no free huge pages, no `--hugepages`).
//!
//! fio can only put its buffers in huge pages of the kernel's pool
//! (`iomem=mmaphuge`); without free pool pages there is no fio run to
//! compare with. The page size of the buffer is what matters, not fio: a
//! virtio or NVMe request is built from the buffer's pages, and 4 KiB
//! pages cap it at `max_segments` × 4 KiB where a huge page carries the
//! whole request (docs/decisions.md, read-test). So the cost is measured
//! with the test file bench already wrote: the sequential tests' shape
//! (1 MiB O_DIRECT reads, 8 in flight), once into buffers kept in base
//! pages (`MADV_NOHUGEPAGE`) and once into transparent huge pages, which
//! need no pool; in interleaved pairs, the ratio of each pair's two rates,
//! the median of the pairs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::report::rate::mb_number;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::TrustedDir;
use crate::sys::kernel::memio::MappedBuffer;
use crate::sys::kernel::signals;

/// Bytes per read: SEQ1M's block size.
pub const REQUEST_BYTES: u64 = 1 << 20;
/// Reads in flight: SEQ1M Q8T1's queue depth (one thread per read here).
pub const IN_FLIGHT: u32 = 8;
/// Bytes each pass reads at most (less when the test file is smaller).
const PASS_BYTES: u64 = 256 << 20;
/// Pairs of passes (base pages, huge pages), their order alternating.
pub const PAIRS: u32 = 3;

/// The measured cost of ordinary buffers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BufferCost {
    /// O_DIRECT reads of the test file into 4 KiB-page buffers: the median
    /// rate of the passes, bytes/s.
    pub base_pages_bytes_per_sec: f64,
    /// The same reads into transparent huge pages, bytes/s.
    pub huge_pages_bytes_per_sec: f64,
    /// The median over the pairs of base / huge (1.0: no cost).
    pub ratio: f64,
    /// The smallest and largest pair's ratio.
    pub ratio_min: f64,
    /// See `ratio_min`.
    pub ratio_max: f64,
    /// Pairs of passes, interleaved.
    pub pairs: u32,
    /// Bytes each pass read.
    pub pass_bytes: u64,
    /// Bytes per read.
    pub request_bytes: u64,
    /// Reads in flight.
    pub in_flight: u32,
}

impl BufferCost {
    /// The note that goes with a run whose sequential tests used ordinary
    /// buffers.
    pub fn describe(&self) -> String {
        format!(
            "measured here: {} O_DIRECT reads of the test file, {} in flight, into 4 KiB-page buffers ran at {:.0}% of the same reads into huge pages ({} vs {} MB/s, {} interleaved pairs, {:.0}-{:.0}%)",
            crate::parse::size::format_iec(self.request_bytes),
            self.in_flight,
            self.ratio * 100.0,
            mb_number(self.base_pages_bytes_per_sec),
            mb_number(self.huge_pages_bytes_per_sec),
            self.pairs,
            self.ratio_min * 100.0,
            self.ratio_max * 100.0,
        )
    }
}

/// Why the cost could not be measured (said in the note instead).
pub type Unmeasured = String;

/// Measures the cost on the test file `name` of the held work directory
/// (still the file `expected`, `size` bytes, written). `Ok(Err(why))`
/// when this machine cannot tell (no O_DIRECT, no transparent huge pages,
/// a file too small); `Err` only for an interrupt or a vanished file.
pub(crate) fn measure(
    dir: &TrustedDir,
    name: &str,
    expected: FileIdentity,
    size: u64,
) -> Result<std::result::Result<BufferCost, Unmeasured>> {
    use crate::sys::kernel::measure::files::{DirectOpen, open_direct};
    let span = size.min(PASS_BYTES) / REQUEST_BYTES * REQUEST_BYTES;
    if span < REQUEST_BYTES * u64::from(IN_FLIGHT) {
        return Ok(Err(format!(
            "the test file is smaller than {} reads",
            IN_FLIGHT
        )));
    }
    let path = dir.join(name);
    let file = match open_direct(dir.fd(), name, false, &path)? {
        DirectOpen::Direct(f) => f,
        DirectOpen::Unsupported => {
            return Ok(Err("O_DIRECT is not supported here".to_owned()));
        }
    };
    if FileIdentity::of(&file).ok() != Some(expected) {
        return Err(Error::new(
            crate::error::ErrorKind::State,
            format!("{} is no longer the test file bench made", path.display()),
        ));
    }
    let len = (REQUEST_BYTES * u64::from(IN_FLIGHT)) as usize;
    let alloc = |e: std::io::Error| Error::from_io(&e, "cannot allocate read buffers for", &path);
    let mut base = MappedBuffer::new_base_pages(len).map_err(alloc)?;
    let mut huge = MappedBuffer::new(len).map_err(alloc)?;
    let huge_bytes = std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| crate::parse::memory::anon_huge_bytes(&s, huge.address()))
        .unwrap_or(0);
    if huge_bytes < len as u64 {
        return Ok(Err(format!(
            "the kernel gave no transparent huge pages to compare with (transparent_hugepage: {})",
            std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned())
        )));
    }
    let mut ratios = Vec::new();
    let (mut base_rates, mut huge_rates) = (Vec::new(), Vec::new());
    for pair in 0..PAIRS {
        let one = |buf: &mut MappedBuffer| -> Result<Option<f64>> {
            signals::check()?;
            pass(&file, buf, span)
        };
        let (b, h) = if pair % 2 == 0 {
            let b = one(&mut base)?;
            (b, one(&mut huge)?)
        } else {
            let h = one(&mut huge)?;
            (one(&mut base)?, h)
        };
        let (Some(b), Some(h)) = (b, h) else {
            return Ok(Err("a read of the test file failed".to_owned()));
        };
        base_rates.push(b);
        huge_rates.push(h);
        ratios.push(b / h);
    }
    signals::check()?;
    let (ratio, ratio_min, ratio_max) = spread(&mut ratios);
    Ok(Ok(BufferCost {
        base_pages_bytes_per_sec: spread(&mut base_rates).0,
        huge_pages_bytes_per_sec: spread(&mut huge_rates).0,
        ratio,
        ratio_min,
        ratio_max,
        pairs: PAIRS,
        pass_bytes: span,
        request_bytes: REQUEST_BYTES,
        in_flight: IN_FLIGHT,
    }))
}

/// One pass: `span` bytes from the start of `file`, [`IN_FLIGHT`] threads
/// each reading the next 1 MiB into its own slice of `buf`; the rate in
/// bytes/s, or `None` when a read failed or came back short.
fn pass(file: &File, buf: &mut MappedBuffer, span: u64) -> Result<Option<f64>> {
    let next = AtomicU64::new(0);
    let slices: Vec<&mut [u8]> = buf
        .as_mut_slice()
        .chunks_mut(REQUEST_BYTES as usize)
        .take(IN_FLIGHT as usize)
        .collect();
    let start = Instant::now();
    let ok = std::thread::scope(|s| {
        let handles: Vec<_> = slices
            .into_iter()
            .map(|slice| {
                let next = &next;
                s.spawn(move || {
                    loop {
                        let off = next.fetch_add(REQUEST_BYTES, Ordering::Relaxed);
                        if off >= span || signals::interrupted() {
                            return true;
                        }
                        match file.read_at(slice, off) {
                            Ok(n) if n == slice.len() => {}
                            _ => return false,
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().all(|h| h.join().unwrap_or(false))
    });
    let seconds = start.elapsed().as_secs_f64();
    Ok((ok && seconds > 0.0).then(|| span as f64 / seconds))
}

/// Sorts `v`; its median, smallest and largest.
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (0.0, 0.0, 0.0);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_and_range_of_the_pairs() {
        assert_eq!(spread(&mut [0.7, 0.5, 0.6]), (0.6, 0.5, 0.7));
        assert_eq!(spread(&mut [0.5, 0.7]), (0.6, 0.5, 0.7));
        assert_eq!(spread(&mut []), (0.0, 0.0, 0.0));
    }

    #[test]
    fn the_note_says_what_was_measured() {
        let c = BufferCost {
            base_pages_bytes_per_sec: 1.2e9,
            huge_pages_bytes_per_sec: 2.0e9,
            ratio: 0.6,
            ratio_min: 0.55,
            ratio_max: 0.65,
            pairs: 3,
            pass_bytes: 256 << 20,
            request_bytes: 1 << 20,
            in_flight: 8,
        };
        assert_eq!(
            c.describe(),
            "measured here: 1.00MiB O_DIRECT reads of the test file, 8 in flight, into 4 KiB-page buffers ran at 60% of the same reads into huge pages (1200.0 vs 2000.0 MB/s, 3 interleaved pairs, 55-65%)"
        );
    }
}
