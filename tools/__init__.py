"""Development and test tooling: the local control plane, the stand-in kubelet, the CRD generator.

Never shipped: the image installs only the `raftset` namespace (core, operator, sidecar).
"""
