//! Typed errors for on-disk structures: what is wrong, in which structure, where.

use std::fmt;

/// Where in the volume a bad structure was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// No better place is known (e.g. a buffer handed in by the caller).
    Unknown,
    /// A file-system block number (static address).
    Block(u64),
    /// Byte offset on the device.
    Byte(u64),
    /// An inode number.
    Inode(u64),
    /// A block group.
    Group(u32),
    /// A block inside the journal, by its journal-relative number.
    JournalBlock(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Unknown => Ok(()),
            Location::Block(b) => write!(f, " at block {b}"),
            Location::Byte(b) => write!(f, " at byte {b}"),
            Location::Inode(i) => write!(f, " of inode {i}"),
            Location::Group(g) => write!(f, " of group {g}"),
            Location::JournalBlock(b) => write!(f, " at journal block {b}"),
        }
    }
}

/// The ways bytes on disk can be wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// A magic number did not match.
    BadMagic { found: u64 },
    /// A stored checksum does not match the contents.
    BadChecksum { stored: u32, computed: u32 },
    /// The buffer is shorter than the structure needs.
    Truncated { need: usize, have: usize },
    /// A field holds a value the format does not allow.
    BadField { field: &'static str, value: u64 },
    /// Following pointers came back to a structure already visited.
    Loop,
    /// A tree is deeper than the format allows.
    TooDeep { depth: u32 },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::BadMagic { found } => write!(f, "bad magic number {found:#x}"),
            Corruption::BadChecksum { stored, computed } => {
                write!(f, "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")
            }
            Corruption::Truncated { need, have } => {
                write!(f, "truncated ({have} bytes where {need} are needed)")
            }
            Corruption::BadField { field, value } => write!(f, "invalid {field} ({value})"),
            Corruption::Loop => write!(f, "loop in pointers"),
            Corruption::TooDeep { depth } => write!(f, "tree too deep ({depth} levels)"),
        }
    }
}

/// Error from parsing or validating an on-disk structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// The bytes are not a valid instance of `structure`.
    Corrupt { structure: &'static str, at: Location, why: Corruption },
    /// Valid, but uses a feature this implementation does not support.
    Unsupported { what: String },
}

impl FormatError {
    pub fn corrupt(structure: &'static str, at: Location, why: Corruption) -> Self {
        FormatError::Corrupt { structure, at, why }
    }

    /// Attach a location to an error raised where it was not known.
    pub fn at(self, loc: Location) -> Self {
        match self {
            FormatError::Corrupt { structure, at: Location::Unknown, why } => {
                FormatError::Corrupt { structure, at: loc, why }
            }
            other => other,
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Corrupt { structure, at, why } => write!(f, "corrupt {structure}{at}: {why}"),
            FormatError::Unsupported { what } => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for FormatError {}

pub type Result<T> = std::result::Result<T, FormatError>;
