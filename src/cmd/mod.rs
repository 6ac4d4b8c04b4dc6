pub mod checkpoint;
pub mod fusemount;
pub mod helper;
pub mod install;
pub mod mount;
pub mod options;
pub mod stat;
pub mod umount;
