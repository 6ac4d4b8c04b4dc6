pub mod mount;
pub mod options;
pub mod stat;
pub mod umount;
