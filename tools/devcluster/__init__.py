"""A local Kubernetes control plane (apiserver, controllers, OpenKruise, kwok) for tests and `make run`.

    from tools.devcluster import start
    with start(full=True) as plane:   # builds missing binaries first, tears down on exit
        plane.kubectl("get", "nodes")
"""

from tools.devcluster.plane import Plane, start

__all__ = ["Plane", "start"]
