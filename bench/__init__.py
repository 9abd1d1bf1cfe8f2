"""`make bench`: how fast the admission path is, against what Python on this stack can do."""
