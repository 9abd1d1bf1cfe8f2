"""A job's shape: its roles and host names, its pods, its peers lists, what its pods ask for."""
