"""A local Kubernetes control plane (apiserver, controllers, OpenKruise, kwok) for tests and `make run`."""
