//! jbd2 journal structures (see crates/journal for the journal's behaviour).
