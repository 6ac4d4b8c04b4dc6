#!/bin/bash
cd /var/tmp/ddr
for i in 1 2 3 4 5 6; do ./w.sh kernel; ./w.sh /work/main/target/release/ext4lazy; done
