"""Admission: a request in; the workload's stamp or the pod's env, labels and volumes out, as a
patch."""
