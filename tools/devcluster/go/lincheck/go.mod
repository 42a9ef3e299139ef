// lincheck: the robustness campaign's linearizability checker (porcupine with a
// register-per-key model of the etcd KV API; see docs/robustness.md, "The checker").
module raftset.dev/devcluster/lincheck

go 1.22

require github.com/anishathalye/porcupine v1.3.1
