"""What every tier shares: the etcd lab (real members under the stand-in kubelet), the operator
process, certificates, bounded waits and the scenarios several tiers run."""
