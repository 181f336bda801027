//! SIGINT/SIGTERM: the first one asks the running operation to stop at a
//! safe point and clean up; a second one exits at once.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};

use crate::error::{Error, Result, exit};

static FLAG: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Installs the handlers. Safe to call more than once.
pub fn install() -> Result<()> {
    for sig in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as it was before this signal:
        // only a second signal exits immediately.
        signal_hook::flag::register_conditional_shutdown(
            sig,
            i32::from(exit::INTERRUPTED),
            Arc::clone(&FLAG),
        )
        .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&FLAG)))
        .map_err(|e| {
            Error::new(
                crate::error::ErrorKind::Io,
                format!("cannot install signal handlers: {e}"),
            )
        })?;
    }
    Ok(())
}

/// True once SIGINT or SIGTERM arrived.
pub fn interrupted() -> bool {
    FLAG.load(Ordering::SeqCst)
}

/// `Err(interrupted)` once a signal arrived: call at safe points.
pub fn check() -> Result<()> {
    if interrupted() {
        Err(Error::interrupted())
    } else {
        Ok(())
    }
}
