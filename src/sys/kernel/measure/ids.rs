//! Who this process runs as, for the measuring jobs' ownership checks.

/// The real uid of this process.
pub(crate) fn real_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The effective uid of this process.
pub(crate) fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The calling thread's id.
pub(crate) fn thread_id() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}
