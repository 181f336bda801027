//! The walk: every entry below MOUNT, depth first, names sorted by bytes,
//! each directory held by descriptor and each name opened beneath it without
//! following a link. Memory is bounded by the depth of the tree and the
//! largest directory's names, never by the number of files.
//!
//! It stays on the filesystem: a directory whose `st_dev` differs from its
//! parent's is a subvolume (entered) when FS_INFO on it gives the same
//! fsid, another filesystem mounted there (not walked) otherwise. On btrfs
//! every subvolume has its own `st_dev`, so `st_dev` alone cannot say it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::sys::fs::rescue::{Kind, Stat, kind};

use crate::error::{Error, Result};
use crate::sys::fs::beneath::HeldDir;

/// What the walk meets.
pub(crate) enum Event<'a> {
    /// A directory, before its entries (`rel` empty for MOUNT itself).
    Enter { rel: &'a Path, subvolume: bool },
    /// The same directory, after its entries.
    Leave { rel: &'a Path, st: &'a Stat },
    /// A regular file `name` of `dir`.
    File {
        rel: &'a Path,
        dir: &'a HeldDir,
        name: &'a OsStr,
        st: &'a Stat,
    },
    /// A symbolic link (never followed).
    Symlink {
        rel: &'a Path,
        dir: &'a HeldDir,
        name: &'a OsStr,
        st: &'a Stat,
    },
    /// A FIFO, socket or device node.
    Other,
    /// Another filesystem mounted here: not walked.
    OtherFilesystem { rel: &'a Path },
    /// Could not be listed or opened.
    Unreadable { rel: &'a Path, error: Error },
}

struct Frame {
    rel: PathBuf,
    dir: HeldDir,
    st: Stat,
    names: std::vec::IntoIter<OsString>,
}

/// Walks `root` (held, on the btrfs `fsid`), calling `visit` for each event;
/// an `Err` from `visit` ends the walk with it.
pub(crate) fn walk(
    root: &HeldDir,
    fsid: &str,
    visit: &mut dyn FnMut(Event<'_>) -> Result<()>,
) -> Result<()> {
    let root = root.try_clone()?;
    let st = root.fstat()?;
    visit(Event::Enter {
        rel: Path::new(""),
        subvolume: false,
    })?;
    let names = root.names()?;
    let mut stack = vec![Frame {
        rel: PathBuf::new(),
        dir: root,
        st,
        names: names.into_iter(),
    }];
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.next() else {
            let f = stack.pop().expect("a frame");
            visit(Event::Leave {
                rel: &f.rel,
                st: &f.st,
            })?;
            continue;
        };
        let rel = top.rel.join(&name);
        let st = match top.dir.stat(&name) {
            Ok(Some(st)) => st,
            Ok(None) => continue,
            Err(error) => {
                visit(Event::Unreadable { rel: &rel, error })?;
                continue;
            }
        };
        match kind(&st) {
            Kind::Regular => visit(Event::File {
                rel: &rel,
                dir: &top.dir,
                name: &name,
                st: &st,
            })?,
            Kind::Symlink => visit(Event::Symlink {
                rel: &rel,
                dir: &top.dir,
                name: &name,
                st: &st,
            })?,
            Kind::Directory => {
                let sub = match top.dir.open_subdir(&name) {
                    Ok(d) => d,
                    Err(error) => {
                        visit(Event::Unreadable { rel: &rel, error })?;
                        continue;
                    }
                };
                let mut subvolume = false;
                if st.st_dev != top.st.st_dev {
                    match sub.btrfs_fsid() {
                        Ok(f) if f == fsid => subvolume = true,
                        _ => {
                            visit(Event::OtherFilesystem { rel: &rel })?;
                            continue;
                        }
                    }
                }
                let names = match sub.names() {
                    Ok(n) => n,
                    Err(error) => {
                        visit(Event::Unreadable { rel: &rel, error })?;
                        continue;
                    }
                };
                visit(Event::Enter {
                    rel: &rel,
                    subvolume,
                })?;
                stack.push(Frame {
                    rel,
                    dir: sub,
                    st,
                    names: names.into_iter(),
                });
            }
            _ => visit(Event::Other)?,
        }
    }
    Ok(())
}
