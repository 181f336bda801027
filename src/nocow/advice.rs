//! `--for SERVICE`: where the files of a service live, and the service's own
//! settings that matter once they are NOCOW. Short and factual.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A service whose files belong in a NOCOW directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// VM images (QEMU/KVM, libvirt).
    Vm,
    /// PostgreSQL.
    Postgres,
    /// MySQL and MariaDB (InnoDB).
    Mysql,
}

impl FromStr for Service {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "vm" | "vms" | "qemu" | "kvm" | "libvirt" => Ok(Service::Vm),
            "postgres" | "postgresql" | "pg" => Ok(Service::Postgres),
            "mysql" | "mariadb" | "innodb" => Ok(Service::Mysql),
            _ => Err(Error::usage(format!("unknown service '{s}'"))
                .with_hint("use vm, postgres or mysql (mariadb)")),
        }
    }
}

/// What to do for one service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Advice {
    /// The service.
    pub service: Service,
    /// Its usual name.
    pub name: String,
    /// Where its files usually are, and how to make that NOCOW.
    pub location: String,
    /// Its own settings that matter.
    pub settings: Vec<String>,
}

/// The advice for `service`.
pub fn advice(service: Service) -> Advice {
    match service {
        Service::Vm => Advice {
            service,
            name: "VM images (QEMU/KVM, libvirt)".into(),
            location: "/var/lib/libvirt/images (libvirt's default pool) as a subvolume of its own: \
                 btrfs-lab nocow --subvolume /var/lib/libvirt/images".into(),
            settings: vec![
                "Shut the VMs down before --migrate: a running VM keeps its image open and writes to it.",
                "cache=none (libvirt: <driver cache='none' io='native'/>) opens the image with O_DIRECT.",
                "qemu-img create -o nocow=on creates a raw or qcow2 image with NOCOW anywhere on btrfs.",
                "Preallocated images (qemu-img create -o preallocation=falloc) do not grow in small pieces.",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        },
        Service::Postgres => Advice {
            service,
            name: "PostgreSQL".into(),
            location: "the data directory (SHOW data_directory): /var/lib/postgresql on Debian and \
                 Ubuntu, /var/lib/pgsql on Fedora and RHEL".into(),
            settings: vec![
                "Stop the server before --migrate (systemctl stop postgresql).",
                "PostgreSQL writes through the page cache (no O_DIRECT by default): NOCOW saves it from \
                 fragmentation, the O_DIRECT fallback does not concern it.",
                "Data checksums replace the btrfs checksums NOCOW gives up: initdb --data-checksums (the \
                 default since PostgreSQL 18) or pg_checksums --enable on the stopped cluster; SHOW \
                 data_checksums tells.",
                "Keep full_page_writes = on: NOCOW does not make page writes atomic.",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        },
        Service::Mysql => Advice {
            service,
            name: "MySQL / MariaDB (InnoDB)".into(),
            location: "the data directory (SELECT @@datadir): /var/lib/mysql".into(),
            settings: vec![
                "Stop the server before --migrate (systemctl stop mysql, or mariadb).",
                "innodb_flush_method = O_DIRECT (the default since MariaDB 10.6 and MySQL 8.4) writes the \
                 data files with O_DIRECT.",
                "InnoDB checksums its pages itself (innodb_checksum_algorithm, crc32 by default): it \
                 still detects the corruption btrfs no longer checks for.",
                "Keep innodb_doublewrite = ON: NOCOW does not make page writes atomic.",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        assert_eq!("VM".parse::<Service>().unwrap(), Service::Vm);
        assert_eq!("mariadb".parse::<Service>().unwrap(), Service::Mysql);
        assert_eq!("postgresql".parse::<Service>().unwrap(), Service::Postgres);
        let e = "oracle".parse::<Service>().unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Usage);
        for s in [Service::Vm, Service::Postgres, Service::Mysql] {
            let a = advice(s);
            assert!(a.settings[0].starts_with("S"), "{a:?}");
            assert!(a.location.contains("/var/lib/"));
        }
    }
}
