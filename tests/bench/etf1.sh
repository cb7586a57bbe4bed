#!/usr/bin/env bash
# Builds etf1/kafka-message-scheduler's `kafka` binary for tests/bench/delayed.py, outside this repository:
#   bash tests/bench/etf1.sh SRC OUT    (SRC: a clone of github.com/etf1/kafka-message-scheduler; OUT: a dir)
# Its Go modules come from the Go module proxy (confluent-kafka-go bundles librdkafka: cgo, gcc). Nothing of
# its code is kept here; run the bench with --etf1 OUT/kafka.
set -euo pipefail
src=${1:?usage: etf1.sh SRC OUT}
out=${2:?usage: etf1.sh SRC OUT}
mkdir -p "$out"
cd "$src"
go build -o "$out/kafka" ./cmd/kafka
echo "built $out/kafka from $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo "$src")"
