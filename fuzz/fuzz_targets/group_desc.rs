#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ext4lazy_fuzz::parsers::group_desc(data));
