"""The per-pod membership sidecar: join, leave, clean, heartbeat."""
