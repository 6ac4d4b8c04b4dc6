#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ext4lazy_fuzz::volume::journal_target(data));
