"""Every number the reference papers publish for the figures and tables the bench suites reproduce.

Purpose: let plots and reports put "the paper's value" beside ours, with the paper's own words as the source.
Built by reading the plain-text copies in /work/shared/papers (FILES below); nothing here is measured by us.

Papers: "fast17" = Aghayev et al., Evolving Ext4 for Shingled Disks (FAST'17); "login17" = its ;login: article
(only numbers it adds or states differently); "apsys16" = StepAhead (APSys'16); "thesis17" = the ARC/DBFS thesis.

ENTRIES is a list of dicts, grouped by paper and by figure/table in the order they appear in the file:
  key     stable short id ("fast17.fig6a.time"), for get()
  paper   "fast17" | "login17" | "apsys16" | "thesis17"
  figure  "Figure 7", "Table 2", or "Section 4.4" for numbers stated only in the text
  what    metric, workload, system and disk
  value   a number; a (low, high) tuple for a range; a dict of per-system (or per-workload) numbers; or None
  unit    unit of value ("x" = baseline time / lazy time unless said otherwise)
  source  {"at": where in the paper, "quote": exact substring of the text file (or a tuple of them), <= ~15 words}
  kind    "stated": the text (prose, caption or a table) gives the number;
          "read-off": read from data labels that the text file carries (none of these files has any);
          "not in the text": only a caption/qualitative words, value None: the number must come from the PDF figure
  sd      optional: the paper's standard deviations, same shape as value (Tables 2-4)
  note    optional: caveats, derivations, disagreements
System names are the papers' ("ext4-stock" = 128 MiB journal, "ext4-baseline" = 10 GiB journal, "ext4-lazy");
SYSTEMS and DISKS map them to the suite's system and device names.  verify() checks every quote against the files.
"""
from typing import Any, Dict, List, Optional, Tuple

FILES = {"fast17": "ext4-lazy-fast17.txt", "login17": "ext4-lazy-login17.txt",
         "apsys16": "stepahead-apsys16.txt", "thesis17": "dbfs-arc-thesis17.txt"}
PAPERS_DIR = "/work/shared/papers"

STATED, READ_OFF, MISSING = "stated", "read-off", "not in the text"
KINDS = (STATED, READ_OFF, MISSING)

# the papers' system and disk names -> bench/suite/systems.py and devices.py names (None: no counterpart)
SYSTEMS = {"ext4-stock": "kernel-ext4-stock", "ext4-baseline": "kernel-ext4-baseline", "ext4-lazy": "ext4lazy-lazy",
           "XFS": "kernel-xfs", "ext4": "kernel-ext4-stock", "DBFS": "dbfs-sqlite"}
DISKS = {"WD5000YS": "cmr", "ST8000AS0002": "smr-seagate", "WD40NMZW": "smr-wd",
         "ST5000AS0011": None, "ST4000LM016": None}

ENTRIES: List[Dict[str, Any]] = []


def _e(key, paper, figure, what, value, unit, at, quote, kind=STATED, **extra):
    d = {"key": key, "paper": paper, "figure": figure, "what": what, "value": value, "unit": unit,
         "source": {"at": at, "quote": quote}, "kind": kind}
    d.update(extra)
    ENTRIES.append(d)


B, L = "ext4-baseline", "ext4-lazy"

# ============================================================ fast17: Evolving Ext4 for Shingled Disks (FAST'17)
P = "fast17"
_e("fast17.abstract.postmark_smr", P, "Abstract", "Postmark (metadata-light file server) speed-up of ext4-lazy over "
   "ext4, four DM-SMR disks (summary of Figure 13)", (1.7, 5.4), "x", "Abstract",
   r"ext4-lazy achieves $1.7-5.4 \times$ improvement over ext4")
_e("fast17.abstract.metadata_heavy", P, "Abstract", "metadata-heavy / traversal speed-up of ext4-lazy, DM-SMR and "
   "CMR disks (summary of Figures 7 and 11)", (2, 13), "x", "Abstract",
   r"it achieves $2-13 \times$ improvement over ext4 on drive-managed SMR disks")

# -- Figure 1 / Table 1: the disks
_e("fast17.fig1.random_write_tput", P, "Figure 1", "throughput over time under 4 KiB random writes, the five disks "
   "of Table 1 (validation shape for the disk models)", None, "MB/s", "Figure 1 caption",
   "under 4 KiB random write traffic", MISSING, note="only the caption; no axis values in the text")
_e("fast17.table1.capacity", P, "Table 1", "capacity of the evaluation disks (DM-SMR: ST8000AS0002, ST5000AS0011, "
   "ST4000LM016, WD40NMZW; CMR: WD5000YS)",
   {"ST8000AS0002": 8000, "ST5000AS0011": 5000, "ST4000LM016": 4000, "WD40NMZW": 4000, "WD5000YS": 500},
   "GB (as labelled: 8 TB ... 500 GB)", "Table 1",
   ("DM-SMR\tSeagate\tST8000AS0002\t8 TB\t3.5 inch", "CMR\tWestern Digital\tWD5000YS\t500 GB\t3.5 inch"),
   note="form factors: 3.5 inch except ST4000LM016 and WD40NMZW (2.5 inch)")

# -- Figure 3: kernel compile write mix (also section 4.2.2)
_e("fast17.fig3.kernel_build_writes", P, "Figure 3", "writes during a Linux 4.6 build with all modules, fresh ext4",
   {"data": 12 * 1024, "journal": 185, "metadata": 98}, "MiB", "Figure 3 caption",
   "The workload writes 12 GiB of data, 185 MiB of journal",
   note="data stated as 12 GiB; metadata: 'only 98 MiB of metadata'")
_e("fast17.fig3.metadata_share", P, "Figure 3", "metadata share of all writes, Linux 4.6 build, ext4", 0.77, "%",
   "Figure 3 caption", "only 98 MiB of metadata, making it 0.77% of total writes")

# -- Section 2.1: the ST8000AS0002 (for the smr-seagate model)
_e("fast17.s2_1.band_size", P, "Section 2.1", "average band size, ST8000AS0002", 30, "MiB", "Section 2.1",
   "With an average band size of 30 MiB")
_e("fast17.s2_1.bands", P, "Section 2.1", "number of bands (lower bound), ST8000AS0002", 260_000, "bands",
   "Section 2.1", "the disk has over 260,000 bands")
_e("fast17.s2_1.persistent_cache", P, "Section 2.1", "persistent cache size, ST8000AS0002 (not host-visible)", 25,
   "GiB", "Section 2.1", "a ≈ 25 GiB persistent cache that is not visible to the host")
_e("fast17.s2_1.band_clean_time", P, "Section 2.1", "time to clean one band, typical, ST8000AS0002", (1, 2), "s",
   "Section 2.1", "Cleaning a single band typically takes 1-2 seconds, but can")
_e("fast17.s2_1.band_clean_max", P, "Section 2.1", "time to clean one band, extreme cases, ST8000AS0002", 45, "s",
   "Section 2.1", "take up to 45 seconds in extreme cases.")

# -- Section 3.1: motivation
_e("fast17.s3_1.flex_bgs", P, "Section 3.1", "flex_bgs on an 8 TB partition", 4000, "flex_bgs", "Section 3.1",
   "there are about 4,000 flex_bgs")
_e("fast17.s3_1.clean_all_flexbg", P, "Section 3.1", "cleaning work / disk traffic when every flex_bg is updated "
   "(8 TB, 30 MiB bands)", {"cleaning": 120, "traffic": 360}, "GiB", "Section 3.1",
   "requiring cleaning of 120 GiB worth of bands, generating 360 GiB of disk traffic")
_e("fast17.s3_1.clean_500gib", P, "Section 3.1", "bands dirtied / cleaning work for 500 GiB of files (1/16 of the "
   "disk)", {"bands": 250, "cleaning_GiB": 22.5}, "bands / GiB", "Section 3.1",
   "would dirty at least 250 bands requiring 22.5 GiB of cleaning work")
_e("fast17.s3_1.compilebench_writes", P, "Section 3.1", "writes of 128 parallel Compilebench instances on ext4",
   {"total": 433, "data": 388, "journal": 34, "metadata": 11}, "GiB", "Section 3.1",
   ("Out of 433 GiB total writes, 388 GiB were data writes", "34 GiB were journal writes, and 11 GiB were metadata"))
_e("fast17.s3_1.compilebench_unique_md", P, "Section 3.1", "unique metadata blocks, 128 x Compilebench (0.8% of "
   "all writes)", 3.5, "GiB", "Section 3.1", "The total size of unique metadata blocks was 3.5 GiB",
   note="'only 0.8% of total writes'")
_e("fast17.s3_1.journal_overwrites", P, "Section 3.1", "share of journal writes that are overwrites, "
   "128 x Compilebench", 90, "%", "Section 3.1", "90% of journal writes were overwrites")

# -- Section 3.3: mount cost
_e("fast17.s3_3.jmap_rebuild", P, "Section 3.3", "mount-time jmap reconstruction, ~1 GiB between journal tail and "
   "head", (5, 6), "s", "Section 3.3", "takes 5-6 seconds when the space between the head and tail")

# -- Section 4: setup
_e("fast17.s4.ram", P, "Section 4", "test machine RAM (i7-3820 3.6 GHz, Linux 4.6)", 16, "GB", "Section 4",
   "16 GB of RAM running Linux kernel 4.6")
_e("fast17.s4.wb_ratio", P, "Section 4", "writeback cache ratio fixed for the disks", 50, "% of the total",
   "Section 4", "for our disks to 50% of the total")
_e("fast17.s4.repeats", P, "Section 4", "repetitions per experiment (mean and sd reported)", 5, "runs (at least)",
   "Section 4", "We repeat every experiment at least five times")

# -- Figure 6: journal bottleneck (section 4.1), CMR WD5000YS
_e("fast17.fig6.workload", P, "Figure 6", "Figure 6 workload: Filebench CreateFiles, files / directories, CMR "
   "WD5000YS", {"files": 100_000, "directories": 60_000}, "count (directories: 'over')", "Section 4.1",
   "creating 100,000 small files in over 60,000 directories",
   note="file size not given for this run; 'The workload size is ≈ 1 GiB and fits in memory.'")
_e("fast17.fig6.journal_sizes", P, "Figure 6", "journal sizes: ext4-stock / ext4-baseline",
   {"ext4-stock": 128, "ext4-baseline": 10 * 1024}, "MiB", "Section 4.1",
   ("the default journal size of 128 MiB as *ext4-stock*", "we choose ext4 with a 10 GiB journal"))
_e("fast17.fig6a.time", P, "Figure 6 (a)", "completion time creating 100,000 files (in memory, writeback excluded), "
   "CMR WD5000YS", {"ext4-stock": 460, "ext4-baseline": 10}, "s", "Section 4.1",
   ("on ext4-stock the benchmark completes in ≈ 460 seconds", "it completes $46 \\times$ faster, in ≈ 10 seconds"))
_e("fast17.fig6a.speedup", P, "Figure 6 (a)", "ext4-baseline speed-up over ext4-stock, same run", 46, "x",
   "Section 4.1", "whereas on ext4-baseline it completes $46 \\times$ faster")
_e("fast17.fig6b.dirty_curve", P, "Figure 6 (b)", "dirty pages over time (/proc/meminfo each second), both systems",
   None, "GiB vs s", "Figure 6 caption", "The volume of dirty pages during benchmark runs", MISSING)
_e("fast17.fig6b.journal_full", P, "Figure 6 (b)", "time until the 128 MiB journal fills, ext4-stock", 3, "s",
   "Section 4.1", "On ext4-stock, the journal fills in 3 seconds",
   note="ext4-baseline: 'the journal never becomes full and no forced checkpoints happen'")
_e("fast17.fig6b.baseline_dirty", P, "Figure 6 (b)", "pages dirtied by ext4-baseline, and in how long",
   {"GiB": 1, "s": 10}, "GiB / s", "Section 4.1", "dirtying about 1 GiB worth of pages in 10 seconds")
_e("fast17.fig6b.stock_dirs_phase", P, "Figure 6 (b)", "ext4-stock: directory-creation phase length", 140, "s",
   "Section 4.1", "directories are created in the first 140 seconds")
_e("fast17.fig6b.stock_checkpoint_stall", P, "Figure 6 (b)", "ext4-stock: longest forced-checkpoint stall "
   "(file phase)", 30, "s", "Section 4.1", "forced checkpoints start taking as long as 30 seconds")
_e("fast17.s4_1.journal_needed", P, "Section 4.1", "journal size that never forces checkpoints: 190 MiB/s disk x "
   "30 s dirty timer", 5700, "MiB", "Section 4.1", "$30s \\times 190$ MiB/s = 5,700 MiB")

# -- Figure 7: microbenchmarks on CMR WD5000YS (section 4.2.1)
_e("fast17.fig7.params", P, "Figure 7", "MakeDirs: directories and tree depth", {"directories": 800_000, "depth": 10},
   "count", "Section 4.2.1", "*MakeDirs* creates 800,000 directories in a directory tree of depth 10")
_e("fast17.fig7.params_files", P, "Figure 7", "CreateFiles: files of 4 KiB", 600_000, "files", "Section 4.2.1",
   "*CreateFiles* creates 600,000 4 KiB files in a directory tree",
   note="tree depth not given here (login17: depth 20); the FAST text garbles FindFiles/RemoveFiles "
        "('*TarFiles* runs find'), login17 names them")
_e("fast17.fig7.threads", P, "Figure 7", "threads of MakeDirs and CreateFiles (sync at the end)", 8, "threads",
   "Section 4.2.1", "run with 8 threads and execute sync at the end")
_e("fast17.fig7.runtime", P, "Figure 7", "runtime of each microbenchmark, ext4-baseline and ext4-lazy, CMR",
   None, "s", "Figure 7 caption", "Microbenchmark runtimes on ext4-baseline and ext4-lazy.", MISSING,
   note="only speed-up ranges are stated (below)")
_e("fast17.fig7.speedup_create", P, "Figure 7", "speed-up of ext4-lazy, MakeDirs and CreateFiles, CMR", (1.5, 2),
   "x", "Section 4.2.1", "complete $1.5-2 \\times$ faster on ext4-lazy than on ext4-baseline")
_e("fast17.fig7.speedup_traversal", P, "Figure 7", "speed-up of ext4-lazy, ListDirs, FindFiles, TarDirs, "
   "RemoveDirs, RemoveFiles, CMR", (3, 5), "x", "Section 4.2.1",
   "except TarFiles, complete $3-5 \\times$ faster, as seen in Figure 7")
_e("fast17.fig7.speedup_listdirs", P, "Figure 7", "speed-up of ext4-lazy, ListDirs, CMR", 5, "x", "Section 4.3.1",
   "compared to being $5 \\times$ faster on CMR disk")
_e("fast17.fig7.speedup_makedirs", P, "Figure 7", "MakeDirs on CMR: ext4-lazy halves writes and runtime "
   "(speed-up ~2)", 2, "x", "Section 4.2.1", "ext4-lazy halves the writes as well as the runtime",
   note="'halves' -> 2x")
_e("fast17.fig7.speedup_tarfiles", P, "Figure 7", "speed-up of ext4-lazy, TarFiles, CMR", None, "x",
   "Section 4.2.1", "We do not observe a dramatic improvement in TarFiles", MISSING,
   note="no number; section 4.4: 'putting the metadata at the center wins slightly'. micro.py's (1, 1) is a "
        "reading of these words")

# -- Figure 8: offsets, MakeDirs and RemoveDirs, CMR
_e("fast17.fig8.offsets", P, "Figure 8", "disk offsets of metadata reads/writes and journal writes over time, "
   "MakeDirs and RemoveDirs, both systems, CMR", None, "offset vs s", "Figure 8 caption",
   "Disk offsets of I/O operations during MakeDirs and RemoveDirs microbenchmarks", MISSING)
_e("fast17.fig8b.md_reads", P, "Figure 8 (b)", "MakeDirs on ext4-lazy, CMR: metadata reads (3% of total I/O)", 140,
   "MiB", "Section 4.2.1", "is ≈ 140 MiB (3% of total I/O in the second row")
_e("fast17.fig8b.md_read_time", P, "Figure 8 (b)", "MakeDirs on ext4-lazy, CMR: share of runtime spent on those "
   "metadata reads (lower bound)", 30, "% of runtime", "Section 4.2.1",
   "they consume over 30% of runtime due to long seeks")

# -- Table 2: I/O of MakeDirs and RemoveDirs on CMR (mean ± sd)
_T2 = {"MakeDirs": ("MakeDirs/ext4-baseline\t143.7±2.8\t4,631±33.8\t4,735±0.1",
                    "MakeDirs/ext4-lazy\t144 ± 4\t0\t$4,707{\\pm}1.8$"),
       "RemoveDirs": ("RemoveDirs/ext4-baseline\t$4,066.4{\\pm}0.1$\t322.4±11.9\t$1,119{\\pm}88.6$",
                      "RemoveDirs/ext4-lazy\t4,066.4±0.1\t0\t472±3.9")}
for _wl, _col, _v, _sd in (
        ("MakeDirs", "metadata reads", {B: 143.7, L: 144}, {B: 2.8, L: 4}),
        ("MakeDirs", "metadata writes", {B: 4631, L: 0}, {B: 33.8, L: 0}),
        ("MakeDirs", "journal writes", {B: 4735, L: 4707}, {B: 0.1, L: 1.8}),
        ("RemoveDirs", "metadata reads", {B: 4066.4, L: 4066.4}, {B: 0.1, L: 0.1}),
        ("RemoveDirs", "metadata writes", {B: 322.4, L: 0}, {B: 11.9, L: 0}),
        ("RemoveDirs", "journal writes", {B: 1119, L: 472}, {B: 88.6, L: 3.9})):
    _e(f"fast17.table2.{_wl.lower()}.{_col.replace(' ', '_')}", P, "Table 2",
       f"{_wl}, {_col}, CMR WD5000YS, full scale", _v, "MiB", "Table 2 rows", _T2[_wl], sd=_sd)

# -- Table 3 / Figure 9: Postmark on CMR (section 4.2.2)
_e("fast17.postmark.config", P, "Section 4.2.2", "Postmark working set: files / directories",
   {"files": 10_000, "directories": 25_000}, "count", "Section 4.2.2",
   "creates a working set of 10,000 files spread sparsely across 25,000 directories",
   note="file sizes 512 bytes to 1 MiB")
_e("fast17.postmark.transactions", P, "Section 4.2.2", "Postmark transactions (I/O size 1 MiB)", 100_000,
   "transactions", "Section 4.2.2", "executes 100,000 transactions with the I/O size of 1 MiB")
_e("fast17.postmark.user_io", P, "Section 4.2.2", "data Postmark writes / reads from user space",
   {"written": 37.89, "read": 31.54}, "GiB", "Section 4.2.2", "Postmark writes 37.89 GiB of data and reads 31.54 GiB")
_T3 = ("ext4-baseline\t34,185±10.3\t480±0.2\t1,890±18.6", "ext4-lazy\t33,878±9.8\t0\t1,855±15.4")
for _col, _v, _sd in (("data writes", {B: 34185, L: 33878}, {B: 10.3, L: 9.8}),
                      ("metadata writes", {B: 480, L: 0}, {B: 0.2, L: 0}),
                      ("journal writes", {B: 1890, L: 1855}, {B: 18.6, L: 15.4})):
    _e(f"fast17.table3.{_col.replace(' ', '_')}", P, "Table 3", f"Postmark, {_col} completed by the disk, "
       "CMR WD5000YS", _v, "MiB", "Table 3 rows", _T3, sd=_sd)
_e("fast17.table3.md_share", P, "Table 3", "Postmark on CMR: metadata share of all writes, ext4-baseline", 1.3,
   "%", "Table 3 caption", "Metadata writes make 1.3% of total writes in ext4-baseline")
_e("fast17.table3.md_unique", P, "Table 3", "Postmark on CMR: unique part of the metadata writes, ext4-baseline",
   0.5, "fraction", "Table 3 caption", "only ½ of which is unique")
_e("fast17.fig9.throughput", P, "Figure 9", "Postmark: mean disk throughput, CMR WD5000YS",
   {B: 24.24, L: 25.47}, "MiB/s", "Section 4.2.2", "from 24.24 MiB/s to 25.47 MiB/s")
_e("fast17.fig9.throughput_gain", P, "Figure 9", "Postmark: throughput gain of ext4-lazy, CMR", 5, "%",
   "Section 4.2.2", "the disk sees 5% increase in throughput on ext4-lazy")
_e("fast17.fig9.time_saved", P, "Figure 9", "Postmark: runtime saved by ext4-lazy, CMR", 100, "s",
   "Section 4.2.2", "the benchmark completes 100 seconds faster on ext4-lazy",
   note="the runtimes themselves are not stated")
_e("fast17.fig9.series", P, "Figure 9", "Postmark: throughput over time (both systems) and write offsets "
   "(ext4-baseline), CMR", None, "MiB/s vs s", "Figure 9 caption",
   "The top graph shows the throughput of the disk during a Postmark run", MISSING)

# -- Figure 10: kernel build utilisation (section 4.2.2)
_e("fast17.fig10.utilisation", P, "Figure 10", "disk and CPU utilisation over time, Linux 4.6 build, make -j16, "
   "ext4-baseline, CMR", None, "% vs s", "Figure 10 caption", "Disk and CPU utilization sampled from iostat output",
   MISSING, note="text: kernel compile is 'CPU-bound rather than disk-bound'")
_e("fast17.fig10.writes", P, "Figure 10", "Linux 4.6 build on ext4-baseline: data / journal writes",
   {"data": 12 * 1024, "journal": 185}, "MiB", "Section 4.2.2",
   "generated 12 GiB of data writes and 185 MiB of journal writes")
_e("fast17.fig10.md_share", P, "Figure 10", "Linux 4.6 build on ext4-baseline: metadata writes, 0.77% of all",
   98, "MiB", "Section 4.2.2", "At 98 MiB, metadata writes comprised only 0.77% of total writes")

# -- Figure 11: microbenchmarks on DM-SMR ST8000AS0002, 2 TB partition (section 4.3.1)
_e("fast17.fig11.partition", P, "Figure 11", "partition used for the DM-SMR microbenchmarks, ST8000AS0002", 2,
   "TB", "Section 4.3.1", "repeated on ST8000AS0002 with a 2 TB partition")
_e("fast17.fig11.runtime", P, "Figure 11", "runtime of each microbenchmark, both systems, ST8000AS0002", None, "s",
   "Figure 11 caption", "Microbenchmark runtimes and cleaning times on ext4-baseline and ext4-lazy", MISSING)
_e("fast17.fig11.smr_vs_cmr", P, "Figure 11", "MakeDirs and CreateFiles: how much faster on ST8000AS0002 than on "
   "the CMR disk", (2, 3), "x", "Section 4.3.1", "they typically complete $2-3 \\times$ faster than on CMR disk")
_e("fast17.fig11.speedup_create", P, "Figure 11", "speed-up of ext4-lazy, MakeDirs and CreateFiles, ST8000AS0002",
   (1.5, 2.5), "x", "Section 4.3.1", "MakeDirs and CreateFiles are $1.5-2.5 \\times$ faster on ext4-lazy")
_e("fast17.fig11.speedup_listdirs", P, "Figure 11", "speed-up of ext4-lazy, ListDirs, ST8000AS0002", 13, "x",
   "Section 4.3.1", "completes $13 \\times$ faster on ext4-lazy")
_e("fast17.fig11.speedup_other", P, "Figure 11", "speed-up of ext4-lazy, FindFiles, TarDirs, TarFiles, RemoveDirs, "
   "RemoveFiles, ST8000AS0002", None, "x", "Section 4.3.1", "the remaining directory traversal benchmarks, ListDir "
   "for example", MISSING)
_e("fast17.fig11.cleaning_makedirs", P, "Figure 11", "cleaning time after MakeDirs, ST8000AS0002", {B: 846, L: 0},
   "s", "Section 4.3.1", ("cleaning time for MakeDirs on ext4-lazy is zero as well",
                          "compared to ext4-baseline's 846 seconds"))
_e("fast17.fig11.cleaning_removedirs", P, "Figure 11", "cleaning time after RemoveDirs, ST8000AS0002",
   {B: 590, L: 10}, "s", "Section 4.3.1", ("RemoveDirs and RemoveFiles are 10-20 seconds on ext4-lazy",
                                           "compared to 590-366 seconds on ext4-baseline"),
   note="FAST gives ranges; the pairing is from login17 ('10 and 20 seconds, respectively')")
_e("fast17.fig11.cleaning_removefiles", P, "Figure 11", "cleaning time after RemoveFiles, ST8000AS0002",
   {B: 366, L: 20}, "s", "Section 4.3.1", ("RemoveDirs and RemoveFiles are 10-20 seconds on ext4-lazy",
                                           "compared to 590-366 seconds on ext4-baseline"),
   note="pairing from login17")
_e("fast17.fig11.cleaning_readonly", P, "Figure 11", "cleaning time after ListDirs, FindFiles, TarDirs, TarFiles "
   "(no writes to the disk), both systems", 0, "s", "Section 4.3.1",
   "The cleaning times for ListDirs, FindFiles, TarDirs, and TarFiles are zero")
_e("fast17.fig11.cleaning_createfiles", P, "Figure 11", "cleaning time after CreateFiles, ST8000AS0002", None, "s",
   "Figure 11 caption", "Cleaning time is the additional time after the benchmark run", MISSING)
_e("fast17.s4_3_1.stream_min", P, "Section 4.3.1", "smallest sequential write the ST8000AS0002 streams past the "
   "persistent cache", 8, "MiB", "Section 4.3.1", "sequential writes of at least 8 MiB in size are streamed",
   note="'a single 4 KiB random write in the middle of a sequential write disrupted streaming'")

# -- Figure 12: Postmark, ST8000AS0002 with a 400 GB partition (section 4.3.2)
_e("fast17.fig12.lazy_time", P, "Figure 12", "Postmark runtime, ext4-lazy, ST8000AS0002 400 GB partition", 461, "s",
   "Section 4.3.2", "The benchmark completes more than $2 \\times$ faster on ext4-lazy, in 461 seconds",
   note="ext4-baseline's runtime is not stated; '> 2x' puts it above 922 s")
_e("fast17.fig12.speedup", P, "Figure 12", "Postmark speed-up of ext4-lazy, ST8000AS0002 400 GB (lower bound)", 2,
   "x", "Section 4.3.2", "completes more than $2 \\times$ faster on ext4-lazy")
_e("fast17.fig12.lazy_tput", P, "Figure 12", "ext4-lazy: disk throughput until the persistent cache fills, and "
   "when it fills", {"MiB/s": 140, "fills_at_s": 250}, "MiB/s / s", "Section 4.3.2",
   "the disk sustains 140 MiB/s throughput and fills the persistent cache in 250 seconds")
_e("fast17.fig12.lazy_steady", P, "Figure 12", "ext4-lazy: steady throughput after the cache fills", 20, "MiB/s",
   "Section 4.3.2", "then drops to a steady 20 MiB/s until the end of the run")
_e("fast17.fig12.baseline_tput", P, "Figure 12", "ext4-baseline: throughput before the cache fills, and when it "
   "fills", {"MiB/s": 50, "fills_at_s": 450}, "MiB/s / s", "Section 4.3.2",
   "reduce throughput to 50 MiB/s taking the disk 450 seconds to fill")
_e("fast17.fig12.baseline_stall", P, "Figure 12", "ext4-baseline: example window with no data writes (cleaning "
   "interleaved)", (450, 530), "s (time into run)", "Section 4.3.2", "as seen, for example, between seconds 450-530")
_e("fast17.fig12.series", P, "Figure 12", "throughput over time (both systems) and write offsets (ext4-baseline), "
   "ST8000AS0002 400 GB", None, "MiB/s vs s", "Figure 12 caption",
   "The top graph shows the throughput of a ST8000AS0002 DM-SMR disk", MISSING)

# -- Figure 13: Postmark on four DM-SMR disks, full-disk partitions
_e("fast17.fig13.speedup", P, "Figure 13", "Postmark speed-up of ext4-lazy, full-disk partition: (a) ST8000AS0002, "
   "(b) ST4000LM016, (c) ST5000AS0011, (d) WD40NMZW",
   {"ST8000AS0002": 5.4, "ST4000LM016": 2, "ST5000AS0011": 2, "WD40NMZW": 1.7}, "x", "Figure 13 caption",
   "Ext4-lazy provides a speedup of $5.4 \\times 2 \\times, 2 \\times, 1.7 \\times$",
   note="disk per part from section 4.3.2: (a) 'full 8 TB partition', (b) ST4000LM016, (c) ST5000AS0011, "
        "(d) WD40NMZW")
_e("fast17.fig13.runtime", P, "Figure 13", "Postmark runtimes and throughput series, four DM-SMR disks, both "
   "systems", None, "s, MiB/s", "Figure 13 caption", "The top graphs show the throughput of four DM-SMR disks",
   MISSING)
_e("fast17.fig13a.low_period", P, "Figure 13 (a)", "ext4-baseline on the full 8 TB ST8000AS0002: period of "
   "ultra-low throughput", 1, "hour (approx.)", "Section 4.3.2", "after an hour of ultra-low throughput due to cleaning")
_e("fast17.fig13b.cleaning_window", P, "Figure 13 (b)", "ext4-baseline on ST4000LM016: ultra-low-throughput "
   "cleaning period, start and end", (2000, 4200), "s (time into run)", "Section 4.3.2",
   "starting at second 2000, and recovers around second 4200")
_e("fast17.fig13d.tput_gain", P, "Figure 13 (d)", "ext4-lazy throughput gain on WD40NMZW (depends on cache state)",
   (1.4, 2.5), "x", "Section 4.3.2", "the disk achieves 1.4-2.5× increase in throughput over ext4-baseline")

# -- Figure 14: Postmark transactions/s, four DM-SMR disks
_e("fast17.fig14.tps", P, "Figure 14", "Postmark transactions/s (transaction phase), four DM-SMR disks, both "
   "systems", None, "transactions/s", "Figure 14 caption", "Postmark reported transaction throughput numbers",
   MISSING)
_e("fast17.fig14.wd_vs_st8000_baseline", P, "Figure 14", "ext4-baseline: WD40NMZW tps / ST8000AS0002 tps", 2, "x",
   "Section 4.3.2", "with ext4-baseline WD40NMZW is $2 \\times$ faster than ST8000AS0002")
_e("fast17.fig14.st8000_vs_wd_lazy", P, "Figure 14", "ext4-lazy: ST8000AS0002 tps / WD40NMZW tps (ST8000AS0002 "
   "fastest overall)", 2, "x", "Section 4.3.2", "ST8000AS0002 is $2 \\times$ faster than WD40NMZW")

# -- Table 4: Postmark on ST8000AS0002, 400 GB partition
_T4 = ("ext4-baseline\t32,917±9.7\t563±0.9\t1,212±12.6", "ext4-lazy\t32,847±9.3\t0\t1,069±11.4")
for _col, _v, _sd in (("data writes", {B: 32917, L: 32847}, {B: 9.7, L: 9.3}),
                      ("metadata writes", {B: 563, L: 0}, {B: 0.9, L: 0}),
                      ("journal writes", {B: 1212, L: 1069}, {B: 12.6, L: 11.4})):
    _e(f"fast17.table4.{_col.replace(' ', '_')}", P, "Table 4", f"Postmark, {_col} completed by the disk, "
       "ST8000AS0002 400 GB partition", _v, "MiB", "Table 4 rows", _T4, sd=_sd)
_e("fast17.table4.md_share", P, "Table 4", "Postmark on ST8000AS0002 400 GB: metadata share of all writes, "
   "ext4-baseline", 1.6, "%", "Section 4.3.2", "metadata writes make up 1.6% of total writes")
_e("fast17.table4.md_unique", P, "Table 4", "unique part of those metadata writes (about 120 MiB)", 0.2, "fraction",
   "Table 4 caption", "only $\\frac{1}{5}$ of which is unique",
   note="text: 'the unique amount of metadata is only \\approx 120 MiB'")

# -- Section 4.4: overheads
_e("fast17.s4_4.lookup_overhead", P, "Section 4.4", "jmap indirection: read-time difference, 10,000 mappings to "
   "random journal blocks, cold cache", 0, "s (no difference)", "Section 4.4", "found no difference in total time")
_e("fast17.s4_4.jmap_entry", P, "Section 4.4", "memory per jmap entry", 66, "bytes", "Section 4.4",
   "occupying 66 bytes in memory",
   note="the listed parts (3x8 + 2x8 + 12 + 4) sum to 56 bytes, not 66; 63 MiB per million matches 66")
_e("fast17.s4_4.jmap_million", P, "Section 4.4", "memory of a million-entry jmap (maps 3.8 GiB of hot metadata)",
   63, "MiB", "Section 4.4", "a million-entry jmap that can map 3.8 GiB of hot metadata, requires 63 MiB")
_e("fast17.s4_4.shallow_tar", P, "Section 4.4", "tar of a directory of 10,000 small files at the outer diameter, "
   "cold cache, CMR", {B: 103, L: 101}, "s", "Section 4.4",
   "the average times were 103 seconds and 101 seconds, respectively")
_e("fast17.s4_4.shallow_tar_seeks", P, "Section 4.4", "seeks to read that directory's metadata (readahead), "
   "ext4-lazy", 3, "seeks", "Section 4.4", "brought into the buffer cache in just 3 seeks")
_e("fast17.s4_4.live_fraction", P, "Section 4.4", "live metadata in the 10 GiB journal, all benchmarks "
   "(upper bound)", 10, "%", "Section 4.4", "the 10 GiB journal always contained less than 10% live metadata")
_e("fast17.s4_4.min_journal", P, "Section 4.4", "journal size at the first noticeable cleaning slowdown (live "
   "metadata ~70% of it)", 1.4, "GiB", "Section 4.4",
   "first noticeable slowdown occurred with a journal size of 1.4 GiB",
   note="'when the live metadata was \\approx 70% of the journal'")

# ============================================================ login17: the ;login: article (only what it adds)
P = "login17"
_e("login17.intro.metadata_light", P, "Introduction", "Postmark metadata share of writes (upper bound)", 1,
   "% of writes", "Introduction", "the metadata writes make up less than 1% of total writes")
_e("login17.intro.unresponsive", P, "Introduction", "stock ext4 on an SMR disk, Postmark: time of near-zero "
   "throughput (cf. FAST Figure 13 (a))", 1, "hour (almost)", "Introduction",
   "the SMR disk appears unresponsive for almost an hour with near-zero throughput")
_e("login17.table1.wd5000ys", P, "Table 1", "capacity of the CMR disk as printed (typo: FAST says 500 GB; "
   "ST8000AS0002 is printed '8 TM')", 500, "MB (sic)", "Table 1", "CMR\tWestern Digital\tWD5000YS\t500 MB\t3.5 inch",
   note="disagrees with FAST Table 1 ('500 GB'); use FAST")
_e("login17.smr.rmw_io", P, "SMR", "disk I/O for one read-modify-write of a ~30 MiB band (static mapping: read, "
   "write scratch, write band)", 90, "MiB", "SMR section", "generating ≈ 90 MiB disk I/O")
_e("login17.fig4.speedup", P, "Figure 4", "= FAST Figure 6 (a): speed-up of a 10 GiB journal over 128 MiB "
   "(lower bound)", 40, "x", "Evaluation", "a metadata-heavy workload completes over 40x faster",
   note="FAST states 46x (460 s vs 10 s)")
_e("login17.fig5.createfiles_depth", P, "Figure 5", "= FAST Figure 7: CreateFiles tree depth", 20, "levels",
   "Ext4-lazy on a CMR Disk", "600,000 files each of size 4 KiB in a new directory tree of depth 20",
   note="also: FindFiles runs find, TarFiles tars, RemoveFiles removes that tree")
_e("login17.fig7.cleaning_remove", P, "Figure 7", "= FAST Figure 11: cleaning time after RemoveDirs / RemoveFiles, "
   "ST8000AS0002", {"RemoveDirs": {B: 590, L: 10}, "RemoveFiles": {B: 366, L: 20}}, "s", "Microbenchmarks",
   ("RemoveDirs and RemoveFiles are 10 and 20 seconds, respectively",
    "compared to 590 and 366 seconds on ext4-baseline"))

# ============================================================ apsys16: StepAhead (APSys'16)
P = "apsys16"
_e("apsys16.abstract.hit_gain_max", P, "Abstract", "largest translation-cache hit-rate increase, six workloads", 51,
   "%", "Abstract", "by as much as 51%")
_e("apsys16.abstract.speedup_max", P, "Abstract", "largest application speed-up", 20, "%", "Abstract",
   "application speed-up of as much as 20%", note="section 4.1 states at most 19% (find)")
_e("apsys16.intro.speedup_range", P, "Introduction", "hit ratio improvement up to 50%, workload speed-ups", (8, 20),
   "%", "Section 1", "up to 50% hit resulting in workload speed ups of 8-20%",
   note="the 8% workload is not named (stat or touch, whose Figure 4 bars are not in the text)")
_TAB1 = ("| boot | 17 | 22 |", "| webserver | 73 | 92 |", "| find | 33 | 54 |", "| ccode | 64 | 27 |",
         "| fileserver | 60 | 72 |")
_e("apsys16.table1.failed", P, "Table 1", "failed dentry lookups, 512 MB RAM, ext4",
   {"boot": 17, "webserver": 73, "find": 33, "ccode": 64, "fileserver": 60}, "%", "Table 1 rows", _TAB1)
_e("apsys16.table1.unused", P, "Table 1", "statically prefetched inodes never used",
   {"boot": 22, "webserver": 92, "find": 54, "ccode": 27, "fileserver": 72}, "%", "Table 1 rows", _TAB1,
   note="section 2.3 text says 'between 10 and 80%' (disagrees with the table's 22-92)")
_e("apsys16.s2_2.ram", P, "Table 1", "RAM of the Table 1 machine", 512, "MB", "Section 2.2",
   "conducted on a Linux machine with 512 MB RAM")
_e("apsys16.s2_2.translations", P, "Table 1", "path translations requested per workload",
   {"boot": 42_000, "webserver": 378_000, "find": 12_500, "ccode": 174_000, "fileserver": 239_000}, "translations",
   "Section 2.2", "are 42K, 378K, 12.5K, 174K and 239K, respectively")
_e("apsys16.s2_2.failed_mean", P, "Table 1", "mean share of failed name resolutions over the five workloads", 50,
   "%", "Section 2.2", "On average, across these workloads, 50% of the name resolution operations fail.")
_e("apsys16.s2_3.unused_text", P, "Table 1", "memory wasted on unused prefetched inodes, as the text states it",
   (10, 80), "%", "Section 2.3", "between 10 and 80% across the five workloads",
   note="the table itself gives 22-92%")
_e("apsys16.s4.vm", P, "Section 4", "VM: RAM / vCPUs / virtual disk (two ext4 partitions); host 8 GB, kernel 3.10",
   {"RAM_MB": 512, "vcpus": 1, "disk_GB": 24}, "MB / count / GB", "Section 4",
   "512MB RAM, 1 VCPU and a virtual disk of size 24 GB")
_e("apsys16.table2.trees", P, "Table 2", "workload trees: (files, directories)",
   {"find": (365_000, 31_751), "du,stat,touch": (260_042, 17_507), "readdir": (0, 25_788), "grep": (2_250, 95)},
   "(files, directories)", "Table 2 rows",
   ("| find | 365000 | 31751 |", "| du,stat and touch | 260042 | 17507 |", "| readdir | 0 | 25788 |",
    "| grep | 2250 | 95 |"))
_e("apsys16.fig4.speedup", P, "Figure 4", "application speed-up with StepAhead, cold cache",
   {"find": 19, "readdir": 18, "du": 15}, "% improvement", "Section 4.1",
   "improved application performance by 19%, 18% and 15%",
   note="'for *find*, *readdir* and *du*, respectively'; whether % of runtime or of speed is not said "
        "(stepahead.py stores 1.19 etc. as ratios)")
_e("apsys16.fig4.grep", P, "Figure 4", "application speed-up with StepAhead, grep", None, "%", "Section 4.1",
   "did not result in any noticeable application improvements", MISSING,
   note="no number; stepahead.py's grep 1.0 is a reading of these words")
_e("apsys16.fig4.stat_touch", P, "Figure 4", "application speed-up with StepAhead, stat and touch", None, "%",
   "Figure 4 caption", "Application speedup with StepAhead.", MISSING)
_e("apsys16.fig5.hit_gain", P, "Figure 5", "namespace translation cache hit-rate improvement with StepAhead",
   {"find": 51, "du": 50, "readdir": 43}, "%", "Section 4.1",
   "improving namespace translation cache hit rates by 51%, 50% and 43%, respectively",
   note="percentage points or relative is not said; other workloads' bars not in the text")
_e("apsys16.fig5.other", P, "Figure 5", "hit-rate improvement for stat, touch, grep; absolute hit rates", None, "%",
   "Figure 5 caption", "Cache hit improvement with StepAhead.", MISSING)
_e("apsys16.s4_1.readdir_blocks", P, "Section 4.1", "blocks StepAhead prefetched in parallel for readdir",
   {"inode_blocks": 21_000, "directory_blocks": 36_000}, "blocks (approx.)", "Section 4.1",
   "~21000 blocks containing inodes and ~36000 directory data blocks")
_TAB3 = ("| 8 | 80K | 152 | 5 |", "| 16 | 200K | 259 | 10 |", "| 24 | 275K | 412 | 14 |", "| 40 | 470K | 662 | 23 |")
_e("apsys16.table3.dentry_mb", P, "Table 3", "dentry cache holding every entry, by files+directories",
   {80_000: 152, 200_000: 259, 275_000: 412, 470_000: 662}, "MB", "Table 3 rows", _TAB3,
   note="disk image sizes 8, 16, 24, 40 GB")
_e("apsys16.table3.kb_mb", P, "Table 3", "StepAhead knowledge base, by files+directories",
   {80_000: 5, 200_000: 10, 275_000: 14, 470_000: 23}, "MB", "Table 3 rows", _TAB3)
_e("apsys16.table3.disk_gb", P, "Table 3", "disk image size, by files+directories",
   {80_000: 8, 200_000: 16, 275_000: 24, 470_000: 40}, "GB", "Table 3 rows", _TAB3)
_e("apsys16.s4_2.ratio", P, "Table 3", "dentry cache / knowledge base memory", 25, "x (approx.)", "Section 4.2",
   "the memory requirement is significantly more ($\\sim 25x$)",
   note="the table's rows give 30.4, 25.9, 29.4, 28.8")
_e("apsys16.s4_2.cpu", P, "Section 4.2", "CPU use of the StepAhead process, worst case", 5, "%", "Section 4.2",
   "5% CPU utilization in the worst case")

# ============================================================ thesis17: ARC / DBFS thesis
P = "thesis17"
_e("thesis17.abstract.files", P, "Abstract", "directory sizes tested, in files", (50_000, 1_600_000), "files",
   "Abstract", "small (from 50 000 files) and large (up to 1 600 000 files)",
   note="11 files per job x 5K..160K jobs would be 55K..1.76M")
_e("thesis17.s2_1.files_per_job", P, "Section 2.1.3", "metadata files per job in the control directory", 11,
   "files", "Section 2.1.3", "11 files are generated for each submitted job")
_e("thesis17.s2_1.files_read", P, "Section 2.1.3", "files the scanner tries to read per job (5 succeed; .failed "
   "absent)", 6, "files", "Section 2.1.3", "collect() attempts to read 6 of them and only 5 succeeds")
_e("thesis17.s3_2.jobs", P, "Table 3.1", "job counts per control directory (doubling: 5K, 10K, 20K, 40K, 80K, "
   "160K), each on XFS, ext4, DBFS x SSD, HDD", (5_000, 160_000), "jobs", "Section 3.2.2",
   "tested with 5K, 10K, 20K, 40K, 80K and 160K jobs",
   x=[5_000, 10_000, 20_000, 40_000, 80_000, 160_000], note="36 test runs (Table 3.1)")
_e("thesis17.s3_2.typical", P, "Section 3.2.2", "jobs a cluster typically holds at a time (upper bound)", 40_000,
   "jobs", "Section 3.2.2", "Each cluster typically handles sub-40K jobs")
_e("thesis17.s3_2.files_5k", P, "Section 3.2.2", "5K-job run: files stored / files the scanner tries to read",
   {"stored": 55_000, "read": 36_000}, "files (approx.)", "Section 3.2.2",
   "roughly 55K files, and around 36K of these files attempted to be read",
   note="6 reads x 5K jobs = 30K, not 36K: the thesis's own arithmetic disagrees")
_e("thesis17.s4_2.ram", P, "Table 4.2", "server RAM (i7-3820; test HDD WD10EZRZ 1 TB, SSD Intel SSDSA2BW12 120 GB)",
   4, "GB", "Section 4.2", "server-level computer with 4 GB of RAM")
_e("thesis17.fig4_1.dbfs_hdd", P, "Figure 4.1", "ARC scan read rate, DBFS on HDD (flat across sizes)", 80,
   "jobs/s (approx.)", "Section 4.3.1", "it is still slow with a read rate of roughly 80 jobs per second",
   note="the text file has no caption for Figures 4.1/4.2, only references")
_e("thesis17.fig4_1.per_size", P, "Figure 4.1", "ARC scan read rate per size (5K..160K jobs), XFS / ext4 / DBFS on "
   "HDD", None, "jobs/s", "Section 4.3.1", "XFS outperformed ext4 and DBFS for all the given amounts of jobs",
   MISSING, note="qualitative: ext4 degrades with size; XFS and DBFS roughly flat")
_e("thesis17.fig4_2.per_size", P, "Figure 4.2", "ARC scan read rate per size, XFS / ext4 / DBFS on SSD", None,
   "jobs/s", "Section 4.3.1", "performing roughly at the same speed as XFS", MISSING,
   note="ext4 ~ XFS on SSD; 'no considerable performance gain can be observed on the DBFS'")
_e("thesis17.fig4_3.series", P, "Figure 4.3", "jobs read per second over time, 5K and 20K jobs, HDD", None,
   "jobs/s vs s", "Figure 4.3 caption", "The performance data of a test run with 5K and 20K jobs", MISSING)
_e("thesis17.fig4_4.series", P, "Figure 4.4", "jobs read per second over time, 5K and 20K jobs, SSD", None,
   "jobs/s vs s", "Figure 4.4 caption", "5K and 20K jobs stored on an SSD", MISSING)
_e("thesis17.s5_5.xfs_vs_dbfs", P, "Section 5.5", "XFS read rate / DBFS read rate, up to 160K jobs", (4, 5), "x",
   "Section 5.5", "XFS performed about 4-5 times better than DBFS",
   note="with DBFS ~80 jobs/s on HDD this implies XFS ~320-400 jobs/s (our inference, not stated)")
_e("thesis17.s5_5.files_160k", P, "Section 5.5", "files in the 160K-job directory, as the thesis states it",
   1_600_000, "files (approx.)", "Section 5.5", "up to 160 000 jobs, which is roughly 1.6 million files",
   note="11 x 160K = 1.76M (REFERENCE.md uses 1.76M)")
_e("thesis17.b2.datafile", P, "Appendix B.2.1", "DBFS data file size, SSD / HDD", {"SSD": 33, "HDD": 120}, "GB",
   "Appendix B.2.1", "set to 33 GB and in HDD it was set to 120 GB")
_e("thesis17.tableb2.cd_size", P, "Table B.2", "control directory size by jobs",
   {5_000: 221, 10_000: 421, 20_000: 822, 40_000: 1600, 80_000: 3200, 160_000: 6400}, "MB", "Table B.2",
   ("5K\t221 MB", "10K\t421 MB", "20K\t822 MB", "$1.6~\\mathrm{GB}$", "3.2 GB", "160K\t6.4 GB"))
_e("thesis17.tableb3.file_sizes", P, "Table B.3", "size of each scanned metadata file (KB taken as 1000 B)",
   {".local": 1100, ".status": 8, ".failed": 0, ".grami": 1500, ".description": 2300, ".diag": 437}, "bytes",
   "Table B.3", (".local\t1.1 KB", ".status\t8 B", ".failed\t0 B", ".grami\t$1.5~\\mathrm{KB}$",
                 ".description\t$2.3~\\mathrm{KB}$", ".diag\t437 B"),
   note=".failed is never generated (the job is never executed)")
_e("thesis17.figc.series", P, "Figures C.1, C.2", "jobs/s per minute over time, 40K, 80K, 160K jobs, HDD and SSD",
   None, "jobs/s vs min", "Appendix C", "40K, 80K and 160K jobs stored on an HDD", MISSING)


# ------------------------------------------------------------------------------------------------ helpers
def entries(paper: Optional[str] = None, figure: Optional[str] = None) -> List[Dict[str, Any]]:
    """The entries of a paper and/or figure (figure matches by prefix: "Figure 6" also gives "Figure 6 (a)")."""
    return [e for e in ENTRIES if (paper is None or e["paper"] == paper)
            and (figure is None or e["figure"] == figure or e["figure"].startswith(figure + " "))]


def get(key: str) -> Dict[str, Any]:
    """The entry with this key (KeyError if none)."""
    for e in ENTRIES:
        if e["key"] == key:
            return e
    raise KeyError(key)


def value(key: str) -> Any:
    return get(key)["value"]


def span(key: str) -> Tuple[float, float]:
    """A stated number or range as (low, high)."""
    v = value(key)
    if isinstance(v, tuple):
        return v
    if isinstance(v, (int, float)):
        return (v, v)
    raise ValueError(f"{key}: {v!r} is neither a number nor a range")


def per_system(key: str) -> Dict[str, Any]:
    """A per-system entry keyed by the bench's system names (SYSTEMS) instead of the paper's."""
    return {SYSTEMS.get(k, k): v for k, v in value(key).items()}


def rows(keys, systems=("baseline", "lazy")) -> Dict[str, Tuple[Any, ...]]:
    """Per-system entries read as a table: {"baseline": (value of keys[0], ...), "lazy": (...)} from each entry's
    "ext4-baseline" and "ext4-lazy" values (Tables 2-4 hold one entry per column)."""
    cols = [value(k) for k in keys]
    return {m: tuple(c[f"ext4-{m}"] for c in cols) for m in systems}


def missing() -> List[Dict[str, Any]]:
    """Entries whose numbers are not in the text (must come from the PDF figures)."""
    return [e for e in ENTRIES if e["kind"] == MISSING]


def verify(papers_dir: Optional[str] = PAPERS_DIR, max_words: int = 15) -> List[str]:
    """Problems found: a quote that is not an exact substring of its paper, too long, a bad kind, a duplicate key.
    With `papers_dir` None, everything but whether the quotes are in the texts (for machines without them)."""
    texts, problems, seen = {}, [], set()
    for e in ENTRIES:
        if e["key"] in seen:
            problems.append(f"{e['key']}: duplicate key")
        seen.add(e["key"])
        if e["kind"] not in KINDS:
            problems.append(f"{e['key']}: kind {e['kind']!r}")
        if (e["value"] is None) != (e["kind"] == MISSING):
            problems.append(f"{e['key']}: value None iff kind is {MISSING!r}")
        if papers_dir and e["paper"] not in texts:
            with open(papers_dir.rstrip("/") + "/" + FILES[e["paper"]], encoding="utf-8") as f:
                texts[e["paper"]] = f.read()
        q = e["source"]["quote"]
        for s in (q if isinstance(q, tuple) else (q,)):
            if papers_dir and s not in texts[e["paper"]]:
                problems.append(f"{e['key']}: quote not in {FILES[e['paper']]}: {s!r}")
            if len(s.split()) > max_words:
                problems.append(f"{e['key']}: quote has {len(s.split())} words")
    return problems


if __name__ == "__main__":
    for p in verify():
        print(p)
    for paper in FILES:
        es = entries(paper)
        print(f"{paper}: {len(es)} entries, {sum(e['kind'] == MISSING for e in es)} not in the text")
