"""The live execution plane: the scheduler as a Ray service driving real jobs."""
