//! An in-memory block device that records every request, for the writer
//! tests: where writes go (by class), and the write/flush stream so a crash
//! can be simulated by replaying a prefix of it.
#![allow(dead_code)]

use std::io;
use std::sync::Mutex;

use blockdev::{check_request, BlockDevice, IoClass};

#[derive(Clone, Debug)]
pub enum Op {
    Write {
        offset: u64,
        data: Vec<u8>,
        class: IoClass,
    },
    Flush,
}

pub struct MemDevice {
    pub bytes: Mutex<Vec<u8>>,
    pub ops: Mutex<Vec<Op>>,
}

impl MemDevice {
    pub fn new(size: usize) -> MemDevice {
        MemDevice {
            bytes: Mutex::new(vec![0; size]),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// A device holding `bytes`, with no recorded history.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice {
            bytes: Mutex::new(bytes),
            ops: Mutex::new(Vec::new()),
        }
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }

    pub fn take_ops(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap())
    }

    pub fn block(&self, bs: u32, b: u64) -> Vec<u8> {
        let bs = bs as usize;
        self.bytes.lock().unwrap()[b as usize * bs..(b as usize + 1) * bs].to_vec()
    }

    pub fn put_block(&self, bs: u32, b: u64, data: &[u8]) {
        let bs = bs as usize;
        self.bytes.lock().unwrap()[b as usize * bs..(b as usize + 1) * bs].copy_from_slice(data);
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], _class: IoClass) -> io::Result<()> {
        check_request(self.size(), 512, offset, buf.len())?;
        let b = self.bytes.lock().unwrap();
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        check_request(self.size(), 512, offset, buf.len())?;
        self.bytes.lock().unwrap()[offset as usize..offset as usize + buf.len()]
            .copy_from_slice(buf);
        self.ops.lock().unwrap().push(Op::Write {
            offset,
            data: buf.to_vec(),
            class,
        });
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.ops.lock().unwrap().push(Op::Flush);
        Ok(())
    }
}

/// Apply `ops` to a copy of `base`.
pub fn apply(base: &[u8], ops: &[Op]) -> Vec<u8> {
    let mut out = base.to_vec();
    for op in ops {
        if let Op::Write { offset, data, .. } = op {
            out[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
    }
    out
}
