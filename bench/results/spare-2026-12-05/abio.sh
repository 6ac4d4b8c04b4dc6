#!/bin/bash
# abio.sh ROUNDS N: H vs P daemon CPU on pm.py N transactions
for i in $(seq $1); do
 echo "H $(N=$2 BIN=/var/tmp/pmx/binH ./io.sh | sed 's/.*transactions_s/tx/')"
 echo "P $(N=$2 BIN=/var/tmp/pmx/binP ./io.sh | sed 's/.*transactions_s/tx/')"
done
