//! The request trace: one CSV line per completed request.
//!
//! Columns: `arrival_s,start_s,end_s,op,offset,len,class,latency_s` with model
//! seconds, byte offsets and lengths; `class` is journal, metadata or data.

use crate::model::Req;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

pub const TRACE_HEADER: &str = "arrival_s,start_s,end_s,op,offset,len,class,latency_s";

pub struct TraceSink {
    out: BufWriter<File>,
    failed: bool,
}

impl TraceSink {
    pub fn create(path: &Path) -> io::Result<Self> {
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot create trace {}: {e}", path.display())))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        writeln!(out, "{TRACE_HEADER}")?;
        Ok(TraceSink { out, failed: false })
    }

    pub fn record(&mut self, req: &Req, arrival: f64, start: f64, end: f64) {
        if self.failed {
            return;
        }
        let r = writeln!(
            self.out,
            "{:.6},{:.6},{:.6},{},{},{},{},{:.6}",
            arrival,
            start,
            end,
            req.op.name(),
            req.offset,
            req.len,
            req.class.name(),
            end - arrival
        );
        if r.is_err() {
            // a full trace disk must not fail the I/O itself
            self.failed = true;
        }
    }

    pub fn flush(&mut self) {
        if !self.failed && self.out.flush().is_err() {
            self.failed = true;
        }
    }
}
