//! All integration tests in one binary (as ripgrep does): one build, one
//! harness. Tests that need root skip loudly without it, and fail in CI.

mod admin;
mod bench;
mod bench_history;
mod bench_hugepages;
mod bench_lifecycle;
mod bench_security;
mod common;
mod device;
mod doctor;
mod help;
mod links;
mod loop_owner;
mod model_kernel;
mod mount_symlink;
mod nocow;
mod output;
mod packaging;
mod parse_corpus;
mod path_guard;
mod pid_fds_security;
mod probe_dio;
mod pty;
mod quiet;
mod read_test;
mod read_test_pid;
mod reclaim;
mod repo;
mod rescue;
mod rig;
mod sandbox;
mod scrub;
mod settings_ledger;
mod space;
mod transcripts;
mod untrusted_targets;
