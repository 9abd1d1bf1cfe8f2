"""The pure core: contract, settings, topology, frameworks, workload reading and mutation.

Plain functions over plain data: no I/O, no Flask, no Kubernetes client.
"""
