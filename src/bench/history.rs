//! `bench` history: every suite run kept in an embedded SQLite database
//! (rusqlite with its bundled SQLite), so a kernel upgrade that halves a
//! figure does not go unnoticed. `bench --history [DIR]` shows each test's
//! trend, naming what changed in the set-up (kernel, mount options,
//! members, profile) next to every change beyond the runs' own noise
//! (the rule of [`super::compare::judge`]); `bench --compare` takes
//! history ids as well as files.
//!
//! The database is `/var/lib/btrfs-lab/bench.sqlite` unless `--db PATH`
//! (docs/history.md has the schema). Its directory is checked like every
//! directory root writes in (`sys::beneath::TrustedDir`: every component
//! root's or this user's, none writable by others), and the file must be a
//! regular file (SQLite's `SQLITE_OPEN_NOFOLLOW` refuses a link too). The layout version is SQLite's `user_version`;
//! [`MIGRATIONS`] bring an older database up to date in one transaction,
//! and a newer one (from a later btrfs-lab) is refused, never changed.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use super::compare::{self, Figure, Input, Setup, setup_changes};
use super::profile::Direction;
use super::report::{BenchReport, Status};
use crate::error::{Error, ErrorKind, Result};
use crate::report::envelope::rfc3339_seconds;
use crate::report::text::escape_path;
use crate::sys::fs::beneath::{Leaf, TrustedDir};

/// The database's file name in the state directory (`--state-dir`,
/// /var/lib/btrfs-lab by default) unless `--db`.
pub const DB_FILE: &str = "bench.sqlite";

/// The history database: `--db` when given, else [`DB_FILE`] in the state
/// directory (`--state-dir`, or the default one); made absolute, so that
/// what the report and the messages name is where it is.
pub fn db_path(
    db: Option<&std::path::Path>,
    state_dir: Option<&std::path::Path>,
) -> std::path::PathBuf {
    let p = db.map(std::path::Path::to_path_buf).unwrap_or_else(|| {
        state_dir
            .unwrap_or(std::path::Path::new(crate::scrub::STATE_DIR))
            .join(DB_FILE)
    });
    std::path::absolute(&p).unwrap_or(p)
}

/// The layout this btrfs-lab writes (SQLite's `user_version`).
pub const SCHEMA_VERSION: u32 = 2;

/// One step of the layout: from `version - 1` to `version`.
pub struct Migration {
    /// The version it makes.
    pub version: u32,
    /// Its SQL.
    pub sql: &'static str,
    /// Data it computes from what is already stored.
    pub backfill: Option<fn(&Transaction<'_>) -> rusqlite::Result<()>>,
}

/// Version 1: one row per run, with the whole report.
const V1: &str = "
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    saved_at INTEGER NOT NULL,
    machine_id TEXT,
    hostname TEXT NOT NULL,
    kernel TEXT NOT NULL,
    fio_version TEXT NOT NULL,
    btrfs_lab_version TEXT NOT NULL,
    fs_uuid TEXT,
    mount_point TEXT NOT NULL,
    profile TEXT NOT NULL,
    exit_code INTEGER NOT NULL,
    report TEXT NOT NULL
);
CREATE INDEX runs_by_filesystem ON runs (fs_uuid, saved_at);
";

/// Version 2: the set-up and one row per figure, for trends without
/// reading every report.
const V2: &str = "
ALTER TABLE runs ADD COLUMN setup TEXT;
CREATE TABLE figures (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    test TEXT NOT NULL,
    direction TEXT NOT NULL,
    status TEXT NOT NULL,
    bytes_per_sec REAL,
    bytes_per_sec_min REAL NOT NULL,
    bytes_per_sec_max REAL NOT NULL,
    best_bytes_per_sec REAL,
    iops REAL,
    clat_p50_us REAL,
    clat_p99_us REAL,
    clat_p999_us REAL,
    rounds INTEGER NOT NULL,
    PRIMARY KEY (run_id, test, direction)
);
";

/// Every layout step, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: V1,
        backfill: None,
    },
    Migration {
        version: 2,
        sql: V2,
        backfill: Some(backfill_v2),
    },
];

/// Version 2's data: the set-up and figures of every run stored before.
fn backfill_v2(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let rows: Vec<(i64, String, String)> = {
        let mut q = tx.prepare("SELECT id, report, btrfs_lab_version FROM runs")?;
        q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    for (id, text, version) in rows {
        // A report this btrfs-lab cannot read keeps its row (and shows as
        // a run without figures) rather than failing the migration.
        let Ok(report) = serde_json::from_str::<BenchReport>(&text) else {
            continue;
        };
        insert_setup_and_figures(tx, id, &report, &version)?;
    }
    Ok(())
}

fn insert_setup_and_figures(
    tx: &Transaction<'_>,
    id: i64,
    report: &BenchReport,
    version: &str,
) -> rusqlite::Result<()> {
    let setup = Setup::of(report, Some(version));
    tx.execute(
        "UPDATE runs SET setup = ?1 WHERE id = ?2",
        params![serde_json::to_string(&setup).unwrap_or_default(), id],
    )?;
    for t in &report.results {
        let ok = t.status == Status::Ok;
        tx.execute(
            "INSERT OR REPLACE INTO figures (run_id, test, direction, status, bytes_per_sec, \
             bytes_per_sec_min, bytes_per_sec_max, best_bytes_per_sec, iops, clat_p50_us, \
             clat_p99_us, clat_p999_us, rounds) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                id,
                t.name,
                t.direction.as_str(),
                if ok { "ok" } else { "flagged" },
                t.bytes_per_sec.filter(|_| ok),
                t.bytes_per_sec_min,
                t.bytes_per_sec_max,
                t.best_bytes_per_sec.filter(|_| ok),
                t.iops.filter(|_| ok),
                t.clat_p50_us.filter(|_| ok),
                t.clat_p99_us.filter(|_| ok),
                t.clat_p999_us.filter(|_| ok),
                t.runs.len() as i64,
            ],
        )?;
    }
    Ok(())
}

/// Brings `conn` to [`SCHEMA_VERSION`]; refuses a newer layout. Returns
/// the version it found.
pub fn migrate(conn: &mut Connection, shown: &str) -> Result<u32> {
    let found: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| db_error(shown, "cannot read", &e))?;
    if found > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{shown} has history layout {found}, made by a newer btrfs-lab; this one reads up to {SCHEMA_VERSION} and leaves it as it is"
            ),
        )
        .with_hint("use the newer btrfs-lab, or another --db"));
    }
    if found == SCHEMA_VERSION {
        return Ok(found);
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .map_err(|e| db_error(shown, "cannot lock", &e))?;
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute_batch(m.sql)
            .map_err(|e| db_error(shown, "cannot upgrade", &e))?;
        if let Some(f) = m.backfill {
            f(&tx).map_err(|e| db_error(shown, "cannot upgrade", &e))?;
        }
        tx.pragma_update(None, "user_version", m.version)
            .map_err(|e| db_error(shown, "cannot upgrade", &e))?;
    }
    tx.commit()
        .map_err(|e| db_error(shown, "cannot upgrade", &e))?;
    Ok(found)
}

fn no_history(shown: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!("there is no bench history at {shown}"),
    )
    .with_hint("bench DIR saves every run there (or give --db PATH)")
}

fn db_error(shown: &str, doing: &str, e: &rusqlite::Error) -> Error {
    let kind = match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            ErrorKind::Busy
        }
        Some(rusqlite::ErrorCode::PermissionDenied | rusqlite::ErrorCode::ReadOnly) => {
            ErrorKind::Permission
        }
        Some(rusqlite::ErrorCode::DiskFull) => ErrorKind::NoSpace,
        Some(rusqlite::ErrorCode::NotADatabase) => ErrorKind::Parse,
        _ => ErrorKind::Io,
    };
    Error::new(kind, format!("{doing} the bench history {shown}: {e}"))
        .with_hint("--db PATH keeps it elsewhere; --no-history runs without it")
}

/// What identifies the machine a run was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// `/etc/machine-id`, when there is one.
    pub machine_id: Option<String>,
}

impl Machine {
    /// This machine.
    pub fn current() -> Machine {
        let machine_id = std::fs::read_to_string("/etc/machine-id")
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit()));
        Machine { machine_id }
    }
}

/// id, saved_at, machine_id, setup, exit_code.
type RunRow = (i64, i64, Option<String>, Option<String>, i64);

/// An open history database.
pub struct History {
    conn: Connection,
    path: PathBuf,
    // The directory SQLite reaches the file (and its journal) through.
    _dir: TrustedDir,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").field("path", &self.path).finish()
    }
}

/// One stored run, as `--history` reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredRun {
    /// Its id (`bench --compare ID ...`).
    pub id: i64,
    /// When it was saved, seconds since the epoch.
    pub saved_at: i64,
    /// The same, RFC 3339.
    pub time: String,
    /// `/etc/machine-id` of the machine.
    pub machine_id: Option<String>,
    /// Its set-up (null for a run whose report this btrfs-lab cannot read).
    pub setup: Option<Setup>,
    /// 0 or 3 (some figure flagged).
    pub exit_code: u8,
    /// Its figures.
    pub figures: Vec<StoredFigure>,
}

/// One figure of a stored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredFigure {
    /// `SEQ1M Q8T1`.
    pub test: String,
    /// Read or write.
    pub direction: Direction,
    /// ok or flagged.
    pub status: Status,
    /// Median bytes per second (null when flagged).
    pub bytes_per_sec: Option<f64>,
    /// Slowest round.
    pub bytes_per_sec_min: f64,
    /// Fastest round.
    pub bytes_per_sec_max: f64,
    /// Best round (CrystalDiskMark's convention).
    pub best_bytes_per_sec: Option<f64>,
    /// Median IOPS.
    pub iops: Option<f64>,
    /// p99 completion latency, microseconds.
    pub clat_p99_us: Option<f64>,
    /// Rounds.
    pub rounds: u32,
}

impl StoredFigure {
    fn figure(&self) -> Option<Figure> {
        if self.status != Status::Ok {
            return None;
        }
        self.bytes_per_sec
            .filter(|m| *m > 0.0)
            .map(|median| Figure {
                median,
                min: self.bytes_per_sec_min,
                max: self.bytes_per_sec_max,
                rounds: self.rounds,
            })
    }
}

impl History {
    /// Opens (creating it and its directory when `create`) the database at
    /// `path`, migrated to [`SCHEMA_VERSION`].
    pub fn open(path: &Path, create: bool) -> Result<History> {
        let shown = escape_path(path);
        let (parent, name) = match (path.parent(), path.file_name()) {
            (Some(p), Some(n)) => (
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                },
                n,
            ),
            _ => return Err(Error::usage(format!("--db {shown} is not a file path"))),
        };
        if !create
            && matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        {
            return Err(no_history(&shown));
        }
        let dir = if create {
            TrustedDir::create(parent, Leaf::Private, 0o755)?.0
        } else {
            TrustedDir::open(parent, Leaf::Private)?
        };
        if !create && dir.stat(name)?.is_none() {
            return Err(no_history(&shown));
        }
        // The directory is root's (or this user's) alone, checked on every
        // component: no one else can put a link or another file in it.
        // SQLite reaches the file and its journal by path; what is there
        // now must be a regular file.
        if let Some(st) = dir.stat(name)?
            && !crate::sys::kernel::measure::files::is_regular(&st)
        {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!("{shown} is not a regular file: not a bench history"),
            )
            .with_hint("give --db the path of a new or existing history file"));
        }
        let through = dir.join(name);
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(&through, flags)
            .map_err(|e| db_error(&shown, "cannot open", &e))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| db_error(&shown, "cannot open", &e))?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(|e| db_error(&shown, "cannot open", &e))?;
        migrate(&mut conn, &shown)?;
        Ok(History {
            conn,
            path: path.to_path_buf(),
            _dir: dir,
        })
    }

    /// The database's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a suite report; returns its id.
    pub fn save(&mut self, report: &BenchReport, machine: &Machine) -> Result<i64> {
        let shown = escape_path(&self.path);
        let saved_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let version = env!("CARGO_PKG_VERSION");
        let text = serde_json::to_string(report)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot store the report: {e}")))?;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| db_error(&shown, "cannot write", &e))?;
        tx.execute(
            "INSERT INTO runs (saved_at, machine_id, hostname, kernel, fio_version, \
             btrfs_lab_version, fs_uuid, mount_point, profile, exit_code, report) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                saved_at,
                machine.machine_id,
                report.system.hostname,
                report.system.kernel,
                report.system.fio_version,
                version,
                report.target.uuid,
                report.target.mount_point.to_string_lossy(),
                report.parameters.profile,
                report.exit_code,
                text,
            ],
        )
        .map_err(|e| db_error(&shown, "cannot write", &e))?;
        let id = tx.last_insert_rowid();
        insert_setup_and_figures(&tx, id, report, version)
            .map_err(|e| db_error(&shown, "cannot write", &e))?;
        tx.commit()
            .map_err(|e| db_error(&shown, "cannot write", &e))?;
        Ok(id)
    }

    /// The stored runs, oldest first; only the filesystem `fs_uuid` when
    /// given.
    pub fn runs(&self, fs_uuid: Option<&str>) -> Result<Vec<StoredRun>> {
        let shown = escape_path(&self.path);
        let e = |e: rusqlite::Error| db_error(&shown, "cannot read", &e);
        let mut q = self
            .conn
            .prepare(
                "SELECT id, saved_at, machine_id, setup, exit_code FROM runs \
                 WHERE ?1 IS NULL OR fs_uuid = ?1 ORDER BY saved_at, id",
            )
            .map_err(e)?;
        let rows: Vec<RunRow> = q
            .query_map(params![fs_uuid], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .map_err(e)?
            .collect::<rusqlite::Result<_>>()
            .map_err(e)?;
        let mut f = self
            .conn
            .prepare(
                "SELECT test, direction, status, bytes_per_sec, bytes_per_sec_min, \
                 bytes_per_sec_max, best_bytes_per_sec, iops, clat_p99_us, rounds \
                 FROM figures WHERE run_id = ?1 ORDER BY rowid",
            )
            .map_err(e)?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, saved_at, machine_id, setup, exit_code) in rows {
            let figures = f
                .query_map(params![id], |r| {
                    let d: String = r.get(1)?;
                    let s: String = r.get(2)?;
                    Ok(StoredFigure {
                        test: r.get(0)?,
                        direction: Direction::parse(&d).unwrap_or(Direction::Read),
                        status: if s == "ok" {
                            Status::Ok
                        } else {
                            Status::Flagged
                        },
                        bytes_per_sec: r.get(3)?,
                        bytes_per_sec_min: r.get(4)?,
                        bytes_per_sec_max: r.get(5)?,
                        best_bytes_per_sec: r.get(6)?,
                        iops: r.get(7)?,
                        clat_p99_us: r.get(8)?,
                        rounds: r.get::<_, i64>(9)?.clamp(0, u32::MAX as i64) as u32,
                    })
                })
                .map_err(e)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(e)?;
            out.push(StoredRun {
                id,
                saved_at,
                time: rfc3339_seconds(saved_at.max(0) as u64),
                machine_id,
                setup: setup.and_then(|s| serde_json::from_str(&s).ok()),
                exit_code: exit_code.clamp(0, 255) as u8,
                figures,
            });
        }
        Ok(out)
    }

    /// Run `id`'s whole report, for `--compare`.
    pub fn input(&self, id: i64) -> Result<Input> {
        let shown = escape_path(&self.path);
        let row: Option<(String, i64, String)> = self
            .conn
            .query_row(
                "SELECT report, saved_at, btrfs_lab_version FROM runs WHERE id = ?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| db_error(&shown, "cannot read", &e))?;
        let Some((text, saved_at, version)) = row else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("the bench history {shown} has no run #{id}"),
            )
            .with_hint("bench --history lists the runs and their ids"));
        };
        let report: BenchReport = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                ErrorKind::Parse,
                format!("run #{id} in {shown} cannot be read by this btrfs-lab: {e}"),
            )
        })?;
        Ok(Input {
            name: format!("#{id}"),
            history_id: Some(id),
            time: Some(rfc3339_seconds(saved_at.max(0) as u64)),
            version: Some(version),
            report,
        })
    }

    /// The connection, for tests that plant a change.
    #[cfg(test)]
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }
}

// ---------------------------------------------------------------------
// The trend: pure, from stored runs.

/// `bench --history --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryReport {
    /// The database.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub db: PathBuf,
    /// DIR, when the history was limited to its filesystem.
    #[serde(default, serialize_with = "crate::report::text::lossy_opt_path")]
    pub dir: Option<PathBuf>,
    /// Runs shown.
    pub runs: usize,
    /// One history per filesystem (and machine).
    pub filesystems: Vec<FilesystemHistory>,
    /// The smallest relative change called beyond the noise.
    pub min_noise: f64,
    /// One sentence.
    pub summary: String,
}

/// The runs on one filesystem of one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FilesystemHistory {
    /// Its UUID.
    pub fs_uuid: Option<String>,
    /// Its mount point at the last run.
    pub mount_point: String,
    /// The machine's host name at the last run.
    pub hostname: String,
    /// The runs, oldest first.
    pub runs: Vec<RunSummary>,
    /// Each test's trend.
    pub tests: Vec<Trend>,
    /// Changes beyond the noise, one phrase each (`SEQ1M Q8T1 write ×0.50
    /// at #3 (kernel: 6.12.9 → 6.18.1)`).
    pub changes_beyond_noise: Vec<String>,
}

/// One run in a filesystem's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunSummary {
    /// Its id.
    pub id: i64,
    /// When (RFC 3339).
    pub time: String,
    /// Its set-up.
    pub setup: Option<Setup>,
    /// What changed in the set-up since the run before.
    pub changes: Vec<String>,
}

/// One test in one direction over the runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trend {
    /// `SEQ1M Q8T1`.
    pub test: String,
    /// Read or write.
    pub direction: Direction,
    /// One per run that ran it.
    pub points: Vec<TrendPoint>,
}

/// One run's figure in a trend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrendPoint {
    /// The run.
    pub run_id: i64,
    /// Median bytes per second (null when flagged).
    pub bytes_per_sec: Option<f64>,
    /// Best round.
    pub best_bytes_per_sec: Option<f64>,
    /// Spread of its rounds ((fastest − slowest) / median).
    pub spread: Option<f64>,
    /// ok or flagged.
    pub status: Status,
    /// Against the previous checked figure of this test.
    pub change: Option<TrendChange>,
}

/// A figure against the one before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrendChange {
    /// The run compared with.
    pub since_run_id: i64,
    /// This / that.
    pub ratio: f64,
    /// The noise it is judged against.
    pub noise: f64,
    /// Beyond the noise of both runs.
    pub beyond_noise: bool,
    /// What changed in the set-up between the two runs.
    pub setup_changes: Vec<String>,
}

/// The trend of `runs` (oldest first), grouped by filesystem and machine.
pub fn trend(db: &Path, dir: Option<&Path>, runs: &[StoredRun]) -> HistoryReport {
    let key = |r: &StoredRun| {
        let s = r.setup.as_ref();
        (
            r.machine_id
                .clone()
                .or_else(|| s.map(|s| s.hostname.clone())),
            s.and_then(|s| s.fs_uuid.clone())
                .or_else(|| s.map(|s| s.mount_point.clone())),
        )
    };
    let mut groups: Vec<(_, Vec<&StoredRun>)> = Vec::new();
    for r in runs {
        let k = key(r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, v)) => v.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    let filesystems: Vec<FilesystemHistory> =
        groups.into_iter().map(|(_, g)| filesystem(&g)).collect();
    let beyond: usize = filesystems
        .iter()
        .map(|f| f.changes_beyond_noise.len())
        .sum();
    let summary = if runs.is_empty() {
        "no runs stored yet: bench DIR saves every run".to_owned()
    } else if beyond == 0 {
        format!(
            "{} run{} of {} filesystem{}: no change beyond the runs' noise",
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            filesystems.len(),
            if filesystems.len() == 1 { "" } else { "s" }
        )
    } else {
        format!(
            "{} run{} of {} filesystem{}: {beyond} change{} beyond the runs' noise",
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            filesystems.len(),
            if filesystems.len() == 1 { "" } else { "s" },
            if beyond == 1 { "" } else { "s" }
        )
    };
    HistoryReport {
        db: db.to_path_buf(),
        dir: dir.map(Path::to_path_buf),
        runs: runs.len(),
        filesystems,
        min_noise: compare::MIN_NOISE,
        summary,
    }
}

fn filesystem(runs: &[&StoredRun]) -> FilesystemHistory {
    let last = runs.last().and_then(|r| r.setup.as_ref());
    let summaries: Vec<RunSummary> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| RunSummary {
            id: r.id,
            time: r.time.clone(),
            setup: r.setup.clone(),
            changes: i
                .checked_sub(1)
                .and_then(|p| runs[p].setup.as_ref())
                .zip(r.setup.as_ref())
                .map_or(Vec::new(), |(a, b)| setup_changes(a, b)),
        })
        .collect();
    let mut keys: Vec<(String, Direction)> = Vec::new();
    for f in runs.iter().flat_map(|r| r.figures.iter()) {
        let k = (f.test.clone(), f.direction);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut tests = Vec::new();
    let mut beyond = Vec::new();
    for (test, direction) in keys {
        let mut points = Vec::new();
        let mut previous: Option<(&StoredRun, Figure)> = None;
        for r in runs {
            let Some(f) = r
                .figures
                .iter()
                .find(|f| f.test == test && f.direction == direction)
            else {
                continue;
            };
            let fig = f.figure();
            let change = previous.zip(fig).map(|((p, pf), cf)| {
                let v = compare::judge(&pf, &cf);
                let setup_changes = p
                    .setup
                    .as_ref()
                    .zip(r.setup.as_ref())
                    .map_or(Vec::new(), |(a, b)| setup_changes(a, b));
                TrendChange {
                    since_run_id: p.id,
                    ratio: v.ratio,
                    noise: v.noise,
                    beyond_noise: v.beyond,
                    setup_changes,
                }
            });
            if let Some(c) = change.as_ref().filter(|c| c.beyond_noise) {
                let why = if c.setup_changes.is_empty() {
                    "nothing in the set-up changed".to_owned()
                } else {
                    c.setup_changes.join("; ")
                };
                beyond.push(format!(
                    "{test} {} ×{:.2} at #{} since #{} ({why})",
                    direction.as_str(),
                    c.ratio,
                    r.id,
                    c.since_run_id
                ));
            }
            points.push(TrendPoint {
                run_id: r.id,
                bytes_per_sec: f.bytes_per_sec.filter(|_| f.status == Status::Ok),
                best_bytes_per_sec: f.best_bytes_per_sec,
                spread: fig.and_then(|x| x.spread()),
                status: f.status,
                change,
            });
            if let Some(cf) = fig {
                previous = Some((r, cf));
            }
        }
        tests.push(Trend {
            test,
            direction,
            points,
        });
    }
    FilesystemHistory {
        fs_uuid: last.and_then(|s| s.fs_uuid.clone()),
        mount_point: last.map_or(String::new(), |s| s.mount_point.clone()),
        hostname: last.map_or(String::new(), |s| s.hostname.clone()),
        runs: summaries,
        tests,
        changes_beyond_noise: beyond,
    }
}

#[cfg(test)]
mod tests;
