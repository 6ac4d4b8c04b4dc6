//! One job's eleven control files, made from (seed, index) alone.
//!
//! The thesis copied one real job's files (made by `arctest`) under new IDs; its Table B.3 gives
//! the sizes of the files the scanner reads: `.local` 1.1 KB, `.status` 8 B, `.failed` absent,
//! `.grami` 1.5 KB, `.description` 2.3 KB, `.diag` 437 B. Its control directory grew by ~40-44 KB
//! per job on 4 KiB blocks (Table B.2), i.e. about ten one-block files: the other files here
//! (`errors`, `input`, `output`, `proxy`, `statistics` non-empty, `input_status` empty) are
//! sized to match. Contents follow A-REX's formats (ControlFileContent.cpp, JobDescriptionHandler
//! .cpp): `key=value` lines in `.local`, `joboption_*` lines in `.grami`, xRSL or ADL in
//! `.description`, `key=value` accounting lines in `.diag`, the state name in `.status`. Values
//! vary per job (IDs, users, queues, states, times), so no two jobs' files are identical.

use crate::layout::Layout;
use crate::rng::{Rng, BASE62, BASE64};
use std::fmt::Write as _;

/// The eleven suffixes of a job's files (thesis Listing 2.1), status included.
pub const SUFFIXES: [&str; 11] = [
    "description",
    "diag",
    "errors",
    "grami",
    "input",
    "input_status",
    "local",
    "output",
    "proxy",
    "statistics",
    "status",
];

/// The states a job is found in, with the state directory ARC 6+ keeps its status in, and how
/// many of 100 jobs are in it.
pub const STATES: [(&str, &str, u64); 7] = [
    ("ACCEPTED", "accepting", 5),
    ("PREPARING", "processing", 5),
    ("SUBMIT", "processing", 3),
    ("INLRMS", "processing", 30),
    ("FINISHING", "processing", 7),
    ("FINISHED", "finished", 45),
    ("DELETED", "finished", 5),
];

const QUEUES: [&str; 4] = ["grid", "atlas-prod", "short", "long"];
const VOS: [&str; 4] = ["atlas", "cms", "alice", "ops"];
const RTES: [&str; 4] = ["ENV/PROXY", "APPS/HEP/ATLAS-SITE", "ENV/GLITE", "APPS/CHEM/GROMACS-2016"];
const BASE_TIME: u64 = 1_491_825_600; // 2017-04-10T12:00:00Z, the thesis's spring

/// What the scanner must find for a job: the generator knows it from the values it wrote, the
/// scanner from the bytes it parsed; equal digests mean every file came back intact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub id: String,
    pub status: String,
    pub share: String,
    pub localid: String,
    pub interface: String,
    pub local_keys: u32,
    pub count: i64,
    pub reqwalltime: i64,
    pub reqcputime: i64,
    pub stdout: String,
    pub runtimes: Vec<String>,
    pub description: String,
    pub exitcode: Option<i64>,
    pub nodenames: Vec<String>,
    pub walltime: Option<i64>,
    pub cputime: Option<i64>,
    pub usedmem: Option<i64>,
}

impl Summary {
    /// A stable hash of everything the scan extracted.
    pub fn hash(&self) -> u64 {
        crate::rng::fnv1a(format!("{self:?}").as_bytes())
    }
}

/// A job: its ID, state and the values its files carry.
#[derive(Clone, Debug)]
pub struct Job {
    pub index: u64,
    pub id: String,
    pub state: &'static str,
    pub state_dir: &'static str,
    seed: u64,
}

/// A 48-bit bijection of the index: ARC 7-style 12-hex-digit IDs that never collide.
fn permute48(i: u64, seed: u64) -> u64 {
    const M: u64 = (1 << 48) - 1;
    let mut x = (i ^ seed) & M;
    x = x.wrapping_mul(0x0005_DEEC_E66D) & M; // odd: invertible mod 2^48
    x ^= x >> 24;
    x = x.wrapping_mul(0x2545_F491_4F6C_DD1D | 1) & M;
    x ^= x >> 17;
    x
}

impl Job {
    pub fn new(seed: u64, index: u64, layout: Layout) -> Job {
        let mut r = Rng::new(seed, index);
        let id = match layout {
            // ARC <= 6 IDs as the thesis shows them: 54 base62 characters (random enough that
            // they never collide in practice; the generator checks).
            Layout::Flat | Layout::Arc6 => r.string(BASE62, 54),
            Layout::Arc7 => format!("{:012x}", permute48(index, seed)),
        };
        let mut pick = r.below(100);
        let mut state = STATES[0];
        for s in STATES {
            if pick < s.2 {
                state = s;
                break;
            }
            pick -= s.2;
        }
        Job { index, id, state: state.0, state_dir: state.1, seed }
    }

    fn rng(&self, file: u64) -> Rng {
        Rng::new(self.seed ^ 0xA5A5_0000 ^ file, self.index)
    }

    /// Values shared by several files.
    fn facts(&self) -> Facts {
        let mut r = self.rng(0);
        let user = r.range(1, 400);
        let vo = *r.pick(&VOS);
        Facts {
            queue: r.pick(&QUEUES).to_string(),
            localid: r.range(100_000, 9_999_999).to_string(),
            dn: format!("/DC=org/DC=nordugrid/O=Grid/OU={vo}.example.org/CN=Grid User {user:03}"),
            vo,
            start: BASE_TIME + r.below(30 * 86_400),
            count: if r.below(4) == 0 { r.range(2, 16) as i64 } else { 1 },
            walltime: r.range(1, 48) as i64 * 3600,
            cputime: r.range(1, 48) as i64 * 3600,
            rtes: (0..r.range(1, 3))
                .map(|i| RTES[(i as usize + r.below(4) as usize) % RTES.len()].to_string())
                .collect(),
            adl: r.below(10) < 3,
            interface: if r.below(2) == 0 { "org.nordugrid.gridftpjob" } else { "org.ogf.glue.emies.activitycreation" },
            node: format!("wn{:04}.cluster.example.org", r.below(2000)),
            exitcode: if r.below(10) == 0 { 1 } else { 0 },
            used_wall: r.range(60, 170_000),
            user_time: r.range(30, 160_000),
            kernel_time: r.range(1, 900),
            mem: r.range(50_000, 4_000_000),
        }
    }

    fn session(&self) -> String {
        format!("/var/spool/arc/sessiondir/{}", self.id)
    }

    /// The bytes of the file with suffix `sfx`.
    pub fn file(&self, sfx: &str) -> Vec<u8> {
        let f = self.facts();
        match sfx {
            "status" => format!("{}\n", self.state).into_bytes(),
            "local" => self.local(&f),
            "grami" => self.grami(&f),
            "description" => self.description(&f),
            "diag" => self.diag(&f),
            "errors" => self.errors(&f),
            "input" => format!("run.sh\ninput.tar.gz gsiftp://se01.example.org:2811/data/{}/{}/input.tar.gz\n", f.vo, self.id).into_bytes(),
            "input_status" => Vec::new(),
            "output" => format!(
                "/output.tar.gz srm://srm.example.org:8443/srm/managerv2?SFN=/pnfs/example.org/data/{}/{}/output.tar.gz\n/stdout\n/stderr\n/gmlog\n",
                f.vo, self.id
            )
            .into_bytes(),
            "proxy" => self.proxy(),
            "statistics" => self.statistics(&f),
            _ => Vec::new(),
        }
    }

    fn time(t: u64) -> String {
        // MDS time, as A-REX writes it: YYYYMMDDhhmmssZ.
        let (days, s) = (t / 86_400, t % 86_400);
        let (y, m, d) = civil(days as i64);
        format!("{y:04}{m:02}{d:02}{:02}{:02}{:02}Z", s / 3600, s % 3600 / 60, s % 60)
    }

    fn local(&self, f: &Facts) -> Vec<u8> {
        let mut s = String::new();
        let host = "arc-ce01.example.org";
        let _ = writeln!(s, "globalid=https://{host}:443/arex/{}", self.id);
        let _ = writeln!(s, "headnode=gsiftp://{host}:2811/jobs");
        let _ = writeln!(s, "headhost={host}");
        let _ = writeln!(s, "interface={}", f.interface);
        let _ = writeln!(s, "lrms=slurm");
        let _ = writeln!(s, "queue={}", f.queue);
        let _ = writeln!(s, "localid={}", f.localid);
        let _ = writeln!(s, "args=/bin/sh run.sh --events 1000 --seed {}", self.index);
        let _ = writeln!(s, "argscode=0");
        let _ = writeln!(s, "subject={}", f.dn);
        let _ = writeln!(s, "starttime={}", Self::time(f.start));
        let _ = writeln!(s, "lifetime=604800");
        let _ = writeln!(s, "notify=");
        let _ = writeln!(s, "rerun=0");
        let _ = writeln!(s, "downloads=1");
        let _ = writeln!(s, "uploads=1");
        let _ = writeln!(s, "jobname=arctest-{}-{:06}", f.vo, self.index);
        let _ = writeln!(s, "gmlog=gmlog");
        let _ = writeln!(s, "cleanuptime={}", Self::time(f.start + 7 * 86_400));
        let _ = writeln!(s, "delegexpiretime={}", Self::time(f.start + 4 * 86_400));
        let _ = writeln!(s, "clientname=192.0.2.{}:{}", self.index % 250 + 1, 40_000 + self.index % 20_000);
        let _ = writeln!(s, "clientsoftware=nordugrid-arc-5.3.0");
        let _ = writeln!(s, "delegationid={:016x}", self.rng(9).next_u64());
        let _ = writeln!(s, "sessiondir={}", self.session());
        let _ = writeln!(s, "diskspace=0");
        let _ = writeln!(s, "failedstate=");
        let _ = writeln!(s, "failedcause=");
        let _ = writeln!(s, "credentialserver=");
        let _ = writeln!(s, "freestagein=no");
        let _ = writeln!(s, "localvo={}", f.vo);
        let _ = writeln!(s, "voms=/{}/Role=NULL/Capability=NULL", f.vo);
        let _ = writeln!(s, "voms=/{}/lcg1/Role=NULL/Capability=NULL", f.vo);
        let _ = writeln!(s, "voms=/{}/Role=production/Capability=NULL", f.vo);
        let _ = writeln!(s, "transfershare=_default");
        let _ = writeln!(s, "priority=50");
        let _ = writeln!(s, "dryrun=no");
        s.into_bytes()
    }

    fn grami(&self, f: &Facts) -> Vec<u8> {
        let mut s = String::new();
        let sess = self.session();
        let _ = writeln!(s, "joboption_directory='{sess}'");
        let _ = writeln!(s, "joboption_controldir='/var/spool/arc/jobstatus'");
        let _ = writeln!(s, "joboption_arg_0='/bin/sh'");
        let _ = writeln!(s, "joboption_arg_1='run.sh'");
        let _ = writeln!(s, "joboption_arg_2='--events'");
        let _ = writeln!(s, "joboption_arg_3='1000'");
        let _ = writeln!(s, "joboption_arg_code=0");
        let _ = writeln!(s, "joboption_pre_0_0='/usr/libexec/arc/prolog.sh'");
        let _ = writeln!(s, "joboption_stdin='/dev/null'");
        let _ = writeln!(s, "joboption_stdout='{sess}/stdout'");
        let _ = writeln!(s, "joboption_stderr='{sess}/stderr'");
        let _ = writeln!(s, "joboption_env_0=GRID_GLOBAL_JOBID='https://arc-ce01.example.org:443/arex/{}'", self.id);
        let _ = writeln!(s, "joboption_env_1=GRID_GLOBAL_JOBURL='https://arc-ce01.example.org:443/arex/{}'", self.id);
        let _ = writeln!(s, "joboption_env_2=GRID_GLOBAL_JOBINTERFACE='{}'", f.interface);
        let _ = writeln!(s, "joboption_env_3=GRID_GLOBAL_JOBHOST='arc-ce01.example.org'");
        let _ = writeln!(s, "joboption_cputime={}", f.cputime);
        let _ = writeln!(s, "joboption_walltime={}", f.walltime);
        let _ = writeln!(s, "joboption_memory=2000");
        let _ = writeln!(s, "joboption_virtualmemory=");
        let _ = writeln!(s, "joboption_disk=");
        let _ = writeln!(s, "joboption_count={}", f.count);
        let _ = writeln!(s, "joboption_countpernode=-1");
        for (i, rte) in f.rtes.iter().enumerate() {
            let _ = writeln!(s, "joboption_runtime_{i}='{rte}'");
        }
        let _ = writeln!(s, "joboption_jobname='arctest-{}-{:06}'", f.vo, self.index);
        let _ = writeln!(s, "joboption_queue='{}'", f.queue);
        let _ = writeln!(s, "joboption_starttime=");
        let _ = writeln!(s, "joboption_gridid='{}'", self.id);
        let _ = writeln!(s, "joboption_priority=50");
        let _ = writeln!(s, "joboption_inputfile_0='/run.sh'");
        let _ = writeln!(s, "joboption_inputfile_1='/input.tar.gz'");
        let _ = writeln!(s, "joboption_outputfile_0='/output.tar.gz'");
        let _ = writeln!(s, "joboption_outputfile_1='/stdout'");
        let _ = writeln!(s, "joboption_outputfile_2='/stderr'");
        let _ = writeln!(s, "joboption_localtransfer='no'");
        let _ = writeln!(s, "joboption_nodeproperty_0='{}'", f.vo);
        s.into_bytes()
    }

    fn description(&self, f: &Facts) -> Vec<u8> {
        let mut s = String::new();
        let mut r = self.rng(3);
        if f.adl {
            let _ = writeln!(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
            let _ = writeln!(s, "<ActivityDescription xmlns=\"http://www.eu-emi.eu/es/2010/12/adl\" xmlns:nordugrid-adl=\"http://www.nordugrid.org/es/2011/12/nordugrid-adl\">");
            let _ = writeln!(s, "  <ActivityIdentification>\n    <Name>arctest-{}-{:06}</Name>\n    <Annotation>{}</Annotation>\n  </ActivityIdentification>", f.vo, self.index, r.string(BASE62, 32));
            let _ = writeln!(s, "  <Application>\n    <Executable><Path>run.sh</Path><Argument>--events</Argument><Argument>1000</Argument></Executable>");
            let _ = writeln!(s, "    <Output>stdout</Output>\n    <Error>stderr</Error>\n    <LoggingDirectory>gmlog</LoggingDirectory>\n  </Application>");
            let _ = writeln!(s, "  <Resources>\n    <QueueName>{}</QueueName>\n    <IndividualPhysicalMemory>2097152000</IndividualPhysicalMemory>", f.queue);
            let _ = writeln!(s, "    <IndividualCPUTime>{}</IndividualCPUTime>\n    <SlotRequirement><NumberOfSlots>{}</NumberOfSlots></SlotRequirement>", f.cputime, f.count);
            for rte in &f.rtes {
                let _ = writeln!(s, "    <RuntimeEnvironment><Name>{rte}</Name></RuntimeEnvironment>");
            }
            let _ = writeln!(s, "  </Resources>\n  <DataStaging>");
            let _ = writeln!(s, "    <InputFile><Name>run.sh</Name></InputFile>");
            let _ = writeln!(s, "    <InputFile><Name>input.tar.gz</Name><Source><URI>gsiftp://se01.example.org:2811/data/{}/{}/input.tar.gz</URI></Source></InputFile>", f.vo, self.id);
            let _ = writeln!(s, "    <OutputFile><Name>output.tar.gz</Name><Target><URI>srm://srm.example.org:8443/srm/managerv2?SFN=/pnfs/example.org/data/{}/{}/output.tar.gz</URI></Target></OutputFile>", f.vo, self.id);
            let _ = writeln!(s, "  </DataStaging>");
        } else {
            let _ = writeln!(s, "&( executable = \"run.sh\" )");
            let _ = writeln!(s, "( arguments = \"--events\" \"1000\" \"--seed\" \"{}\" )", self.index);
            let _ = writeln!(s, "( jobname = \"arctest-{}-{:06}\" )", f.vo, self.index);
            let _ = writeln!(s, "( stdout = \"stdout\" )( stderr = \"stderr\" )( gmlog = \"gmlog\" )");
            let _ = writeln!(s, "( queue = \"{}\" )( count = \"{}\" )", f.queue, f.count);
            let _ = writeln!(
                s,
                "( cputime = \"{}\" )( walltime = \"{}\" )( memory = \"2000\" )",
                f.cputime / 60,
                f.walltime / 60
            );
            for rte in &f.rtes {
                let _ = writeln!(s, "( runtimeenvironment = \"{rte}\" )");
            }
            let _ = writeln!(s, "( inputfiles = ( \"run.sh\" \"\" ) ( \"input.tar.gz\" \"gsiftp://se01.example.org:2811/data/{}/{}/input.tar.gz\" ) )", f.vo, self.id);
            let _ = writeln!(s, "( outputfiles = ( \"output.tar.gz\" \"srm://srm.example.org:8443/srm/managerv2?SFN=/pnfs/example.org/data/{}/{}/output.tar.gz\" ) )", f.vo, self.id);
            let _ = writeln!(s, "( environment = ( \"ATLAS_SITE_NAME\" \"EXAMPLE-T2\" ) ( \"FRONTIER_SERVER\" \"(serverurl=http://frontier.example.org:8000/atlr)\" ) )");
            let _ = writeln!(
                s,
                "( action = \"request\" )( clientxrsl = \"&(executable=run.sh)(jobname=arctest-{:06})\" )",
                self.index
            );
        }
        // Pad to the thesis's 2.3 KB with the comments a submitting tool leaves.
        while s.len() < 2250 {
            let line = r.string(BASE64, 60);
            if f.adl {
                let _ = writeln!(s, "  <!-- {line} -->");
            } else {
                let _ = writeln!(s, "(* {line} *)");
            }
        }
        if f.adl {
            let _ = writeln!(s, "</ActivityDescription>");
        }
        s.into_bytes()
    }

    fn diag(&self, f: &Facts) -> Vec<u8> {
        let mut s = String::new();
        let _ = writeln!(s, "runtimeenvironments={};", f.rtes.join(";"));
        let _ = writeln!(s, "nodename={}", f.node);
        let _ = writeln!(s, "WallTime={}.0s", f.used_wall);
        let _ = writeln!(s, "Processors={}", f.count);
        let _ = writeln!(s, "UserTime={}.34s", f.user_time);
        let _ = writeln!(s, "KernelTime={}.08s", f.kernel_time);
        let _ = writeln!(s, "AverageTotalMemory={}kB", f.mem);
        let _ = writeln!(s, "AverageResidentMemory={}kB", f.mem / 2);
        let _ = writeln!(s, "exitcode={}", f.exitcode);
        let _ = writeln!(s, "LRMSStartTime={}", Self::time(f.start + 120));
        let _ = writeln!(s, "LRMSEndTime={}", Self::time(f.start + 120 + f.used_wall));
        let _ = writeln!(s, "LRMSExitcode={}", f.exitcode);
        let _ = writeln!(s, "frontend_distribution=CentOS Linux 7.3.1611 (Core)");
        let _ = writeln!(s, "frontend_system=Linux 3.10.0-514.10.2.el7.x86_64");
        s.into_bytes()
    }

    fn errors(&self, f: &Facts) -> Vec<u8> {
        let mut s = String::new();
        let states = ["ACCEPTED", "PREPARING", "SUBMIT", "INLRMS", "FINISHING", "FINISHED"];
        let mut t = f.start;
        let mut prev = "UNDEFINED";
        for st in states {
            let _ = writeln!(s, "{} Job state change {prev} -> {st}   Reason: (Re)Accepting new job", iso(t));
            let _ = writeln!(s, "{} {}: State: {st}: starting processing of job step", iso(t + 1), self.id);
            if st == self.state {
                break;
            }
            prev = st;
            t += 300;
        }
        while s.len() < 1400 {
            let _ = writeln!(s, "{} {}: Data staging: transfer of input.tar.gz progressing", iso(t), self.id);
            t += 30;
        }
        s.into_bytes()
    }

    fn proxy(&self) -> Vec<u8> {
        // A delegated RFC proxy: proxy certificate, its key, the user's certificate (PEM).
        let mut r = self.rng(7);
        let mut s = String::new();
        for (what, lines) in [("CERTIFICATE", 14), ("PRIVATE KEY", 15), ("CERTIFICATE", 22)] {
            let _ = writeln!(s, "-----BEGIN {what}-----");
            for _ in 0..lines {
                let _ = writeln!(s, "{}", r.string(BASE64, 64));
            }
            let _ = writeln!(s, "{}==", r.string(BASE64, 30));
            let _ = writeln!(s, "-----END {what}-----");
        }
        s.into_bytes()
    }

    fn statistics(&self, f: &Facts) -> Vec<u8> {
        let mut s = String::new();
        let _ = writeln!(s, "inputfile:url=gsiftp://se01.example.org:2811/data/{}/{}/input.tar.gz,size={},starttime={},endtime={},fromcache=no", f.vo, self.id, f.mem * 7, iso(f.start + 30), iso(f.start + 95));
        let _ = writeln!(s, "outputfile:url=srm://srm.example.org:8443/srm/managerv2?SFN=/pnfs/example.org/data/{}/{}/output.tar.gz,size={},starttime={},endtime={}", f.vo, self.id, f.mem * 3, iso(f.start + f.used_wall + 200), iso(f.start + f.used_wall + 260));
        s.into_bytes()
    }

    /// What GMJobsInfo collect() extracts from this job's files.
    pub fn expected(&self) -> Summary {
        let f = self.facts();
        let finished = self.state == "FINISHED";
        let _ = finished; // no .failed files: FINISHED stays FINISHED
        Summary {
            id: self.id.clone(),
            status: self.state.to_string(),
            share: f.queue.clone(),
            localid: f.localid.clone(),
            interface: f.interface.to_string(),
            // Lines with a value (`^(\w+)=(.+)$`); `voms`/`activityid` lines count too.
            local_keys: String::from_utf8_lossy(&self.local(&f))
                .lines()
                .filter(|l| l.split_once('=').is_some_and(|(_, v)| !v.is_empty()))
                .count() as u32,
            count: f.count,
            reqwalltime: f.walltime,
            reqcputime: f.cputime,
            stdout: "stdout".into(),
            runtimes: f.rtes.clone(),
            description: if f.adl { "adl".into() } else { "rsl".into() },
            exitcode: Some(f.exitcode as i64),
            nodenames: vec![f.node.clone()],
            walltime: Some(f.used_wall as i64),
            cputime: Some((f.user_time + f.kernel_time) as i64),
            usedmem: Some(f.mem as i64),
        }
    }
}

struct Facts {
    queue: String,
    localid: String,
    dn: String,
    vo: &'static str,
    start: u64,
    count: i64,
    walltime: i64,
    cputime: i64,
    rtes: Vec<String>,
    adl: bool,
    interface: &'static str,
    node: String,
    exitcode: u64,
    used_wall: u64,
    user_time: u64,
    kernel_time: u64,
    mem: u64,
}

fn iso(t: u64) -> String {
    let (y, m, d) = civil((t / 86_400) as i64);
    let s = t % 86_400;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", s / 3600, s % 3600 / 60, s % 60)
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_thesis() {
        let mut tot = [0usize; 11];
        let n = 200;
        for i in 0..n {
            let j = Job::new(1, i, Layout::Flat);
            for (k, sfx) in SUFFIXES.iter().enumerate() {
                tot[k] += j.file(sfx).len();
            }
        }
        let avg = |s: &str| tot[SUFFIXES.iter().position(|x| *x == s).unwrap()] / n as usize;
        // Table B.3: .local 1.1 KB, .status 8 B, .grami 1.5 KB, .description 2.3 KB, .diag 437 B.
        let within = |s: &str, want: usize, tol: usize| {
            let a = avg(s);
            assert!(a.abs_diff(want) <= tol, "{s}: average {a} B, want {want} +- {tol}");
        };
        within("local", 1100, 150);
        within("status", 8, 2);
        within("grami", 1500, 200);
        within("description", 2300, 120);
        within("diag", 437, 60);
        assert_eq!(avg("input_status"), 0);
        for s in SUFFIXES {
            assert!(avg(s) < 4096, "{s} fits one 4 KiB block");
        }
    }

    #[test]
    fn jobs_depend_on_seed_and_index_only() {
        let a = Job::new(5, 42, Layout::Arc6);
        let b = Job::new(5, 42, Layout::Arc6);
        assert_eq!(a.id, b.id);
        assert_eq!(a.file("local"), b.file("local"));
        assert_ne!(Job::new(5, 43, Layout::Arc6).file("local"), a.file("local"));
        assert_eq!(a.id.len(), 54);
        let c = Job::new(5, 42, Layout::Arc7);
        assert_eq!(c.id.len(), 12);
        assert!(c.id.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn arc7_ids_are_unique() {
        let mut ids: Vec<String> = (0..50_000).map(|i| Job::new(9, i, Layout::Arc7).id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 50_000);
    }

    #[test]
    fn states_follow_the_table() {
        let n = 10_000;
        let finished = (0..n).filter(|&i| Job::new(3, i, Layout::Flat).state == "FINISHED").count();
        assert!((4000..5000).contains(&finished), "{finished}");
        assert_eq!(STATES.iter().map(|s| s.2).sum::<u64>(), 100);
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(Job::time(BASE_TIME), "20170410120000Z");
    }
}
