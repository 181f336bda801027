//! Test hooks (only with the `test-hooks` cargo feature, which release
//! builds do not enable): pause a run at a named point so an integration
//! test can change the world meanwhile.
//!
//! `BTRFS_LAB_TEST_PAUSE_AT=POINT:DIR` makes the run create `DIR/reached`
//! at `POINT` and wait there until `DIR/go` exists.

/// Pauses at `point` when the test asked for it (see the module docs).
#[cfg(feature = "test-hooks")]
pub fn pause_point(point: &str) {
    use std::path::Path;
    let Ok(v) = std::env::var("BTRFS_LAB_TEST_PAUSE_AT") else {
        return;
    };
    let Some((name, dir)) = v.split_once(':') else {
        return;
    };
    if name != point {
        return;
    }
    let dir = Path::new(dir);
    let _ = std::fs::write(dir.join("reached"), point);
    // Bounded, so a broken test cannot hang forever (10 minutes).
    for _ in 0..60_000 {
        if dir.join("go").exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Without the `test-hooks` feature: nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline]
pub fn pause_point(_point: &str) {}
