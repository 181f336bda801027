//! The administration commands' pause points, by name: a thin door onto
//! [`crate::hooks`] (the one test-hook protocol) for the CLI's callers.

/// Pauses at `point` (a [`crate::hooks::Pause`] name, `convert-confirmed`)
/// when a test asked for it (`BTRFS_LAB_TEST_PAUSE=POINT:PATH`, see
/// [`crate::hooks`]); nothing without the `test-hooks` feature. A signal
/// while paused only ends the wait: the run's own checks act on it.
pub fn pause_point(point: &str) {
    if let Some(p) = crate::hooks::Pause::named(point) {
        let _ = p.here("", &|| false);
    }
}
