"""The kopf operator for EtcdCluster and XlineCluster."""
