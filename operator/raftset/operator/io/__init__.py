"""The operator's clients to the outside: the Kubernetes API (one protocol, one client) and the order its
calls go in."""
