"""The sidecar's shells: one class per lifecycle step, given its ports by app.py; none imports another."""
