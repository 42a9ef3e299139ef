"""raftset: Raft key-value clusters (etcd, Xline) on Kubernetes with leader-aware scale-in."""
