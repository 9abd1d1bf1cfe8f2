"""One job as the sweeper reads it: plain data from the cluster's objects, its pods, and what is
recorded on its workloads."""
