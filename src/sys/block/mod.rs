//! Block devices: loop devices, a device's facts, the PCIe/NVMe topology.

pub(crate) mod blockdev;
pub mod loopdev;
pub(crate) mod member;
pub(crate) mod topology;
