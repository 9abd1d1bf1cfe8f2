"""What `trainhook status` and `trainhook describe` show of a cluster's jobs."""
