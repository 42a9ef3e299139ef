// Wrapper module: pins Prometheus (for promtool, which checks and unit-tests the alert rules).
// promtool is built inside a copy of the prometheus module itself (its own go.mod and go.sum
// pin its graph): see tools/devcluster/build.py PROMTOOL.
module raftset.dev/devcluster/promtool

go 1.26.7

require github.com/prometheus/prometheus v0.316.0
