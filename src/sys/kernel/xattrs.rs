//! Extended attributes of open files (through the `xattr` crate: the
//! f*xattr calls, so no path is looked up twice).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::Path;

use xattr::FileExt;

use crate::error::{Error, Result};

/// Name and value of each extended attribute, sorted by name.
pub(crate) type Xattrs = Vec<(OsString, Vec<u8>)>;

/// Every extended attribute this process can see on `file`. Without
/// CAP_SYS_ADMIN the kernel hides `trusted.*`.
pub(crate) fn read_all(file: &File, path: &Path) -> Result<Xattrs> {
    let names = file
        .list_xattr()
        .map_err(|e| Error::from_io(&e, "cannot list extended attributes of", path))?;
    let mut out = Vec::new();
    for name in names {
        // An attribute removed between list and get is simply gone.
        if let Some(value) = file
            .get_xattr(&name)
            .map_err(|e| Error::from_io(&e, "cannot read extended attributes of", path))?
        {
            out.push((name, value));
        }
    }
    out.sort();
    Ok(out)
}

/// One attribute's value, `None` when it is not set (or the filesystem has
/// no such attribute namespace).
pub fn get(file: &File, path: &Path, name: &str) -> Result<Option<Vec<u8>>> {
    match file.get_xattr(name) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        r => r.map_err(|e| Error::from_io(&e, "cannot read extended attributes of", path)),
    }
}

/// Sets one attribute.
pub fn set(file: &File, path: &Path, name: &OsStr, value: &[u8]) -> Result<()> {
    file.set_xattr(name, value).map_err(|e| {
        Error::from_io(
            &e,
            &format!(
                "cannot set extended attribute {} on",
                name.to_string_lossy()
            ),
            path,
        )
    })
}

/// Removes one attribute; an attribute that is not there is not an error.
pub fn remove(file: &File, path: &Path, name: &str) -> Result<()> {
    match file.remove_xattr(name) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
        Err(e) => Err(Error::from_io(
            &e,
            &format!("cannot remove extended attribute {name} from"),
            path,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_on_a_temp_file() {
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = t.path().join("f");
        let f = File::create(&p).unwrap();
        if set(&f, &p, OsStr::new("user.b"), b"2").is_err() {
            eprintln!("no user xattrs on /var/tmp: skipped");
            return;
        }
        set(&f, &p, OsStr::new("user.a"), b"\x00\x01").unwrap();
        let all = read_all(&f, &p).unwrap();
        let user: Vec<_> = all
            .iter()
            .filter(|(n, _)| n.to_string_lossy().starts_with("user."))
            .cloned()
            .collect();
        assert_eq!(
            user,
            vec![
                (OsString::from("user.a"), b"\x00\x01".to_vec()),
                (OsString::from("user.b"), b"2".to_vec())
            ]
        );
        assert_eq!(get(&f, &p, "user.b").unwrap(), Some(b"2".to_vec()));
        remove(&f, &p, "user.b").unwrap();
        remove(&f, &p, "user.b").unwrap();
        assert_eq!(get(&f, &p, "user.b").unwrap(), None);
    }
}
