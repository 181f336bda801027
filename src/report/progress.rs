//! How far a long job is, as a person should read it: the one meter behind
//! every progress bar, log line and JSON Lines progress record (convert,
//! device replace and remove, rescue, nocow --migrate, probe-dio).
//!
//! The rules (issue 26):
//! - **bytes are the measure** where the kernel gives bytes; chunks or
//!   files are a detail the job adds to the words;
//! - the **rate comes from a sliding window** of the moments the count
//!   moved ([`WINDOW`]), not from the start of the run: it follows the work,
//!   and when the work stops it is not shown ("no progress for 25s")
//!   instead of decaying towards zero;
//! - the **ETA is shown only once it is stable**: the predicted end of the
//!   last three moves agree within a quarter of the time left (or 5 s), and
//!   never after a pause was asked for (the work is about to stop);
//! - it counts down between moves (a balance moves a chunk at a time).
//!
//! Pure: the job passes the instant of each observation, so the rules are
//! tested without a clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The moves a rate is computed from: those of the last 20 s (always the
/// last two, however old, so a slow chunk-by-chunk balance has a rate).
pub const WINDOW: Duration = Duration::from_secs(20);

/// The shortest span a rate is computed over.
const MIN_SPAN: Duration = Duration::from_secs(2);

/// How many predicted ends must agree before an ETA is shown.
const STABLE_AFTER: usize = 3;

/// What the work is doing, as far as the counts tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Pace {
    /// Not enough moves yet for a rate.
    Measuring,
    /// Moving: the rate is the window's.
    Running,
    /// No move for much longer than the moves so far took (the kernel may
    /// be on a large chunk, or stuck): no rate, no ETA.
    Stalled,
    /// A pause or a stop was asked for: the work ends after its current
    /// step, so no ETA.
    Pausing,
    /// Everything counted is done.
    Done,
}

/// [`Pace::Running`]: what a record written before `pace` existed meant.
pub(crate) fn running() -> Pace {
    Pace::Running
}

/// One observation, read through the rules above.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reading {
    /// Bytes done.
    pub done_bytes: u64,
    /// Bytes in all (0 when unknown).
    pub total_bytes: u64,
    /// Bytes per second over the window; `null` while measuring, stalled
    /// or pausing.
    pub rate_bytes_per_sec: Option<f64>,
    /// Seconds left; `null` until stable, and while stalled or pausing.
    pub eta_seconds: Option<f64>,
    /// What the work is doing.
    pub pace: Pace,
    /// Seconds since the count last moved.
    pub idle_seconds: f64,
}

impl Reading {
    /// Done as a share of the total (0..=1), when the total is known.
    pub fn fraction(&self) -> Option<f64> {
        (self.total_bytes > 0)
            .then(|| (self.done_bytes as f64 / self.total_bytes as f64).clamp(0.0, 1.0))
    }
}

/// The meter of one piece of work (one device of a remove, one run of a
/// conversion). Feed it every observation; a count that goes backwards
/// starts it anew.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    /// The first observation, then every move: (when, bytes done).
    moves: VecDeque<(Instant, u64)>,
    /// The end predicted at each of the last moves.
    ends: VecDeque<Instant>,
    pausing: bool,
}

impl Meter {
    /// A meter with no observation yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A pause (or stop) was asked for: no ETA from now on.
    pub fn pausing(&mut self) {
        self.pausing = true;
    }

    /// Whether [`Meter::pausing`] was called.
    pub fn is_pausing(&self) -> bool {
        self.pausing
    }

    /// Observes `done` of `total` bytes now.
    pub fn observe(&mut self, done: u64, total: u64) -> Reading {
        self.observe_at(Instant::now(), done, total)
    }

    /// Observes `done` of `total` bytes at `now`.
    pub fn observe_at(&mut self, now: Instant, done: u64, total: u64) -> Reading {
        let moved = match self.moves.back() {
            Some(&(_, last)) if done < last => {
                // Counted anew (a new step): the old moves say nothing.
                self.moves.clear();
                self.ends.clear();
                true
            }
            Some(&(_, last)) => done > last,
            None => true,
        };
        if moved {
            self.moves.push_back((now, done));
        }
        while self.moves.len() > 2
            && self
                .moves
                .get(1)
                .is_some_and(|&(t, _)| now.saturating_duration_since(t) > WINDOW)
        {
            self.moves.pop_front();
        }
        let (t_last, _) = *self.moves.back().unwrap_or(&(now, done));
        let idle = now.saturating_duration_since(t_last);
        let mut reading = Reading {
            done_bytes: done,
            total_bytes: total,
            rate_bytes_per_sec: None,
            eta_seconds: None,
            pace: Pace::Measuring,
            idle_seconds: idle.as_secs_f64(),
        };
        if total > 0 && done >= total {
            reading.pace = Pace::Done;
            reading.eta_seconds = Some(0.0);
            reading.rate_bytes_per_sec = self.rate();
            return reading;
        }
        if self.pausing {
            reading.pace = Pace::Pausing;
            return reading;
        }
        let Some(rate) = self.rate() else {
            return reading;
        };
        let span = self.span();
        let gaps = (self.moves.len() - 1) as f64;
        let typical_gap = span.as_secs_f64() / gaps;
        if idle.as_secs_f64() > (3.0 * typical_gap).max(10.0) {
            reading.pace = Pace::Stalled;
            self.ends.clear();
            return reading;
        }
        reading.pace = Pace::Running;
        reading.rate_bytes_per_sec = Some(rate);
        if total == 0 {
            return reading;
        }
        let left_at_last_move = total.saturating_sub(done) as f64 / rate;
        let end = t_last + Duration::from_secs_f64(left_at_last_move.min(1e9));
        if moved {
            self.ends.push_back(end);
            while self.ends.len() > STABLE_AFTER {
                self.ends.pop_front();
            }
        }
        let eta = end.saturating_duration_since(now).as_secs_f64();
        if self.ends.len() >= STABLE_AFTER {
            let first = self.ends.iter().min().copied().unwrap_or(end);
            let last = self.ends.iter().max().copied().unwrap_or(end);
            let spread = last.saturating_duration_since(first).as_secs_f64();
            if spread <= (0.25 * eta).max(5.0) {
                reading.eta_seconds = Some(eta);
            }
        }
        reading
    }

    /// The time between the first and the last move in the window.
    fn span(&self) -> Duration {
        match (self.moves.front(), self.moves.back()) {
            (Some(&(t0, _)), Some(&(t1, _))) => t1.saturating_duration_since(t0),
            _ => Duration::ZERO,
        }
    }

    /// Bytes per second between the first and the last move in the window,
    /// when they are at least [`MIN_SPAN`] apart.
    fn rate(&self) -> Option<f64> {
        let (&(_, d0), &(_, d1)) = (self.moves.front()?, self.moves.back()?);
        let span = self.span();
        (span >= MIN_SPAN && d1 > d0).then(|| (d1 - d0) as f64 / span.as_secs_f64())
    }
}

/// One JSON Lines progress record of a job whose `--json` streams
/// (`device replace`, `device remove`, `rescue --copy-to`): at most one a
/// second, then the job's report as the last line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProgressRecord {
    /// `progress`.
    pub event: ProgressEvent,
    /// Which job: `device-replace`, `device-remove`, `rescue`.
    pub operation: String,
    /// What it is on (`device 3 (1/2)`, a file's name); `null` for one
    /// piece of work.
    pub step: Option<String>,
    /// Where it is.
    #[serde(flatten)]
    pub reading: Reading,
}

/// The tag of a [`ProgressRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProgressEvent {
    /// A progress record.
    Progress,
}

/// The words of a reading after its sizes: `250.00MiB/s, ETA 0m12s`,
/// `measuring the rate`, `no progress for 25s`, `pausing`, `done`.
/// `rate` formats a rate (the caller's units).
pub fn pace_words(r: &Reading, rate: impl Fn(f64) -> String) -> String {
    match r.pace {
        Pace::Measuring => "measuring the rate".to_owned(),
        Pace::Stalled => format!("no progress for {}", super::rate::duration(r.idle_seconds)),
        Pace::Pausing => "pausing".to_owned(),
        Pace::Done => "done".to_owned(),
        Pace::Running => {
            let speed = r.rate_bytes_per_sec.map_or(String::new(), &rate);
            match r.eta_seconds {
                Some(s) => format!("{speed}, ETA {}", super::rate::duration(s)),
                None => speed,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn at(t0: Instant, secs: f64) -> Instant {
        t0 + Duration::from_secs_f64(secs)
    }

    #[test]
    fn no_rate_and_no_eta_until_the_count_has_moved_for_a_while() {
        let t0 = Instant::now();
        let mut m = Meter::new();
        let r = m.observe_at(t0, 0, 100 * MIB);
        assert_eq!(r.pace, Pace::Measuring);
        assert_eq!(r.rate_bytes_per_sec, None);
        let r = m.observe_at(at(t0, 1.0), 10 * MIB, 100 * MIB);
        assert_eq!(r.pace, Pace::Measuring, "one second is too short a span");
        let r = m.observe_at(at(t0, 2.0), 20 * MIB, 100 * MIB);
        assert_eq!(r.rate_bytes_per_sec, Some(10.0 * MIB as f64));
        assert_eq!(r.eta_seconds, None, "one predicted end is not yet stable");
        m.observe_at(at(t0, 3.0), 30 * MIB, 100 * MIB);
        let r = m.observe_at(at(t0, 4.0), 40 * MIB, 100 * MIB);
        let eta = r.eta_seconds.expect("three ends agree");
        assert!((eta - 6.0).abs() < 1e-6, "{eta}");
    }

    #[test]
    fn the_eta_counts_down_between_chunks_and_stays_hidden_while_ends_disagree() {
        let t0 = Instant::now();
        let mut m = Meter::new();
        let total = 10 * 1024 * MIB;
        // A chunk of 1 GiB every 5 s.
        for k in 0..=3u64 {
            m.observe_at(at(t0, 5.0 * k as f64), k * 1024 * MIB, total);
        }
        let r = m.observe_at(at(t0, 15.0), 3 * 1024 * MIB, total);
        assert!((r.eta_seconds.unwrap() - 35.0).abs() < 1e-6);
        let r = m.observe_at(at(t0, 18.0), 3 * 1024 * MIB, total);
        assert!((r.eta_seconds.unwrap() - 32.0).abs() < 1e-6, "counts down");
        // A chunk that took 30 s instead of 5: the ends disagree.
        let r = m.observe_at(at(t0, 45.0), 4 * 1024 * MIB, total);
        assert_eq!(r.pace, Pace::Running);
        assert_eq!(r.eta_seconds, None, "{r:?}");
    }

    #[test]
    fn the_rate_follows_the_last_window_not_the_whole_run() {
        let t0 = Instant::now();
        let mut m = Meter::new();
        // 60 s at 10 MiB/s, then 20 s at 100 MiB/s.
        let mut done = 0;
        for s in 0..60 {
            m.observe_at(at(t0, s as f64), done, 0);
            done += 10 * MIB;
        }
        let mut r = m.observe_at(at(t0, 60.0), done, 0);
        for s in 61..=90 {
            done += 100 * MIB;
            r = m.observe_at(at(t0, s as f64), done, 0);
        }
        let rate = r.rate_bytes_per_sec.unwrap() / MIB as f64;
        assert!((rate - 100.0).abs() < 1.0, "{rate}");
        assert_eq!(r.eta_seconds, None, "no total, no ETA");
    }

    #[test]
    fn when_the_work_stops_the_rate_is_not_shown_decaying() {
        let t0 = Instant::now();
        let mut m = Meter::new();
        for s in 0..=5 {
            m.observe_at(at(t0, s as f64), s * 10 * MIB, 100 * MIB);
        }
        let r = m.observe_at(at(t0, 8.0), 50 * MIB, 100 * MIB);
        assert_eq!(r.pace, Pace::Running, "a short gap is not a stall");
        assert_eq!(r.rate_bytes_per_sec, Some(10.0 * MIB as f64));
        let r = m.observe_at(at(t0, 20.0), 50 * MIB, 100 * MIB);
        assert_eq!(r.pace, Pace::Stalled);
        assert_eq!((r.rate_bytes_per_sec, r.eta_seconds), (None, None));
        assert_eq!(pace_words(&r, |_| String::new()), "no progress for 0m15s");
        // It moves again: a rate at once (the old moves are in the window),
        // but the ETA waits for three agreeing ends again.
        let r = m.observe_at(at(t0, 21.0), 60 * MIB, 100 * MIB);
        assert_eq!(r.pace, Pace::Running);
        assert_eq!(r.eta_seconds, None);
    }

    #[test]
    fn a_pause_hides_the_eta_for_good_and_done_is_done() {
        let t0 = Instant::now();
        let mut m = Meter::new();
        for s in 0..=5 {
            m.observe_at(at(t0, s as f64), s * 10 * MIB, 100 * MIB);
        }
        assert!(
            m.observe_at(at(t0, 5.5), 50 * MIB, 100 * MIB)
                .eta_seconds
                .is_some()
        );
        m.pausing();
        let r = m.observe_at(at(t0, 6.0), 60 * MIB, 100 * MIB);
        assert_eq!(
            (r.pace, r.eta_seconds, r.rate_bytes_per_sec),
            (Pace::Pausing, None, None)
        );
        assert_eq!(pace_words(&r, |_| String::new()), "pausing");
        let r = m.observe_at(at(t0, 7.0), 100 * MIB, 100 * MIB);
        assert_eq!(r.pace, Pace::Done);
        assert_eq!(r.fraction(), Some(1.0));
    }

    #[test]
    fn a_count_that_starts_anew_measures_anew() {
        let t0 = Instant::now();
        let mut m = Meter::new();
        for s in 0..=5 {
            m.observe_at(at(t0, s as f64), s * 10 * MIB, 100 * MIB);
        }
        let r = m.observe_at(at(t0, 6.0), MIB, 50 * MIB);
        assert_eq!(r.pace, Pace::Measuring, "{r:?}");
        assert_eq!(
            pace_words(
                &Reading {
                    pace: Pace::Running,
                    rate_bytes_per_sec: Some(2.0),
                    eta_seconds: Some(90.0),
                    ..r
                },
                |b| format!("{b} B/s")
            ),
            "2 B/s, ETA 1m30s"
        );
    }
}
