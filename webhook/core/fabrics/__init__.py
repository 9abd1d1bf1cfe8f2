"""`trainhook.io/fabric`: the device resources, env, sidecars and host mounts a fabric needs."""
