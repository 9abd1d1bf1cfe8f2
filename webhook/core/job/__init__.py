"""What a job's labels and annotations mean: its settings, failure rules, gang and placement, the
workload view, who owns it, and the features its pods carry (progress, restart in place)."""
