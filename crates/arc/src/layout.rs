//! Where a job's files live, in the three layouts ARC has used (all paths relative to the
//! control directory):
//!
//! | layout | status file | other files (`local`, `grami`, ...) | job IDs |
//! |---|---|---|---|
//! | `flat` (the thesis, ARC <= 5) | `job.ID.status` | `job.ID.local` | 54 base62 characters |
//! | `arc6` | `{accepting,processing,finished}/job.ID.status` | `job.ID.local` | 54 base62 characters |
//! | `arc7` | `{accepting,processing,finished}/ID.status` | `jobs/abc/def/ghi/jkl/local` | 12 hex digits |
//!
//! ARC 6's GMJobsInfo.pm lists the three state directories and reads the rest from the control
//! directory; ARC 7 (`control_path()`, the C++ `job_control_path()`) splits the ID into 3-character
//! directories, the fourth holding the rest, and drops the `job.`/`.SUFFIX` decoration.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Flat,
    Arc6,
    Arc7,
}

/// The state directories ARC 6+ lists, in GMJobsInfo's order.
pub const STATE_DIRS: [&str; 3] = ["accepting", "processing", "finished"];

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::Flat, Layout::Arc6, Layout::Arc7];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Flat => "flat",
            Layout::Arc6 => "arc6",
            Layout::Arc7 => "arc7",
        }
    }

    /// The directories the scanner lists for `*.status` names ("" is the control directory).
    pub fn listed_dirs(self) -> Vec<&'static str> {
        match self {
            Layout::Flat => vec![""],
            Layout::Arc6 | Layout::Arc7 => STATE_DIRS.to_vec(),
        }
    }

    /// Path of a job's status file, given the state directory it is in.
    pub fn status_path(self, state_dir: &str, id: &str) -> String {
        match self {
            Layout::Flat => format!("job.{id}.status"),
            Layout::Arc6 => format!("{state_dir}/job.{id}.status"),
            Layout::Arc7 => format!("{state_dir}/{id}.status"),
        }
    }

    /// Path of a job's file with suffix `sfx` (not the status file).
    pub fn file_path(self, id: &str, sfx: &str) -> String {
        match self {
            Layout::Flat | Layout::Arc6 => format!("job.{id}.{sfx}"),
            Layout::Arc7 => format!("{}{sfx}", arc7_job_dir(id)),
        }
    }

    /// The job ID in a listed name, as GMJobsInfo's regex takes it: `job\.(.+)\.status`
    /// (ARC 7: `(.+)\.status`), unanchored and greedy; None when the name does not match.
    pub fn id_from_status_name(self, name: &str) -> Option<String> {
        let end = name.rfind(".status")?;
        match self {
            Layout::Flat | Layout::Arc6 => {
                let start = name.find("job.")? + 4;
                (start < end).then(|| name[start..end].to_string())
            }
            Layout::Arc7 => (end > 0).then(|| name[..end].to_string()),
        }
    }
}

/// ARC 7's `jobs/abc/def/ghi/REST/` for an ID (with the trailing slash, as `control_path(.., "")`).
pub fn arc7_job_dir(id: &str) -> String {
    let mut p = String::from("jobs/");
    let mut rest = id;
    for _ in 0..3 {
        if rest.len() <= 3 {
            break;
        }
        let (a, b) = rest.split_at(3);
        p.push_str(a);
        p.push('/');
        rest = b;
    }
    p.push_str(rest);
    p.push('/');
    p
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Layout, String> {
        Layout::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("unknown layout {s:?} (flat, arc6, arc7)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_arc() {
        assert_eq!(Layout::Flat.status_path("finished", "X1"), "job.X1.status");
        assert_eq!(Layout::Arc6.status_path("finished", "X1"), "finished/job.X1.status");
        assert_eq!(Layout::Arc6.file_path("X1", "local"), "job.X1.local");
        assert_eq!(Layout::Arc7.status_path("processing", "0123456789ab"), "processing/0123456789ab.status");
        assert_eq!(Layout::Arc7.file_path("0123456789ab", "grami"), "jobs/012/345/678/9ab/grami");
        assert_eq!(arc7_job_dir("0123456789abcdef"), "jobs/012/345/678/9abcdef/");
    }

    #[test]
    fn ids_come_from_status_names_as_the_perl_regex_takes_them() {
        assert_eq!(Layout::Flat.id_from_status_name("job.AbC.status").as_deref(), Some("AbC"));
        assert_eq!(Layout::Arc6.id_from_status_name("job.AbC.local"), None);
        assert_eq!(Layout::Flat.id_from_status_name("job..status"), None);
        assert_eq!(Layout::Arc7.id_from_status_name("0123456789ab.status").as_deref(), Some("0123456789ab"));
        assert_eq!("arc7".parse::<Layout>().unwrap(), Layout::Arc7);
        assert!("arc8".parse::<Layout>().is_err());
    }
}
