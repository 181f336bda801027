//! The suite's measuring loop, over a fio runner and the kernel's counters
//! (both traits, so the pure tests drive it with mocks): the fill, then
//! every test's runs with the counters read around each, and the checks.

use std::time::{Duration, Instant};

use crate::bench::analysis::{self, CheckContext, Sample};
use crate::bench::jobs::{self, JobSettings};
use crate::bench::kit::{Progress, check_stop, pause};
use crate::bench::profile::{Direction, TestSpec};
use crate::bench::report::{self, FileLayout, TestResult};
use crate::bench::sensors::Sensors;
use crate::bench::suite::SuiteEvent;
use crate::error::{Error, ErrorKind, Result};
use crate::parse::fio::{FioJob, FioOutput};
use crate::report::text::escape_path;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::TrustedDir;
use crate::sys::tools::fio::{self, FioRunner};

/// What the loop needs.
#[derive(Clone)]
pub(crate) struct SuiteConfig<'a> {
    /// The tests.
    pub tests: &'a [TestSpec],
    /// Job settings.
    pub settings: JobSettings<'a>,
    /// Runs per test.
    pub runs: u32,
    /// Seconds between runs.
    pub interval_secs: u64,
    /// Where job files go (fio's working directory).
    pub(crate) work_dir: &'a TrustedDir,
    /// The test file's identity.
    pub test_file: FileIdentity,
    /// Called after each fio run: checks that fio worked on our test file
    /// (the held file's identity, size, and for writes its mtime).
    pub verify: &'a dyn Fn(Direction) -> Result<()>,
    /// How the file is filled before the reads.
    pub fill: FillMode,
    /// Evict the test file before each read run.
    pub evict: bool,
    /// Multiply fio's claims (test hook).
    pub(crate) scale_claimed: f64,
    /// Also the 70/30 mixes.
    pub mix: bool,
}

/// How the test file gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FillMode {
    /// btrfs-lab writes it: O_DIRECT, 1 MiB writes of BLAKE3 output
    /// (fio's own buffers are a multiplicative hash chain whose low bits
    /// repeat: 1-2% compressible, enough for compress-force to compress
    /// some extents).
    Own,
    /// fio writes it (test hook: compressible data).
    Fio,
    /// Not filled (test hook: fallocated only).
    Skip,
}

/// Threads that fill the test file at once.
const FILL_WRITERS: u64 = 8;

/// Writes `size` bytes of incompressible data (BLAKE3 XOF output under a
/// random key) into the test file `name` of the held work directory (which
/// must still be the file `expected`), O_DIRECT where the filesystem
/// allows, then syncs.
pub(crate) fn fill_incompressible(
    dir: &TrustedDir,
    name: &str,
    expected: FileIdentity,
    size: u64,
) -> Result<()> {
    use crate::sys::kernel::direct_io::{AlignedBuffer, write_all_at};
    const CHUNK: usize = 1 << 20;
    let path = dir.join(name);
    let f = crate::sys::kernel::measure::files::open_for_writing_direct_if_possible(
        dir.fd(),
        name,
        &path,
    )?;
    if FileIdentity::of(&f).ok() != Some(expected) {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} is no longer the test file bench made",
                escape_path(&path)
            ),
        ));
    }
    let mut key = [0u8; 32];
    let seed = format!(
        "{}-{}-{:?}",
        std::process::id(),
        nanos_seed(),
        Instant::now()
    );
    key.copy_from_slice(blake3::hash(seed.as_bytes()).as_bytes());
    let xof = blake3::Hasher::new_keyed(&key).finalize_xof();
    // FILL_WRITERS threads, each generating and writing every
    // FILL_WRITERS-th chunk: the data is made on every core while
    // FILL_WRITERS writes are in flight, as fio's fill keeps iodepth=8.
    let chunks = size.div_ceil(CHUNK as u64);
    let next = std::sync::atomic::AtomicU64::new(0);
    let failed: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..FILL_WRITERS {
            scope.spawn(|| {
                let mut xof = xof.clone();
                let mut buf = AlignedBuffer::new(CHUNK, 4096);
                let result = (|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= chunks || failed.lock().map(|g| g.is_some()).unwrap_or(true) {
                            return Ok(());
                        }
                        check_stop()?;
                        let off = i * CHUNK as u64;
                        let n = CHUNK.min((size - off) as usize);
                        // The stream at this offset: the same bytes as one
                        // writer would have written there.
                        xof.set_position(off);
                        xof.fill(&mut buf.as_mut_slice()[..n]);
                        write_all_at(&f, &buf.as_slice()[..n], off, &path)?;
                    }
                })();
                if let Err(e) = result
                    && let Ok(mut g) = failed.lock()
                {
                    g.get_or_insert(e);
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    f.sync_all()
        .map_err(|e| Error::from_io(&e, "cannot sync", &path))
}

fn nanos_seed() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// What the loop measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// Seconds the fill took.
    pub(crate) fill_seconds: f64,
    /// Bytes the members wrote during the fill.
    pub fill_device_write_bytes: Option<u64>,
    /// Layout after the fill.
    pub layout_after_fill: Option<FileLayout>,
    /// Per test and direction, each run.
    pub samples: Vec<(TestSpec, Direction, Vec<Sample>)>,
}

fn job_of(out: &FioOutput, name: &str) -> Result<FioJob> {
    out.jobs
        .iter()
        .find(|j| j.name == name)
        .cloned()
        .ok_or_else(|| Error::new(ErrorKind::Tool, format!("fio's output has no job {name}")))
}

fn sample_of(job: &FioJob, d: Direction, scale: f64) -> Sample {
    let summed;
    let dir = match d {
        Direction::Read => &job.read,
        Direction::Write => &job.write,
        Direction::Mix => match &job.mixed {
            Some(m) => m,
            None => {
                // fio without unified reporting: the sum, no percentiles.
                summed = crate::parse::fio::FioDirection {
                    io_bytes: job.read.io_bytes + job.write.io_bytes,
                    bw_bytes: job.read.bw_bytes + job.write.bw_bytes,
                    iops: job.read.iops + job.write.iops,
                    runtime_ms: job.read.runtime_ms.max(job.write.runtime_ms),
                    lat_mean_ns: (job.read.lat_mean_ns * job.read.iops
                        + job.write.lat_mean_ns * job.write.iops)
                        / (job.read.iops + job.write.iops).max(1e-9),
                    clat_p50_ns: None,
                    clat_p99_ns: None,
                    clat_p999_ns: None,
                };
                &summed
            }
        },
    };
    let us = |ns: f64| ns / 1000.0;
    let part = |io: u64| (d == Direction::Mix).then_some((io as f64 * scale) as u64);
    Sample {
        fio_error: job.error,
        claimed_bytes: (dir.io_bytes as f64 * scale) as u64,
        claimed_read_bytes: part(job.read.io_bytes),
        claimed_write_bytes: part(job.write.io_bytes),
        seconds: dir.runtime_ms as f64 / 1000.0,
        bytes_per_sec: dir.bw_bytes * scale,
        iops: dir.iops * scale,
        lat_mean_us: us(dir.lat_mean_ns),
        clat_p50_us: dir.clat_p50_ns.map(us),
        clat_p99_us: dir.clat_p99_ns.map(us),
        clat_p999_us: dir.clat_p999_ns.map(us),
        cores_per_thread: job.cores_per_thread(),
        cpu_seconds: job.cpu_seconds(),
        ..Sample::default()
    }
}

/// Fills the file, then runs every test `runs` times (reads first), with
/// the counters read around each run.
pub(crate) fn run_suite(
    cfg: &SuiteConfig<'_>,
    fio: &mut dyn FioRunner,
    sensors: &mut dyn Sensors,
    ctx: &CheckContext,
    on: &mut dyn FnMut(SuiteEvent<'_>),
) -> Result<Measured> {
    let order = jobs::order(cfg.tests, cfg.mix);
    let per_run = cfg.settings.duration_secs + cfg.interval_secs;
    let total_runs = order.len() as u64 * u64::from(cfg.runs);
    let mut measured = Measured::default();
    let mut seq = 0u32;
    let mut job_name = |what: &str| {
        seq += 1;
        format!("{seq:03}-{}.fio", what.replace(' ', "-"))
    };
    if cfg.fill != FillMode::Skip {
        on(SuiteEvent::Step(&Progress {
            what: "fill".into(),
            run: 0,
            runs: 0,
            eta_secs: total_runs * per_run,
        }));
        // Only a fio fill takes a job file (and a number).
        let name = match cfg.fill {
            FillMode::Fio => job_name("fill"),
            _ => String::new(),
        };
        fill_test_file(cfg, fio, sensors, &name, &mut measured)?;
    }
    measured.layout_after_fill = sensors.layout()?;
    let ctx = CheckContext {
        layout: measured.layout_after_fill,
        ..ctx.clone()
    };
    let mut done = 0u64;
    for (t, d) in order {
        let mut samples = Vec::new();
        let section = t.section(d);
        for run in 1..=cfg.runs {
            check_stop()?;
            if done > 0 && cfg.interval_secs > 0 {
                pause(cfg.interval_secs)?;
            }
            on(SuiteEvent::Step(&Progress {
                what: format!("{t} {}", d.as_str()),
                run,
                runs: cfg.runs,
                eta_secs: (total_runs - done) * per_run,
            }));
            let job = job_name(&section);
            samples.push(one_run(cfg, fio, sensors, (&t, d), &section, &job)?);
            done += 1;
        }
        on(SuiteEvent::Figure(&analyse_one(t, d, &samples, &ctx)));
        measured.samples.push((t, d, samples));
    }
    Ok(measured)
}

/// Fills the test file (our own incompressible writer, or fio for
/// compressible data) and records how long it took and what the members
/// wrote.
fn fill_test_file(
    cfg: &SuiteConfig<'_>,
    fio: &mut dyn FioRunner,
    sensors: &mut dyn Sensors,
    job_name: &str,
    measured: &mut Measured,
) -> Result<()> {
    let before = sensors.device_bytes()?;
    let start = Instant::now();
    if cfg.fill == FillMode::Own {
        fill_incompressible(
            cfg.work_dir,
            cfg.settings.file,
            cfg.test_file,
            cfg.settings.size_bytes,
        )?;
    } else {
        // A size-based job: allow 1 MB/s at the least.
        let fill_limit = fio::watchdog(Duration::from_secs(cfg.settings.size_bytes >> 20));
        let out = fio.run(
            cfg.work_dir,
            job_name,
            &jobs::fill_job(&cfg.settings),
            fill_limit,
            &check_stop,
        )?;
        let job = job_of(&out, "fill")?;
        if job.error != 0 {
            return Err(Error::new(
                ErrorKind::Tool,
                format!("fio could not fill the test file (error {})", job.error),
            ));
        }
    }
    measured.fill_seconds = start.elapsed().as_secs_f64();
    let after = sensors.device_bytes()?;
    measured.fill_device_write_bytes = before.zip(after).map(|(b, a)| a.1.saturating_sub(b.1));
    Ok(())
}

/// One run of one test: the cache state before it, fio, the members'
/// bytes and the pages dirtied around it, and the test file checked after.
fn one_run(
    cfg: &SuiteConfig<'_>,
    fio: &mut dyn FioRunner,
    sensors: &mut dyn Sensors,
    (t, d): (&TestSpec, Direction),
    section: &str,
    job_name: &str,
) -> Result<Sample> {
    let limit = fio::watchdog(Duration::from_secs(cfg.settings.duration_secs));
    let resident = if d.reads() {
        if cfg.evict {
            sensors.evict()?;
        }
        sensors.resident()?
    } else {
        None
    };
    let dirty_before = if d.writes() {
        sensors.watch_file()?;
        sensors.dirtied()?
    } else {
        None
    };
    let before = sensors.device_bytes()?;
    let out = {
        // The per-file trace is read while fio runs (its buffer must not
        // overrun); `stop` is polled about every 20 ms.
        let polled = std::cell::RefCell::new(&mut *sensors);
        let stop = || {
            check_stop()?;
            if d.writes() {
                polled.borrow_mut().poll();
            }
            Ok(())
        };
        fio.run(
            cfg.work_dir,
            job_name,
            &jobs::test_job(t, d, &cfg.settings),
            limit,
            &stop,
        )?
    };
    let after = sensors.device_bytes()?;
    (cfg.verify)(d)?;
    let (dirty_after, own_dirtied) = if d.writes() {
        (sensors.dirtied()?, sensors.file_dirtied()?)
    } else {
        (None, None)
    };
    let mut s = sample_of(&job_of(&out, section)?, d, cfg.scale_claimed);
    if let Some((b, a)) = before.zip(after) {
        s.device_read_bytes = Some(a.0.saturating_sub(b.0));
        s.device_write_bytes = Some(a.1.saturating_sub(b.1));
    }
    s.resident_before_bytes = resident;
    let counted = dirty_before
        .zip(dirty_after)
        .map(|(b, a)| a.saturating_sub(b));
    // The test file's own dirtied pages when traced; else the counter.
    (s.dirtied_bytes, s.dirtied_source, s.counter_dirtied_bytes) = match own_dirtied {
        Some(own) => (Some(own), Some(report::DirtiedSource::InodeTrace), counted),
        None => (counted, counted.and(sensors.counter_source()), None),
    };
    Ok(s)
}

/// Checks every run and summarizes each test.
pub(crate) fn analyse(measured: &Measured, ctx: &CheckContext) -> Vec<TestResult> {
    measured
        .samples
        .iter()
        .map(|(t, d, samples)| analyse_one(*t, *d, samples, ctx))
        .collect()
}

/// Checks one test's runs in one direction and summarizes them.
fn analyse_one(t: TestSpec, d: Direction, samples: &[Sample], ctx: &CheckContext) -> TestResult {
    let runs = samples
        .iter()
        .enumerate()
        .map(|(i, s)| analysis::run_result(i as u32 + 1, s, analysis::check_run(&t, d, s, ctx)))
        .collect();
    analysis::summarize(t, d, runs, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::kit::TEST_FILE;
    use crate::bench::profile;
    use crate::bench::report::Status;
    use crate::model::finding::Code;
    use crate::parse::fio::{FioDirection, FioJob, FioOutput};
    use crate::sys::fs::beneath::HeldDir;
    use crate::sys::tools::fio::MockFio;

    const MIB: u64 = 1 << 20;

    /// Counters that move as a scripted device would.
    #[derive(Default)]
    struct MockSensors {
        read: u64,
        written: u64,
        events: Vec<String>,
        /// Bytes the "device" moves per fio run.
        per_run: u64,
        /// The run under way reads (the loop reads residency only before
        /// reads, the dirtied counter only around writes; the fill writes).
        reading: bool,
    }

    impl Sensors for MockSensors {
        fn device_bytes(&mut self) -> Result<Option<(u64, u64)>> {
            self.events.push("counters".into());
            // Each pair of reads brackets a run: advance on the second.
            let n = self.events.iter().filter(|e| *e == "counters").count();
            if n % 2 == 0 {
                if self.reading {
                    self.read += self.per_run;
                } else {
                    self.written += self.per_run;
                }
            }
            Ok(Some((self.read, self.written)))
        }
        fn evict(&mut self) -> Result<()> {
            self.events.push("evict".into());
            Ok(())
        }
        fn resident(&mut self) -> Result<Option<u64>> {
            self.reading = true;
            Ok(Some(0))
        }
        fn dirtied(&mut self) -> Result<Option<u64>> {
            self.reading = false;
            Ok(Some(0))
        }
        fn layout(&mut self) -> Result<Option<FileLayout>> {
            Ok(Some(FileLayout::default()))
        }
    }

    fn output(name: &str, d: Direction, bytes: u64) -> FioOutput {
        let dir = FioDirection {
            io_bytes: bytes,
            bw_bytes: bytes as f64,
            iops: bytes as f64 / 4096.0,
            runtime_ms: 1000,
            lat_mean_ns: 50_000.0,
            ..FioDirection::default()
        };
        FioOutput {
            version: "fio-mock".into(),
            jobs: vec![FioJob {
                name: name.into(),
                error: 0,
                read: if d == Direction::Read {
                    dir
                } else {
                    FioDirection::default()
                },
                write: if d == Direction::Write {
                    dir
                } else {
                    FioDirection::default()
                },
                mixed: None,
                usr_cpu: 5.0,
                sys_cpu: 10.0,
                job_runtime_ms: 1000,
            }],
        }
    }

    fn scripted(tests: &[TestSpec], runs: u32, bytes: u64) -> MockFio {
        let mut fio = MockFio::default();
        fio.outputs
            .push_back(output("fill", Direction::Write, 64 * MIB));
        for (t, d) in jobs::order(tests, false) {
            for _ in 0..runs {
                fio.outputs.push_back(output(&t.section(d), d, bytes));
            }
        }
        fio
    }

    fn no_check(_: Direction) -> Result<()> {
        Ok(())
    }

    /// A private work directory in a temp dir (the mock fio never looks).
    fn work_dir() -> (tempfile::TempDir, TrustedDir) {
        let t = tempfile::tempdir().unwrap();
        let w = HeldDir::open(t.path())
            .unwrap()
            .mkdir_private("w", 0o700)
            .unwrap();
        (t, w)
    }

    fn config<'a>(tests: &'a [TestSpec], dir: &'a TrustedDir, scale: f64) -> SuiteConfig<'a> {
        SuiteConfig {
            tests,
            settings: JobSettings {
                file: TEST_FILE,
                size_bytes: 64 * MIB,
                duration_secs: 1,
                direct: true,
                compress_percentage: 0,
                huge_page_bytes: None,
            },
            runs: 3,
            interval_secs: 0,
            work_dir: dir,
            test_file: FileIdentity { dev: 0, ino: 0 },
            verify: &no_check,
            fill: FillMode::Fio,
            evict: true,
            scale_claimed: scale,
            mix: false,
        }
    }

    #[test]
    fn a_mix_is_one_figure_from_fios_unified_report() {
        // tests/fixtures/bench/PROVENANCE.md: fio 3.33, rwmixread=70.
        let out = crate::parse::fio::parse_fio_json(include_str!(
            "../../../tests/fixtures/bench/fio-3.33-mix-rnd.json"
        ))
        .unwrap();
        let s = sample_of(&out.jobs[0], Direction::Mix, 1.0);
        assert_eq!(s.claimed_bytes, 1_139_138_560);
        assert_eq!(s.claimed_read_bytes, Some(799_924_224));
        assert_eq!(s.claimed_write_bytes, Some(339_214_336));
        assert_eq!(s.bytes_per_sec, 569_284_637.0);
        assert_eq!(s.clat_p50_us, Some(407.552));
        assert_eq!(s.clat_p99_us, Some(1548.288));
        assert_eq!(s.clat_p999_us, Some(3686.4));
        // Without the unified report: the sum, and no percentiles.
        let mut job = out.jobs[0].clone();
        job.mixed = None;
        let s = sample_of(&job, Direction::Mix, 1.0);
        assert_eq!(s.claimed_bytes, 1_139_138_560);
        assert_eq!(s.clat_p99_us, None);
        // A read run of the same job is its read side only.
        assert_eq!(
            sample_of(&out.jobs[0], Direction::Read, 1.0).claimed_read_bytes,
            None
        );
    }

    #[test]
    fn the_suite_fills_first_reads_before_writes_and_evicts_before_reads() {
        let tests = &profile::DEFAULT_TESTS[..2];
        let (_t, w) = work_dir();
        let dir = &w;
        let mut fio = scripted(tests, 3, 100 * MIB);
        let mut sensors = MockSensors {
            per_run: 100 * MIB,
            ..MockSensors::default()
        };
        let mut seen = Vec::new();
        let mut figures = Vec::new();
        let ctx = CheckContext {
            size_bytes: 64 * MIB,
            devices_known: true,
            ..CheckContext::default()
        };
        let m = run_suite(
            &config(tests, dir, 1.0),
            &mut fio,
            &mut sensors,
            &ctx,
            &mut |e| match e {
                SuiteEvent::Step(p) => seen.push((p.what.clone(), p.run, p.eta_secs)),
                SuiteEvent::Figure(r) => {
                    // Each figure as soon as its runs are done: after the
                    // steps of its runs, before the next test's.
                    figures.push((r.name.clone(), r.direction, r.status, seen.len()));
                }
                SuiteEvent::Begun(_) => unreachable!("the loop does not begin the report"),
            },
        )
        .unwrap();
        assert!(fio.jobs[0].contains("[fill]"));
        assert_eq!(fio.jobs.len(), 1 + 4 * 3);
        let sections: Vec<&str> = fio.jobs[1..]
            .iter()
            .map(|j| {
                j.lines()
                    .find(|l| l.starts_with('[') && *l != "[global]")
                    .unwrap()
            })
            .collect();
        assert!(
            sections[..6].iter().all(|s| s.ends_with("-read]")),
            "{sections:?}"
        );
        assert!(sections[6..].iter().all(|s| s.ends_with("-write]")));
        assert_eq!(sensors.events.iter().filter(|e| *e == "evict").count(), 6);
        assert_eq!(seen[0], ("fill".to_owned(), 0, 12));
        assert_eq!(seen[1], ("SEQ1M Q8T1 read".to_owned(), 1, 12));
        assert_eq!(seen.last().unwrap().2, 1);
        // A figure after each test's 3 runs, reads first (1 step: the fill).
        assert_eq!(
            figures,
            [
                ("SEQ1M Q8T1".to_owned(), Direction::Read, Status::Ok, 1 + 3),
                ("SEQ1M Q1T1".to_owned(), Direction::Read, Status::Ok, 1 + 6),
                ("SEQ1M Q8T1".to_owned(), Direction::Write, Status::Ok, 1 + 9),
                (
                    "SEQ1M Q1T1".to_owned(),
                    Direction::Write,
                    Status::Ok,
                    1 + 12
                ),
            ]
        );
        // Honest mock: every figure checks out.
        let results = analyse(
            &m,
            &CheckContext {
                size_bytes: 64 * MIB,
                devices_known: true,
                layout: m.layout_after_fill,
                ..CheckContext::default()
            },
        );
        assert_eq!(results.len(), 4);
        assert!(
            results.iter().all(|r| r.status == Status::Ok),
            "{results:#?}"
        );
        assert_eq!(results[0].runs[0].device_read_bytes, Some(100 * MIB));
        assert_eq!(m.fill_device_write_bytes, Some(100 * MIB));
    }

    #[test]
    fn scaled_claims_are_caught_by_the_device_counters() {
        let tests = &profile::DEFAULT_TESTS[..1];
        let (_t, w) = work_dir();
        let dir = &w;
        let mut fio = scripted(tests, 3, 100 * MIB);
        let mut sensors = MockSensors {
            per_run: 100 * MIB,
            ..MockSensors::default()
        };
        let ctx = CheckContext {
            size_bytes: 64 * MIB,
            devices_known: true,
            ..CheckContext::default()
        };
        let mut streamed = Vec::new();
        let m = run_suite(
            &config(tests, dir, 2.0),
            &mut fio,
            &mut sensors,
            &ctx,
            &mut |e| {
                if let SuiteEvent::Figure(r) = e {
                    streamed.push(r.clone());
                }
            },
        )
        .unwrap();
        let results = analyse(&m, &ctx);
        assert!(results.iter().all(|r| r.status == Status::Flagged));
        // What was said as each figure finished is what the report says.
        assert_eq!(streamed, results);
        assert_eq!(results[0].checks[0].code, Code::BenchDeviceMismatch);
        assert_eq!(results[0].claimed_bytes_per_sec, 200.0 * MIB as f64);
    }
}
