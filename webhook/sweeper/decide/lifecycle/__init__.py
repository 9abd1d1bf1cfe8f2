"""The job's lifecycle rules, one module each: a new rule gets a module of its own."""
