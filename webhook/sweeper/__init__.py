"""The sweeper: reconciles every labelled job (Service, PodGroup, SSH Secret, topology,
completion, failure, cleanup), deciding purely and acting through a thin executor."""
