//! A running process seen from `/proc/PID`: who it is (pid + start time, so
//! a reused pid is told apart; its owner; a kernel thread), its I/O
//! counters (`io`), its threads (`task/TID/stat` and `task/TID/io`) and the
//! resident bytes of its file mappings (`smaps`). Read-only, no ptrace.

use std::fs;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;

/// `PF_KTHREAD` in the `flags` field of `stat`.
pub(crate) const PF_KTHREAD: u32 = 0x0020_0000;

/// Bounded reads: `smaps` of a big process is long, the rest is short.
const STAT_CAP: usize = 64 << 10;
const SMAPS_CAP: usize = 64 << 20;

/// The fields of `/proc/PID/stat` (or `task/TID/stat`) used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ProcStat {
    /// `R`, `S`, `D`, `Z`, ...
    pub(crate) state: char,
    /// Parent pid.
    pub(crate) ppid: u32,
    /// `PF_*` flags.
    pub(crate) flags: u32,
    /// Minor faults.
    pub(crate) minflt: u64,
    /// Major faults (the page came from storage).
    pub(crate) majflt: u64,
    /// User time, clock ticks.
    pub(crate) utime: u64,
    /// System time, clock ticks.
    pub(crate) stime: u64,
    /// Start time after boot, clock ticks: with the pid, the identity.
    pub(crate) starttime: u64,
}

/// Parses a `stat` line. The command name is in parentheses and may hold
/// spaces and parentheses itself: the fields start after the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // f[0] is field 3 (state).
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        ppid: num(1)? as u32,
        flags: num(6)? as u32,
        minflt: num(7)?,
        majflt: num(9)?,
        utime: num(11)?,
        stime: num(12)?,
        starttime: num(19)?,
    })
}

/// The counters of `/proc/PID/io` (or `task/TID/io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct IoCounters {
    /// Bytes returned by read calls (page cache or not; not mmap).
    pub(crate) rchar: u64,
    /// Bytes passed to write calls.
    pub(crate) wchar: u64,
    /// Read calls.
    pub(crate) syscr: u64,
    /// Bytes this task caused to be read from storage (submitted bios:
    /// O_DIRECT reads, readahead, page faults).
    pub(crate) read_bytes: u64,
    /// Bytes sent to storage.
    pub(crate) write_bytes: u64,
}

/// Parses the text of an `io` file.
pub(crate) fn parse_io(text: &str) -> Option<IoCounters> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(IoCounters {
        rchar: field("rchar")?,
        wchar: field("wchar")?,
        syscr: field("syscr")?,
        read_bytes: field("read_bytes")?,
        write_bytes: field("write_bytes")?,
    })
}

/// Largest `environ` read (a process's environment is at most a few pages).
const ENVIRON_CAP: usize = 1 << 20;

/// The values of the environment variables `names` that `pid` started
/// with (`/proc/PID/environ`: root or its owner), in the order given;
/// empty when unreadable.
pub(crate) fn environ(root: &SysRoot, pid: u32, names: &[&str]) -> Vec<(String, String)> {
    root.read_bytes(&root.proc(&format!("{pid}/environ")), ENVIRON_CAP)
        .map(|b| parse_environ(&b, names))
        .unwrap_or_default()
}

/// The `NAME=value` entries of an `environ` (NUL-separated) among `names`.
pub(crate) fn parse_environ(bytes: &[u8], names: &[&str]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for entry in bytes.split(|b| *b == 0) {
        let entry = String::from_utf8_lossy(entry);
        if let Some((k, v)) = entry.split_once('=')
            && names.contains(&k)
            && !out.iter().any(|(n, _)| n == k)
        {
            out.push((k.to_owned(), v.to_owned()));
        }
    }
    out.sort_by_key(|(k, _)| names.iter().position(|n| n == k));
    out
}

/// The parents of `pid`, nearest first, at most `depth`, init excluded.
pub(crate) fn ancestors(root: &SysRoot, pid: u32, depth: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = pid;
    while out.len() < depth {
        match stat_of(root, at) {
            Ok(st) if st.ppid > 1 => {
                out.push(st.ppid);
                at = st.ppid;
            }
            _ => break,
        }
    }
    out
}

/// Who a process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Process id.
    pub(crate) pid: u32,
    /// Start time after boot, clock ticks.
    pub(crate) start_ticks: u64,
    /// Real uid (`Uid:` of `status`).
    pub(crate) uid: u32,
    /// A kernel thread (no user memory, no files of its own).
    pub(crate) kernel_thread: bool,
    /// `comm`.
    pub(crate) comm: String,
}

fn no_such_process(pid: u32) -> Error {
    Error::new(ErrorKind::NotFound, format!("no process with pid {pid}"))
        .with_hint("give the pid of a running process (see `pgrep NAME`)")
}

/// The `stat` of `pid`; NotFound when it is gone.
pub(crate) fn stat_of(root: &SysRoot, pid: u32) -> Result<ProcStat> {
    let p = root.proc(&format!("{pid}/stat"));
    let text = root.read_text(&p, STAT_CAP).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => no_such_process(pid),
        _ => Error::from_io(&e, "cannot read", &p),
    })?;
    parse_stat(&text)
        .ok_or_else(|| Error::new(ErrorKind::Parse, format!("{} does not parse", p.display())))
}

fn uid_of(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Who `pid` is now.
pub(crate) fn identity(root: &SysRoot, pid: u32) -> Result<Identity> {
    if pid == 0 {
        return Err(no_such_process(pid));
    }
    let st = stat_of(root, pid)?;
    let status = root
        .read_text(&root.proc(&format!("{pid}/status")), STAT_CAP)
        .map_err(|_| no_such_process(pid))?;
    let uid = uid_of(&status).ok_or_else(|| {
        Error::new(
            ErrorKind::Parse,
            format!("/proc/{pid}/status has no Uid line"),
        )
    })?;
    // A kernel thread: PF_KTHREAD, or a child of kthreadd (pid 2), or pid 2.
    let kernel_thread = st.flags & PF_KTHREAD != 0 || st.ppid == 2 || pid == 2;
    let comm = root
        .read_attr(&root.proc(&format!("{pid}/comm")))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".to_owned());
    Ok(Identity {
        pid,
        start_ticks: st.starttime,
        uid,
        kernel_thread,
        comm,
    })
}

/// `pid` is still the process `id` (same start time): false when it is
/// gone, a zombie, or the pid now names another process.
pub(crate) fn still(root: &SysRoot, id: &Identity) -> Liveness {
    match stat_of(root, id.pid) {
        Ok(st) if st.starttime != id.start_ticks => Liveness::Reused,
        Ok(st) if st.state == 'Z' || st.state == 'X' => Liveness::Exited,
        Ok(_) => Liveness::Running,
        Err(_) => Liveness::Exited,
    }
}

/// What became of a watched process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Still the same process.
    Running,
    /// Gone (or a zombie).
    Exited,
    /// The pid now names a process that started later.
    Reused,
}

/// `/proc/PID/io` of the whole process (all its threads, the dead ones too).
pub(crate) fn io_of(root: &SysRoot, pid: u32) -> Option<IoCounters> {
    let text = root
        .read_text(&root.proc(&format!("{pid}/io")), STAT_CAP)
        .ok()?;
    parse_io(&text)
}

/// One thread, sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadSample {
    /// Thread id.
    pub(crate) tid: u32,
    /// Its name (`comm`).
    pub(crate) name: String,
    /// Its `stat`.
    pub(crate) stat: ProcStat,
    /// Its `io`, when readable.
    pub(crate) io: Option<IoCounters>,
}

/// The threads of `pid` now (those that exit while listed are skipped).
pub(crate) fn threads(root: &SysRoot, pid: u32) -> Vec<ThreadSample> {
    let dir = root.proc(&format!("{pid}/task"));
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let base = format!("{pid}/task/{tid}");
        let Some(stat) = root
            .read_text(&root.proc(&format!("{base}/stat")), STAT_CAP)
            .ok()
            .and_then(|t| parse_stat(&t))
        else {
            continue;
        };
        let io = root
            .read_text(&root.proc(&format!("{base}/io")), STAT_CAP)
            .ok()
            .and_then(|t| parse_io(&t));
        let name = root
            .read_attr(&root.proc(&format!("{base}/comm")))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        out.push(ThreadSample {
            tid,
            name,
            stat,
            io,
        });
    }
    out.sort_by_key(|t| t.tid);
    out
}

/// One file mapping of `smaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileMappingRss {
    /// Start address (with the end, `map_files/START-END`).
    pub(crate) start: u64,
    /// End address.
    pub(crate) end: u64,
    /// Permissions (`r-xp`, `r--s`).
    pub(crate) perms: String,
    /// Inode of the mapped file.
    pub(crate) inode: u64,
    /// Its path as the process sees it.
    pub(crate) path: String,
    /// Resident bytes of this mapping in the process (`Rss:`).
    pub(crate) rss_bytes: u64,
}

/// Parses `smaps`: the file mappings and their resident bytes.
pub(crate) fn parse_smaps(text: &str) -> Vec<FileMappingRss> {
    let mut out: Vec<FileMappingRss> = Vec::new();
    let mut current: Option<FileMappingRss> = None;
    for line in text.lines() {
        let head = line.split_ascii_whitespace().next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-')
            && let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            out.extend(current.take());
            current = crate::parse::proc_maps::parse_maps_line(line).map(|m| FileMappingRss {
                start,
                end,
                perms: line
                    .split_ascii_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .to_owned(),
                inode: m.inode,
                path: m.path.to_owned(),
                rss_bytes: 0,
            });
            continue;
        }
        if let (Some(m), Some(v)) = (current.as_mut(), line.strip_prefix("Rss:")) {
            let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            m.rss_bytes = kb << 10;
        }
    }
    out.extend(current);
    out
}

/// The file mappings of `pid` with their resident bytes; None when
/// `smaps` cannot be read (the process is gone, or not ours).
pub(crate) fn file_mappings(root: &SysRoot, pid: u32) -> Option<Vec<FileMappingRss>> {
    root.read_text(&root.proc(&format!("{pid}/smaps")), SMAPS_CAP)
        .ok()
        .map(|t| parse_smaps(&t))
}

/// Clock ticks per second (`stat`'s times are counted in them).
pub(crate) fn clock_ticks() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environ_keeps_only_the_names_asked_for() {
        let e = b"PATH=/usr/bin\0KVIKIO_NTHREADS=8\0X=a=b\0\xff\xfe\0KVIKIO_NTHREADS=9\0";
        assert_eq!(
            parse_environ(e, &["X", "KVIKIO_NTHREADS", "NONE"]),
            vec![
                ("X".to_owned(), "a=b".to_owned()),
                ("KVIKIO_NTHREADS".to_owned(), "8".to_owned())
            ]
        );
    }

    #[test]
    fn stat_fields_after_a_command_with_parentheses() {
        let t = "4242 (a (b) c) D 1 4242 4242 0 -1 4194560 1500 0 7 0 250 30 0 0 20 0 5 0 123456 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
        let s = parse_stat(t).unwrap();
        assert_eq!(s.state, 'D');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.flags, 4194560);
        assert_eq!((s.minflt, s.majflt), (1500, 7));
        assert_eq!((s.utime, s.stime), (250, 30));
        assert_eq!(s.starttime, 123456);
        assert_eq!(parse_stat("1 (x) S 0"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn io_counters() {
        let t = "rchar: 10\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
        let io = parse_io(t).unwrap();
        assert_eq!((io.rchar, io.syscr, io.read_bytes), (10, 3, 4096));
        assert_eq!(parse_io("rchar: 1\n"), None);
    }

    #[test]
    fn smaps_rss_per_file_mapping() {
        let t = "\
7f0000000000-7f0040000000 r--s 00000000 00:2f 262                        /data/model.gguf
Size:            1048576 kB
Rss:              524288 kB
Pss:              524288 kB
7f0040000000-7f0040021000 rw-p 00000000 00:00 0 
Size:                132 kB
Rss:                   8 kB
55d0c0000000-55d0c0001000 r-xp 00000000 fd:01 1234                       /usr/bin/loader
Rss:                   4 kB
";
        let m = parse_smaps(t);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[0].path, "/data/model.gguf");
        assert_eq!(m[0].inode, 262);
        assert_eq!(m[0].rss_bytes, 512 << 20);
        assert_eq!(m[0].perms, "r--s");
        assert_eq!(m[0].end - m[0].start, 1 << 30);
        assert_eq!(m[1].rss_bytes, 4096);
        assert!(parse_smaps("garbage\n-\n").is_empty());
    }

    #[test]
    fn this_process_is_running_and_not_a_kernel_thread() {
        let root = SysRoot::host();
        let me = identity(&root, std::process::id()).unwrap();
        assert!(!me.kernel_thread);
        assert_eq!(still(&root, &me), Liveness::Running);
        let other = Identity {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert_eq!(still(&root, &other), Liveness::Reused);
        assert!(!threads(&root, std::process::id()).is_empty());
        assert!(io_of(&root, std::process::id()).is_some());
        assert!(matches!(
            identity(&root, 0).unwrap_err().kind(),
            ErrorKind::NotFound
        ));
    }
}
