"""The sidecar's I/O: the etcd client and its membership lock, object storage, snapshots (the shells call these; pure/ never does)."""
