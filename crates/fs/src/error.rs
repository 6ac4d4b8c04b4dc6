//! Errors of the engine, each mapping to the errno a caller should see.

use ondisk::FormatError;
use std::fmt;
use std::io;

#[derive(Debug)]
pub enum FsError {
    /// On-disk bytes are invalid: the caller sees EIO, the log names the structure.
    Format(FormatError),
    /// The device failed.
    Io {
        context: String,
        source: io::Error,
    },
    NotFound,
    NotDir,
    IsDir,
    NameTooLong,
    /// No such extended attribute.
    NoXattr,
    /// A caller's buffer is too small (xattr get/list).
    Range,
    Invalid(String),
    ReadOnly,
    Unsupported(String),
    /// Too many levels of symbolic links or nested paths.
    Loop,
    /// No free blocks or inodes.
    NoSpace,
    /// Past the largest file ext4 allows (EFBIG).
    FileTooBig,
    Exists,
    NotEmpty,
    TooManyLinks,
    /// The operation is not permitted (e.g. a hard link to a directory).
    NotPermitted,
    /// A rename would put a directory inside itself.
    InvalidMove,
    /// Permission denied (EACCES), e.g. a default ACL on a file.
    AccessDenied,
    /// The volume cannot be mounted: the kernel's reason for refusing it,
    /// and what was found.
    Refused {
        reason: &'static str,
        found: String,
    },
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Format(FormatError::Unsupported { .. }) => libc::EOPNOTSUPP,
            FsError::Format(_) | FsError::Io { .. } => libc::EIO,
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::NoXattr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::ReadOnly => libc::EROFS,
            FsError::Unsupported(_) => libc::EOPNOTSUPP,
            FsError::Loop => libc::ELOOP,
            FsError::NoSpace => libc::ENOSPC,
            FsError::FileTooBig => libc::EFBIG,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::NotPermitted => libc::EPERM,
            FsError::InvalidMove => libc::EINVAL,
            FsError::AccessDenied => libc::EACCES,
            FsError::Refused { .. } => libc::EUCLEAN,
        }
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        FsError::Io { context: context.into(), source }
    }

    /// Whether this error means the volume's bytes are damaged (worth logging loudly).
    pub fn is_corruption(&self) -> bool {
        matches!(self, FsError::Format(FormatError::Corrupt { .. }))
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsError::Format(e) => write!(f, "{e}"),
            FsError::Io { context, source } => write!(f, "I/O error {context}: {source}"),
            FsError::NotFound => write!(f, "no such file or directory"),
            FsError::NotDir => write!(f, "not a directory"),
            FsError::IsDir => write!(f, "is a directory"),
            FsError::NameTooLong => write!(f, "file name too long"),
            FsError::NoXattr => write!(f, "no such attribute"),
            FsError::Range => write!(f, "buffer too small"),
            FsError::Invalid(s) => write!(f, "invalid argument: {s}"),
            FsError::ReadOnly => write!(f, "read-only file system"),
            FsError::Unsupported(s) => write!(f, "unsupported: {s}"),
            FsError::Loop => write!(f, "too many levels of links"),
            FsError::NoSpace => write!(f, "no space left on device"),
            FsError::FileTooBig => write!(f, "file too large"),
            FsError::Exists => write!(f, "file exists"),
            FsError::NotEmpty => write!(f, "directory not empty"),
            FsError::TooManyLinks => write!(f, "too many links"),
            FsError::NotPermitted => write!(f, "operation not permitted"),
            FsError::InvalidMove => write!(f, "cannot move a directory into itself"),
            FsError::AccessDenied => write!(f, "permission denied"),
            FsError::Refused { reason, found } => write!(f, "{reason} ({found})"),
        }
    }
}

impl std::error::Error for FsError {}

impl From<FormatError> for FsError {
    fn from(e: FormatError) -> Self {
        FsError::Format(e)
    }
}

pub type Result<T> = std::result::Result<T, FsError>;

/// Journal errors as the engine reports them.
pub fn journal_err(e: journal::Error) -> FsError {
    match e {
        journal::Error::Format(f) => FsError::Format(f),
        journal::Error::Io { jblock, source } => FsError::io(format!("journal block {jblock}"), source),
        journal::Error::NoSpace { needed, available } => {
            FsError::Unsupported(format!("journal full: {needed} blocks needed, {available} free"))
        }
        other => FsError::io(format!("journal: {other}"), std::io::Error::other("journal failure")),
    }
}
