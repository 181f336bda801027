//! btrfs state through its ioctls (via the `btrfs-uapi` crate).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use btrfs_uapi::space::BlockGroupFlags;
use nix::errno::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::model::space::BgType;

fn open_any(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::from_io(&e, "cannot open", path))
}

fn not_btrfs(e: Errno, path: &Path) -> Error {
    match e {
        Errno::ENOTTY | Errno::EINVAL | Errno::EOPNOTSUPP => Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not on a btrfs filesystem", path.display()),
        ),
        e => Error::from_errno(e, "cannot query btrfs at", path),
    }
}

/// The filesystem UUID (fsid) of the btrfs that contains `path`.
pub fn fsid(path: &Path) -> Result<String> {
    fsid_of(open_any(path)?.as_fd(), path)
}

/// The fsid of the btrfs that holds the open file or directory `fd`
/// (`path` is for messages).
pub(crate) fn fsid_of(fd: BorrowedFd<'_>, path: &Path) -> Result<String> {
    let info = btrfs_uapi::filesystem::filesystem_info(fd).map_err(|e| not_btrfs(e, path))?;
    Ok(info.uuid.as_hyphenated().to_string())
}

/// The profile encoded in block-group flags.
pub fn profile_of(flags: BlockGroupFlags) -> Profile {
    const TABLE: [(BlockGroupFlags, Profile); 8] = [
        (BlockGroupFlags::RAID0, Profile::Raid0),
        (BlockGroupFlags::RAID1, Profile::Raid1),
        (BlockGroupFlags::DUP, Profile::Dup),
        (BlockGroupFlags::RAID10, Profile::Raid10),
        (BlockGroupFlags::RAID5, Profile::Raid5),
        (BlockGroupFlags::RAID6, Profile::Raid6),
        (BlockGroupFlags::RAID1C3, Profile::Raid1c3),
        (BlockGroupFlags::RAID1C4, Profile::Raid1c4),
    ];
    TABLE
        .iter()
        .find(|(bit, _)| flags.contains(*bit))
        .map_or(Profile::Single, |(_, p)| *p)
}

/// The profiles in use per block-group type (more than one per type while a
/// conversion is unfinished).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockGroupProfiles {
    /// Profiles of data block groups (mixed ones included).
    pub data: Vec<Profile>,
    /// Profiles of metadata block groups (mixed ones included).
    pub metadata: Vec<Profile>,
    /// Profiles of system block groups.
    pub system: Vec<Profile>,
}

/// Reads the profiles from the SPACE_INFO ioctl. Needs no privileges.
pub fn block_group_profiles(path: &Path) -> Result<BlockGroupProfiles> {
    block_group_profiles_of(open_any(path)?.as_fd(), path)
}

/// [`block_group_profiles`] of the btrfs that holds the open `fd`.
pub(crate) fn block_group_profiles_of(
    fd: BorrowedFd<'_>,
    path: &Path,
) -> Result<BlockGroupProfiles> {
    let spaces = btrfs_uapi::space::space_info(fd).map_err(|e| not_btrfs(e, path))?;
    let pick = |kind: BlockGroupFlags| {
        let mut v: Vec<Profile> = spaces
            .iter()
            .filter(|s| s.flags.contains(kind) && !s.flags.contains(BlockGroupFlags::GLOBAL_RSV))
            .filter(|s| s.total_bytes > 0)
            .map(|s| profile_of(s.flags))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    Ok(BlockGroupProfiles {
        data: pick(BlockGroupFlags::DATA),
        metadata: pick(BlockGroupFlags::METADATA),
        system: pick(BlockGroupFlags::SYSTEM),
    })
}

/// The profiles that hold data.
pub fn data_profiles(path: &Path) -> Result<Vec<Profile>> {
    Ok(block_group_profiles(path)?.data)
}

/// Registers a device with the kernel's btrfs scanner so a multi-device
/// filesystem can be mounted by naming one member.
pub fn scan_device(dev: &Path) -> Result<()> {
    let c = CString::new(dev.as_os_str().as_bytes())
        .map_err(|_| Error::usage(format!("bad device path {}", dev.display())))?;
    btrfs_uapi::device::device_scan(&c)
        .map_err(|e| Error::from_errno(e, "cannot scan btrfs device", dev))
}

/// Makes the kernel forget an unmounted device, so a later filesystem on the
/// same loop device number is not confused with this one. Errors are
/// harmless (the device may never have been registered).
pub fn forget_device(dev: &Path) {
    if let Ok(c) = CString::new(dev.as_os_str().as_bytes()) {
        let _ = btrfs_uapi::device::device_forget(Some(&c));
    }
}

/// True if the directory at `path` is the root of a btrfs subvolume: its
/// inode number is BTRFS_FIRST_FREE_OBJECTID (256), which only subvolume
/// roots have.
pub(crate) fn is_subvolume_root(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.is_dir() && meta.ino() == 256
}

/// One entry of the SPACE_INFO ioctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceEntry {
    /// Block-group type and profile flags.
    pub flags: BlockGroupFlags,
    /// Allocated bytes (logical).
    pub total_bytes: u64,
    /// Used bytes (logical).
    pub used_bytes: u64,
}

/// The SPACE_INFO ioctl, in the kernel's order. Needs no privileges.
pub(crate) fn space_entries(path: &Path) -> Result<Vec<SpaceEntry>> {
    let f = open_any(path)?;
    let spaces = btrfs_uapi::space::space_info(f.as_fd()).map_err(|e| not_btrfs(e, path))?;
    Ok(spaces
        .into_iter()
        .map(|s| SpaceEntry {
            flags: s.flags,
            total_bytes: s.total_bytes,
            used_bytes: s.used_bytes,
        })
        .collect())
}

/// The block-group type of SPACE_INFO flags.
pub(crate) fn bg_type_of(flags: BlockGroupFlags) -> BgType {
    if flags.contains(BlockGroupFlags::GLOBAL_RSV) {
        return BgType::GlobalReserve;
    }
    let data = flags.contains(BlockGroupFlags::DATA);
    let meta = flags.contains(BlockGroupFlags::METADATA);
    match (data, meta, flags.contains(BlockGroupFlags::SYSTEM)) {
        (true, true, false) => BgType::DataMetadata,
        (true, false, false) => BgType::Data,
        (false, true, false) => BgType::Metadata,
        (false, false, true) => BgType::System,
        _ => BgType::Unknown,
    }
}

/// Filesystem facts from the FS_INFO ioctl. Needs no privileges.
/// Commits the filesystem's running transaction and waits until it is on
/// disk (`BTRFS_IOC_START_SYNC` then `BTRFS_IOC_WAIT_SYNC`): every change
/// made before (names, attributes, files already flushed) is durable after
/// it. Unlike `syncfs` it does not write back other programs' dirty data
/// first. Needs no privilege.
pub(crate) fn commit(fd: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let transid = btrfs_uapi::filesystem::start_sync(fd)
        .map_err(|e| Error::from_errno(e, "cannot commit the filesystem of", path))?;
    btrfs_uapi::filesystem::wait_sync(fd, transid)
        .map_err(|e| Error::from_errno(e, "cannot commit the filesystem of", path))
}

pub(crate) fn fs_info(path: &Path) -> Result<btrfs_uapi::filesystem::FilesystemInfo> {
    let f = open_any(path)?;
    btrfs_uapi::filesystem::filesystem_info(f.as_fd()).map_err(|e| not_btrfs(e, path))
}

/// Every device of the filesystem (DEV_INFO for each devid), in devid order.
pub fn devices(path: &Path) -> Result<Vec<btrfs_uapi::device::DeviceInfo>> {
    let f = open_any(path)?;
    let info =
        btrfs_uapi::filesystem::filesystem_info(f.as_fd()).map_err(|e| not_btrfs(e, path))?;
    let mut all = btrfs_uapi::device::device_info_all(f.as_fd(), &info)
        .map_err(|e| Error::from_errno(e, "cannot read device info of", path))?;
    mark_missing(&info, &mut all);
    Ok(all)
}

/// What DEV_INFO gives as the path of a missing device on kernels that name
/// it (`btrfs_dev_name()`, 6.2 and later); older ones give an empty path.
const MISSING_NAME: &str = "<missing disk>";

/// Gives every missing device an empty path, whatever the kernel calls it:
/// DEV_INFO says `<missing disk>` (6.2+) or nothing (older), and sysfs
/// `devinfo/N/missing` (5.9+) flags a device that went missing after the
/// mount while its old name is still reported. Everyone downstream then
/// knows a missing member by its empty path.
fn mark_missing(
    info: &btrfs_uapi::filesystem::FilesystemInfo,
    devices: &mut [btrfs_uapi::device::DeviceInfo],
) {
    let fsid = info.uuid.as_hyphenated().to_string();
    for d in devices {
        let flagged =
            std::fs::read_to_string(format!("/sys/fs/btrfs/{fsid}/devinfo/{}/missing", d.devid))
                .is_ok_and(|s| s.trim() == "1");
        if flagged || d.path == MISSING_NAME {
            d.path.clear();
        }
    }
}

/// One device extent of the device tree: where one stripe of a chunk lies
/// on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevExtent {
    /// The device.
    pub devid: u64,
    /// Byte offset on the device.
    pub offset: u64,
    /// Bytes.
    pub length: u64,
    /// Logical start of the chunk it belongs to.
    pub chunk_logical: u64,
}

/// Every device extent (TREE_SEARCH of the device tree: root only), by
/// device and offset. `Ok(None)` when not permitted.
fn dev_extents_of(fd: BorrowedFd<'_>, path: &Path) -> Result<Option<Vec<DevExtent>>> {
    use btrfs_uapi::raw::{BTRFS_DEV_EXTENT_KEY, BTRFS_DEV_TREE_OBJECTID};
    let mut out = search_items(
        fd,
        (BTRFS_DEV_TREE_OBJECTID, BTRFS_DEV_EXTENT_KEY),
        (path, "cannot read the device tree of"),
        |hdr, data| {
            btrfs_disk::items::DeviceExtent::parse(data).map(|e| DevExtent {
                devid: hdr.objectid,
                offset: hdr.offset,
                length: e.length,
                chunk_logical: e.chunk_offset,
            })
        },
    )?;
    if let Some(out) = &mut out {
        out.sort_by_key(|e| (e.devid, e.offset));
    }
    Ok(out)
}

/// Every item of type `key` in the tree `tree` (TREE_SEARCH: root only)
/// that `parse` makes something of, in key order; `Ok(None)` when not
/// permitted. Items of other types the key range spans (the device items
/// under the chunk tree's objectid 1) are skipped. `(path, doing)` word the
/// error.
fn search_items<T>(
    fd: BorrowedFd<'_>,
    (tree, key): (impl Into<u64>, u32),
    (path, doing): (&Path, &str),
    mut parse: impl FnMut(&btrfs_uapi::tree_search::SearchHeader, &[u8]) -> Option<T>,
) -> Result<Option<Vec<T>>> {
    use btrfs_uapi::tree_search::{SearchFilter, tree_search};
    let mut out = Vec::new();
    let result = tree_search(fd, SearchFilter::for_type(tree.into(), key), |hdr, data| {
        if hdr.item_type == key
            && let Some(item) = parse(hdr, data)
        {
            out.push(item);
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(Some(out)),
        Err(Errno::EPERM | Errno::EACCES) => Ok(None),
        Err(e) => Err(Error::from_errno(e, doing, path)),
    }
}

/// The error counters of device `devid` (GET_DEV_STATS, read-only).
pub(crate) fn device_stats(path: &Path, devid: u64) -> Result<btrfs_uapi::device::DeviceStats> {
    let f = open_any(path)?;
    btrfs_uapi::device::device_stats(f.as_fd(), devid, false)
        .map_err(|e| Error::from_errno(e, "cannot read device stats of", path))
}

/// Logical bytes of chunks with one kind of flags that have a stripe on one
/// device, as btrfs-progs accumulates them (`load_chunk_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkInfo {
    /// Chunk type and profile flags.
    pub flags: BlockGroupFlags,
    /// Device.
    pub devid: u64,
    /// Stripes of each such chunk.
    pub num_stripes: u16,
    /// Sum of the logical lengths of those chunks.
    pub size: u64,
}

/// One chunk of the chunk tree, as the kernel allocated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    /// Chunk type and profile flags.
    pub flags: BlockGroupFlags,
    /// Logical start (the chunk item's key offset).
    pub logical: u64,
    /// Logical length.
    pub length: u64,
    /// Bytes of one stripe unit (64 KiB).
    pub stripe_len: u64,
    /// Stripes.
    pub num_stripes: u16,
    /// RAID10's mirrors per stripe set.
    pub sub_stripes: u16,
    /// The device of each stripe, in order.
    pub devids: Vec<u64>,
}

impl ChunkRecord {
    /// Whether it holds data (a data or mixed block group).
    pub fn is_data(&self) -> bool {
        self.flags.contains(BlockGroupFlags::DATA)
    }

    /// Its geometry, as the one mapping of addresses to devices takes it.
    pub fn geometry(&self) -> crate::model::stripes::Chunk {
        crate::model::stripes::Chunk {
            profile: profile_of(self.flags),
            logical: self.logical,
            length: self.length,
            stripe_len: self.stripe_len,
            sub_stripes: self.sub_stripes,
            devids: self.devids.clone(),
        }
    }
}

/// The map of the data chunks among `records`.
pub fn data_chunk_map(records: &[ChunkRecord]) -> crate::model::stripes::ChunkMap {
    crate::model::stripes::ChunkMap::new(
        records
            .iter()
            .filter(|c| c.is_data())
            .map(ChunkRecord::geometry)
            .collect(),
    )
}

/// Reads every chunk of the chunk tree (TREE_SEARCH: root only). `Ok(None)`
/// when not permitted.
pub fn chunk_records(path: &Path) -> Result<Option<Vec<ChunkRecord>>> {
    let f = open_any(path)?;
    chunk_records_of(f.as_fd(), path)
}

/// [`chunk_records`] through a held descriptor (`path` is for messages).
pub fn chunk_records_of(fd: BorrowedFd<'_>, path: &Path) -> Result<Option<Vec<ChunkRecord>>> {
    use btrfs_uapi::raw::{BTRFS_CHUNK_ITEM_KEY, BTRFS_CHUNK_TREE_OBJECTID};
    search_items(
        fd,
        (BTRFS_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY),
        (path, "cannot read the chunk tree of"),
        |hdr, data| {
            // The type as on disk, unknown bits kept: btrfs-disk's parse
            // drops the bits it does not know, among them 7.0's REMAPPED
            // and METADATA_REMAP (btrfs_chunk: length, owner, stripe_len,
            // then type at byte 24).
            let raw_type = data
                .get(24..32)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes);
            btrfs_disk::items::ChunkItem::parse(data).map(|chunk| ChunkRecord {
                flags: BlockGroupFlags::from_bits_retain(
                    raw_type.unwrap_or(chunk.chunk_type.bits()),
                ),
                logical: hdr.offset,
                length: chunk.length,
                stripe_len: chunk.stripe_len,
                num_stripes: chunk.num_stripes,
                sub_stripes: chunk.sub_stripes,
                devids: chunk.stripes.iter().map(|s| s.devid).collect(),
            })
        },
    )
}

/// Length and used bytes of every data chunk (mixed included; `metadata`
/// false) or of every metadata chunk (`metadata` true) (TREE_SEARCH: root only): the
/// chunk tree for the chunks, one lookup of each block group item in the
/// block group tree (`block_group_tree` feature) or else the extent tree,
/// as btrfs-progs' `btrfs inspect-internal list-chunks` reads them. `Ok(None)`
/// when not permitted.
pub(crate) fn chunk_usage_of(
    fd: BorrowedFd<'_>,
    block_group_tree: bool,
    path: &Path,
    metadata: bool,
) -> Result<Option<Vec<crate::model::reclaim::ChunkUse>>> {
    let wanted = |c: &ChunkRecord| {
        if metadata {
            !c.is_data() && c.flags.contains(BlockGroupFlags::METADATA)
        } else {
            c.is_data()
        }
    };
    Ok(
        block_group_usage_of(fd, block_group_tree, path, wanted)?.map(|v| {
            v.into_iter()
                .map(|(c, used)| crate::model::reclaim::ChunkUse {
                    length: c.length,
                    used,
                })
                .collect()
        }),
    )
}

/// The bytes a scrub reads on each device (chunk tree and block group
/// items, every chunk type; [`crate::model::stripes::used_per_device`]),
/// by devid. `Ok(None)` when not permitted.
pub(crate) fn scrub_bytes_per_device_of(
    fd: BorrowedFd<'_>,
    block_group_tree: bool,
    path: &Path,
) -> Result<Option<Vec<(u64, u64)>>> {
    Ok(
        block_group_usage_of(fd, block_group_tree, path, |_| true)?.map(|v| {
            let geo: Vec<_> = v.iter().map(|(c, u)| (c.geometry(), *u)).collect();
            crate::model::stripes::used_per_device(geo.iter().map(|(c, u)| (c, *u)))
        }),
    )
}

/// Every chunk with the used bytes of its block group and, for data
/// chunks, the sizes of their extents in address order (TREE_SEARCH of the
/// extent tree: root only), what a conversion's replay needs
/// ([`crate::model::relocate`]). Extents are read for at most
/// `max_extents` in all; the chunks beyond have `None`. `Ok(None)` when not
/// permitted.
pub(crate) type ChunkLayout = Vec<(ChunkRecord, u64, Option<Vec<u64>>)>;

/// See [`ChunkLayout`].
pub(crate) fn chunk_layout_of(
    fd: BorrowedFd<'_>,
    block_group_tree: bool,
    path: &Path,
    max_extents: usize,
) -> Result<Option<ChunkLayout>> {
    use btrfs_uapi::raw::{BTRFS_EXTENT_ITEM_KEY, BTRFS_EXTENT_TREE_OBJECTID};
    use btrfs_uapi::tree_search::{Key, SearchFilter, tree_search};
    let Some(chunks) = block_group_usage_of(fd, block_group_tree, path, |_| true)? else {
        return Ok(None);
    };
    let mut budget = max_extents;
    let mut out = Vec::with_capacity(chunks.len());
    for (c, used) in chunks {
        if !c.is_data() || budget == 0 {
            out.push((c, used, None));
            continue;
        }
        let filter = SearchFilter {
            tree_id: u64::from(BTRFS_EXTENT_TREE_OBJECTID),
            start: Key {
                objectid: c.logical,
                item_type: BTRFS_EXTENT_ITEM_KEY,
                offset: 0,
            },
            end: Key {
                objectid: c.logical + c.length.saturating_sub(1),
                item_type: BTRFS_EXTENT_ITEM_KEY,
                offset: u64::MAX,
            },
            min_transid: 0,
            max_transid: u64::MAX,
        };
        let mut extents = Vec::new();
        let result = tree_search(fd, filter, |hdr, _| {
            if hdr.item_type == BTRFS_EXTENT_ITEM_KEY
                && hdr.objectid >= c.logical
                && hdr.objectid < c.logical + c.length
            {
                extents.push((hdr.objectid, hdr.offset));
            }
            Ok(())
        });
        match result {
            Ok(()) => {}
            Err(Errno::EPERM | Errno::EACCES) => return Ok(None),
            Err(e) => return Err(Error::from_errno(e, "cannot read the extents of", path)),
        }
        extents.sort_unstable();
        if extents.len() > budget {
            budget = 0;
            out.push((c, used, None));
        } else {
            budget -= extents.len();
            out.push((c, used, Some(extents.into_iter().map(|e| e.1).collect())));
        }
    }
    Ok(Some(out))
}

/// Each chunk `wanted` keeps, with the used bytes of its block group.
fn block_group_usage_of(
    fd: BorrowedFd<'_>,
    block_group_tree: bool,
    path: &Path,
    wanted: impl Fn(&ChunkRecord) -> bool,
) -> Result<Option<Vec<(ChunkRecord, u64)>>> {
    use btrfs_uapi::raw::{
        BTRFS_BLOCK_GROUP_ITEM_KEY, BTRFS_BLOCK_GROUP_TREE_OBJECTID, BTRFS_EXTENT_TREE_OBJECTID,
    };
    use btrfs_uapi::tree_search::{Key, SearchFilter, tree_search};
    let Some(chunks) = chunk_records_of(fd, path)? else {
        return Ok(None);
    };
    let tree_id = if block_group_tree {
        u64::from(BTRFS_BLOCK_GROUP_TREE_OBJECTID)
    } else {
        u64::from(BTRFS_EXTENT_TREE_OBJECTID)
    };
    let mut out = Vec::new();
    for c in chunks.into_iter().filter(|c| wanted(c)) {
        let key = |offset| Key {
            objectid: c.logical,
            item_type: BTRFS_BLOCK_GROUP_ITEM_KEY,
            offset,
        };
        let filter = SearchFilter {
            tree_id,
            start: key(0),
            end: key(u64::MAX),
            min_transid: 0,
            max_transid: u64::MAX,
        };
        let mut used = None;
        let result = tree_search(fd, filter, |hdr, data| {
            if hdr.objectid == c.logical
                && hdr.item_type == BTRFS_BLOCK_GROUP_ITEM_KEY
                && let Some(bg) = btrfs_disk::items::BlockGroupItem::parse(data)
            {
                used = Some(bg.used);
            }
            Ok(())
        });
        match result {
            Ok(()) => {}
            Err(Errno::EPERM | Errno::EACCES) => return Ok(None),
            Err(e) => {
                return Err(Error::from_errno(
                    e,
                    "cannot read the block groups of",
                    path,
                ));
            }
        }
        // A chunk without its block group item: the trees disagree (or
        // moved under us); no usage rather than a wrong one.
        let Some(used) = used else {
            return Ok(None);
        };
        out.push((c, used));
    }
    Ok(Some(out))
}

/// One item of the checksum tree: the data checksums of consecutive sectors
/// from a logical address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsumItem {
    /// Logical address of the first sector it covers.
    pub logical: u64,
    /// The checksums, `csum_size` bytes per sector, in order.
    pub sums: Vec<u8>,
}

/// The data checksum items of the checksum tree whose key lies in
/// `[from, to]` (TREE_SEARCH: root only), in logical order. `Ok(None)` when
/// not permitted.
pub fn csum_items_of(
    fd: BorrowedFd<'_>,
    from: u64,
    to: u64,
    path: &Path,
) -> Result<Option<Vec<CsumItem>>> {
    use btrfs_uapi::raw::{
        BTRFS_CSUM_TREE_OBJECTID, BTRFS_EXTENT_CSUM_KEY, BTRFS_EXTENT_CSUM_OBJECTID,
    };
    use btrfs_uapi::tree_search::{Key, SearchFilter, tree_search};
    let objectid = i64::from(BTRFS_EXTENT_CSUM_OBJECTID) as u64;
    let filter = SearchFilter {
        tree_id: u64::from(BTRFS_CSUM_TREE_OBJECTID),
        start: Key {
            objectid,
            item_type: BTRFS_EXTENT_CSUM_KEY,
            offset: from,
        },
        end: Key {
            objectid,
            item_type: BTRFS_EXTENT_CSUM_KEY,
            offset: to,
        },
        min_transid: 0,
        max_transid: u64::MAX,
    };
    let mut items = Vec::new();
    let result = tree_search(fd, filter, |hdr, data| {
        if hdr.objectid == objectid && hdr.item_type == BTRFS_EXTENT_CSUM_KEY {
            items.push(CsumItem {
                logical: hdr.offset,
                sums: data.to_vec(),
            });
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(Some(items)),
        Err(Errno::EPERM | Errno::EACCES) => Ok(None),
        Err(e) => Err(Error::from_errno(
            e,
            "cannot read the checksum tree of",
            path,
        )),
    }
}

/// Profile bits as the balance filters take them, `convert=` and
/// `profiles=` (`single` is the explicit BTRFS_AVAIL_ALLOC_BIT_SINGLE).
pub(crate) fn convert_target_bits(p: Profile) -> u64 {
    let f = match p {
        Profile::Single => BlockGroupFlags::SINGLE,
        Profile::Dup => BlockGroupFlags::DUP,
        Profile::Raid0 => BlockGroupFlags::RAID0,
        Profile::Raid1 => BlockGroupFlags::RAID1,
        Profile::Raid1c3 => BlockGroupFlags::RAID1C3,
        Profile::Raid1c4 => BlockGroupFlags::RAID1C4,
        Profile::Raid10 => BlockGroupFlags::RAID10,
        Profile::Raid5 => BlockGroupFlags::RAID5,
        Profile::Raid6 => BlockGroupFlags::RAID6,
    };
    f.bits()
}

/// The profile of convert target bits.
pub(crate) fn profile_of_target(bits: u64) -> Profile {
    profile_of(BlockGroupFlags::from_bits_truncate(bits))
}

/// The kernel's balance report as the model's
/// [`crate::model::balance::BalanceInfo`].
impl crate::model::balance::BalanceInfo {
    /// From the kernel's report.
    pub(crate) fn from_status(s: &crate::sys::kernel::ioctl::BalanceStatus) -> Self {
        Self {
            running: s
                .state
                .contains(crate::sys::kernel::ioctl::BalanceState::RUNNING),
            paused: !s
                .state
                .contains(crate::sys::kernel::ioctl::BalanceState::RUNNING),
            cancelling: s
                .state
                .contains(crate::sys::kernel::ioctl::BalanceState::CANCEL_REQ),
            data_target: s.data_target.map(profile_of_target),
            metadata_target: s.meta_target.map(profile_of_target),
            expected: s.expected,
            completed: s.completed,
        }
    }
}

/// The balance of a conversion to `data` and `metadata` (soft: chunks
/// already converted are skipped; system follows metadata).
pub(crate) fn convert_args(
    data: Option<Profile>,
    metadata: Option<Profile>,
    force: bool,
) -> crate::sys::kernel::ioctl::BalanceArgs {
    use crate::sys::kernel::ioctl::{BalanceArgs, TypeFilter};
    let to = |p: Profile| TypeFilter {
        convert: Some(convert_target_bits(p)),
        ..TypeFilter::default()
    };
    BalanceArgs {
        data: data.map(to),
        metadata: metadata.map(to),
        system: metadata.map(to),
        force,
    }
}

/// A usage-filtered balance (`btrfs balance start -dusage=N -musage=N`):
/// the chunks of the types given less than N percent used (0: the empty
/// ones). System goes with metadata, as btrfs-progs sends it (the kernel
/// refuses system alone without force).
pub(crate) fn usage_args(
    data: Option<u8>,
    metadata: Option<u8>,
) -> crate::sys::kernel::ioctl::BalanceArgs {
    use crate::sys::kernel::ioctl::{BalanceArgs, TypeFilter};
    let below = |u: u8| TypeFilter {
        usage: Some(u),
        ..TypeFilter::default()
    };
    BalanceArgs {
        data: data.map(below),
        metadata: metadata.map(below),
        system: metadata.map(below),
        force: false,
    }
}

/// The running or paused balance, if any (root only).
pub fn balance_status(path: &Path) -> Result<Option<crate::sys::kernel::ioctl::BalanceStatus>> {
    let f = open_any(path)?;
    crate::sys::kernel::ioctl::balance_status(f.as_fd())
        .map_err(|e| Error::from_errno(e, "cannot read the balance status of", path))
}

/// A mounted btrfs held open: a descriptor (O_DIRECTORY) opened once, and
/// the fsid it had then. Every ioctl goes through the descriptor, after
/// checking that it still reports that fsid, so a path swapped after the
/// plan (a symlink, a mount over it) can never redirect an operation to
/// another filesystem.
#[derive(Debug)]
pub struct FsHandle {
    dir: File,
    path: std::path::PathBuf,
    fsid: String,
}

impl FsHandle {
    /// Opens the directory `path` (which the caller resolved; the last
    /// component is not followed if it is a symlink) and records its fsid.
    pub fn open(path: &Path) -> Result<Self> {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::from_io(&e, "cannot open", path))?;
        Self::from_held(dir, path)
    }

    /// A directory already held open (`sys::fs::target::resolve_held`),
    /// `path` its real path (for messages): records its fsid.
    pub fn from_held(dir: File, path: &Path) -> Result<Self> {
        let info =
            btrfs_uapi::filesystem::filesystem_info(dir.as_fd()).map_err(|e| not_btrfs(e, path))?;
        Ok(Self {
            dir,
            path: path.to_path_buf(),
            fsid: info.uuid.as_hyphenated().to_string(),
        })
    }

    /// The path it was opened at (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The filesystem UUID it was opened on.
    pub fn fsid(&self) -> &str {
        &self.fsid
    }

    /// `/proc/PID/fd/N`: a path that leads to exactly the directory held
    /// open, for a program run on it (`btrfs device add ... PATH`).
    pub(crate) fn proc_path(&self) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::path::PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.dir.as_raw_fd()
        ))
    }

    /// A second handle on the same open directory (for a worker thread).
    pub fn try_clone(&self) -> Result<Self> {
        Ok(Self {
            dir: self.dir.try_clone().map_err(|e| {
                Error::from_io(&e, "cannot duplicate the descriptor of", &self.path)
            })?,
            path: self.path.clone(),
            fsid: self.fsid.clone(),
        })
    }

    /// The descriptor, after checking that it is still on the same
    /// filesystem (FS_INFO on it reports the recorded fsid).
    /// The held directory's descriptor for an ioctl, once it is checked
    /// to be on the filesystem opened (an error naming the path if not).
    pub(crate) fn held_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.fd()
            .map_err(|e| Error::from_errno(e, "cannot use the directory held of", &self.path))
    }

    /// [`Self::held_fd`] with the errno, for a worker thread's ioctl.
    pub(crate) fn held_fd_errno(&self) -> std::result::Result<std::os::fd::BorrowedFd<'_>, Errno> {
        self.fd()
    }

    fn fd(&self) -> std::result::Result<std::os::fd::BorrowedFd<'_>, Errno> {
        let info = btrfs_uapi::filesystem::filesystem_info(self.dir.as_fd())?;
        if info.uuid.as_hyphenated().to_string() != self.fsid {
            return Err(Errno::EXDEV);
        }
        Ok(self.dir.as_fd())
    }

    fn err(&self, e: Errno, doing: &str) -> Error {
        if e == Errno::EXDEV {
            return Error::new(
                ErrorKind::State,
                format!(
                    "{} is no longer the filesystem {} that was planned on; nothing was changed",
                    self.path.display(),
                    self.fsid
                ),
            );
        }
        Error::from_errno(e, doing, &self.path)
    }

    /// Checks that `path` (as the user gave it) still leads to this
    /// filesystem: `Err` naming both fsids when it now leads elsewhere.
    pub fn check_path_still_here(&self, path: &Path) -> Result<()> {
        let now = fsid(path).map_err(|e| {
            Error::new(
                ErrorKind::State,
                format!(
                    "{} cannot be read again since the plan was made ({}); nothing was changed",
                    path.display(),
                    e.message()
                ),
            )
        })?;
        if now != self.fsid {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} now leads to another filesystem ({now}) than the one planned on ({}); nothing was changed",
                    path.display(),
                    self.fsid
                ),
            )
            .with_hint("something changed the path (a symlink or a mount) while the plan was shown; check it, then run the command again"));
        }
        Ok(())
    }

    /// SPACE_INFO.
    pub(crate) fn space_entries(&self) -> Result<Vec<SpaceEntry>> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot query btrfs at"))?;
        let spaces = btrfs_uapi::space::space_info(fd).map_err(|e| not_btrfs(e, &self.path))?;
        Ok(spaces
            .into_iter()
            .map(|s| SpaceEntry {
                flags: s.flags,
                total_bytes: s.total_bytes,
                used_bytes: s.used_bytes,
            })
            .collect())
    }

    /// Every device (DEV_INFO for each devid), in devid order.
    pub fn devices(&self) -> Result<Vec<btrfs_uapi::device::DeviceInfo>> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot query btrfs at"))?;
        let info =
            btrfs_uapi::filesystem::filesystem_info(fd).map_err(|e| not_btrfs(e, &self.path))?;
        let mut all = btrfs_uapi::device::device_info_all(fd, &info)
            .map_err(|e| Error::from_errno(e, "cannot read device info of", &self.path))?;
        mark_missing(&info, &mut all);
        Ok(all)
    }

    /// Mounted read-only (fstatvfs on the descriptor).
    pub fn read_only(&self) -> bool {
        rustix::fs::fstatvfs(&self.dir)
            .is_ok_and(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
    }

    /// The target of a running device replace (the kernel gives it devid 0
    /// until the replace ends), if any.
    pub fn replace_target(&self) -> Result<Option<btrfs_uapi::device::DeviceInfo>> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot query btrfs at"))?;
        btrfs_uapi::device::device_info(fd, 0)
            .map_err(|e| Error::from_errno(e, "cannot read device info of", &self.path))
    }

    /// Every device extent, by device and offset (root only: `None`
    /// without the permission).
    pub fn dev_extents(&self) -> Result<Option<Vec<DevExtent>>> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot read the device tree of"))?;
        dev_extents_of(fd, &self.path)
    }

    /// Every chunk of the chunk tree (root only: `None` without the
    /// permission).
    pub fn chunk_records(&self) -> Result<Option<Vec<ChunkRecord>>> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot read the chunk tree of"))?;
        chunk_records_of(fd, &self.path)
    }

    /// The state of the device replace (DEV_REPLACE status: root only).
    pub fn replace_status(&self) -> Result<btrfs_uapi::replace::ReplaceStatus> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot read the replace status of"))?;
        btrfs_uapi::replace::replace_status(fd)
            .map_err(|e| Error::from_errno(e, "cannot read the replace status of", &self.path))
    }

    /// Cancels the running device replace; `false`: none was running.
    pub fn replace_cancel(&self) -> Result<bool> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot cancel the replace on"))?;
        btrfs_uapi::replace::replace_cancel(fd)
            .map_err(|e| Error::from_errno(e, "cannot cancel the replace on", &self.path))
    }

    /// The error counters of device `devid` (GET_DEV_STATS, read-only).
    pub(crate) fn device_stats(&self, devid: u64) -> Result<btrfs_uapi::device::DeviceStats> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot read device stats of"))?;
        btrfs_uapi::device::device_stats(fd, devid, false)
            .map_err(|e| Error::from_errno(e, "cannot read device stats of", &self.path))
    }

    /// The running or paused balance, if any (root only).
    pub fn balance_status(&self) -> Result<Option<crate::sys::kernel::ioctl::BalanceStatus>> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot read the balance status of"))?;
        crate::sys::kernel::ioctl::balance_status(fd)
            .map_err(|e| Error::from_errno(e, "cannot read the balance status of", &self.path))
    }

    /// Starts a balance with `args`, or (`None`) resumes the paused one,
    /// and blocks until it ends (see [`crate::sys::kernel::ioctl::balance_v2`]).
    /// `EXDEV`: the descriptor is on another filesystem than recorded
    /// (never happens for an open directory, checked anyway).
    pub fn balance(
        &self,
        args: Option<&crate::sys::kernel::ioctl::BalanceArgs>,
    ) -> std::result::Result<crate::sys::kernel::ioctl::BalanceEnd, Errno> {
        crate::sys::kernel::ioctl::balance_v2(self.fd()?, args)
    }

    /// The usage of every data chunk (`metadata` false) or metadata chunk
    /// (true) from the block group items ([`chunk_usage_of`]).
    pub(crate) fn chunk_usage(
        &self,
        block_group_tree: bool,
        metadata: bool,
    ) -> Result<Option<Vec<crate::model::reclaim::ChunkUse>>> {
        let fd = self
            .fd()
            .map_err(|e| Error::from_errno(e, "cannot read the block groups of", self.path()))?;
        chunk_usage_of(fd, block_group_tree, self.path(), metadata)
    }

    /// Every chunk with its usage and data extents ([`chunk_layout_of`]).
    pub(crate) fn chunk_layout(
        &self,
        block_group_tree: bool,
        max_extents: usize,
    ) -> Result<Option<ChunkLayout>> {
        let fd = self
            .fd()
            .map_err(|e| Error::from_errno(e, "cannot read the block groups of", self.path()))?;
        chunk_layout_of(fd, block_group_tree, self.path(), max_extents)
    }

    /// Commits the running transaction (syncfs): the block group items
    /// read after it count what was freed before it.
    pub(crate) fn sync(&self) -> Result<()> {
        let fd = self.fd().map_err(|e| self.err(e, "cannot sync"))?;
        rustix::fs::syncfs(fd).map_err(|e| {
            Error::from_errno(Errno::from_raw(e.raw_os_error()), "cannot sync", &self.path)
        })
    }

    /// Pauses (blocks until paused) or cancels the balance. ENOTCONN: none runs.
    pub(crate) fn balance_control(&self, pause: bool) -> std::result::Result<(), Errno> {
        crate::sys::kernel::ioctl::balance_ctl(self.fd()?, pause)
    }
}

/// The last kernel log lines (from /dev/kmsg, root only) that mention btrfs
/// and one of `devices` (kernel names such as `loop3`, `nvme0n1`): what the
/// kernel said about a failed balance. At most `max` lines, oldest first.
pub(crate) fn kernel_log_about(devices: &[String], max: usize) -> Vec<String> {
    use std::io::Read;
    let Ok(mut f) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/kmsg")
    else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut buf = vec![0u8; 8192];
    // Each read returns one record; EAGAIN at the end; EPIPE when a record
    // was overwritten (skip it).
    for _ in 0..100_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                let Some((_, msg)) = rec.split_once(';') else {
                    continue;
                };
                let msg = msg.lines().next().unwrap_or("").trim().to_owned();
                if msg.contains("BTRFS")
                    && devices.iter().any(|d| {
                        !d.is_empty()
                            && (msg.contains(&format!("(device {d})"))
                                || msg.contains(&format!("(device {d} ")))
                    })
                {
                    lines.push(msg);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    let skip = lines.len().saturating_sub(max);
    lines.split_off(skip)
}

/// The kernel log from the moment it was opened on (`/dev/kmsg`, read
/// without blocking): what the kernel says while a job runs. Nothing when
/// it cannot be read (not root, no /dev/kmsg).
pub(crate) struct KernelLogFollower {
    f: Option<std::fs::File>,
}

impl KernelLogFollower {
    /// Opens the log after its last record.
    pub(crate) fn open() -> Self {
        use std::io::Seek;
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/kmsg")
            .ok()
            .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)).ok().map(|_| f));
        KernelLogFollower { f }
    }

    /// Each message logged since the last call (its text, without the
    /// record's prefix), at most `max`.
    pub(crate) fn drain(&mut self, max: usize, mut each: impl FnMut(&str)) {
        use std::io::Read;
        let Some(f) = self.f.as_mut() else { return };
        let mut buf = vec![0u8; 8192];
        for _ in 0..max {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    if let Some((_, msg)) = rec.split_once(';') {
                        each(msg.lines().next().unwrap_or("").trim());
                    }
                }
                // A record overwritten before it was read.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(_) => break,
            }
        }
    }
}

/// SPACE_INFO entries as `fi df` records.
pub(crate) fn space_records(spaces: &[SpaceEntry]) -> Vec<crate::model::space::SpaceRecord> {
    spaces
        .iter()
        .map(|s| {
            crate::model::space::SpaceRecord::exact(
                bg_type_of(s.flags),
                crate::model::space::BgProfile::Known(profile_of(s.flags)),
                s.total_bytes,
                s.used_bytes,
                None,
            )
        })
        .collect()
}

/// The sysfs file of a device's scrub speed limit (kernel 5.14+), when the
/// kernel has it.
pub(crate) fn scrub_speed_max_file(fsid: &str, devid: u64) -> Option<std::path::PathBuf> {
    let p = std::path::PathBuf::from(format!(
        "/sys/fs/btrfs/{fsid}/devinfo/{devid}/scrub_speed_max"
    ));
    p.exists().then_some(p)
}

/// A device's scrub speed limit now (bytes per second, 0: none), read
/// through `root`; None when the kernel has no such file (before 5.14).
pub fn scrub_speed_max(
    root: &crate::sys::fs::root::SysRoot,
    fsid: &str,
    devid: u64,
) -> Option<u64> {
    let p = root.sys(&format!("fs/btrfs/{fsid}/devinfo/{devid}/scrub_speed_max"));
    root.read_attr(&p).ok()?.trim().parse().ok()
}

/// A held filesystem's facts for the space reports (`df`, `usage`): every
/// read through the one descriptor that was resolved, never the path again.
impl FsHandle {
    /// FS_INFO.
    pub(crate) fn fs_info(&self) -> Result<btrfs_uapi::filesystem::FilesystemInfo> {
        let fd = self
            .fd()
            .map_err(|e| self.err(e, "cannot query btrfs at"))?;
        btrfs_uapi::filesystem::filesystem_info(fd).map_err(|e| not_btrfs(e, &self.path))
    }

    /// The chunk tree (TREE_SEARCH: root only), summed per type, device
    /// and stripe count. `Ok(None)` when not permitted, so callers can show
    /// what they can without it.
    pub(crate) fn chunk_infos(&self) -> Result<Option<Vec<ChunkInfo>>> {
        let Some(records) = self.chunk_records()? else {
            return Ok(None);
        };
        let mut infos: Vec<ChunkInfo> = Vec::new();
        for chunk in &records {
            for &devid in &chunk.devids {
                match infos.iter_mut().find(|c| {
                    c.flags == chunk.flags && c.devid == devid && c.num_stripes == chunk.num_stripes
                }) {
                    Some(c) => c.size += chunk.length,
                    None => infos.push(ChunkInfo {
                        flags: chunk.flags,
                        devid,
                        num_stripes: chunk.num_stripes,
                        size: chunk.length,
                    }),
                }
            }
        }
        Ok(Some(infos))
    }

    /// Bytes an unprivileged writer may still use (fstatvfs on the
    /// descriptor: available blocks × block size).
    pub(crate) fn available_bytes(&self) -> Result<u64> {
        let vfs = rustix::fs::fstatvfs(&self.dir)
            .map_err(|e| crate::error::Error::from_errno(e, "cannot statvfs", &self.path))?;
        Ok(vfs.f_bavail.saturating_mul(vfs.f_bsize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_from_flags() {
        assert_eq!(profile_of(BlockGroupFlags::DATA), Profile::Single);
        assert_eq!(
            profile_of(BlockGroupFlags::DATA | BlockGroupFlags::SINGLE),
            Profile::Single
        );
        assert_eq!(
            profile_of(BlockGroupFlags::DATA | BlockGroupFlags::DUP),
            Profile::Dup
        );
        assert_eq!(
            profile_of(BlockGroupFlags::METADATA | BlockGroupFlags::RAID1C3),
            Profile::Raid1c3
        );
        assert_eq!(
            profile_of(BlockGroupFlags::DATA | BlockGroupFlags::RAID10),
            Profile::Raid10
        );
    }
}
