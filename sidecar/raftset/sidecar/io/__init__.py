"""The sidecar's I/O: the etcd client and its lock, the Kubernetes API, object storage, snapshots, the data
volume's files (the shells call these; pure/ never does)."""
