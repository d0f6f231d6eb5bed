"""Talking to Slurm: slurmrestd (v0.0.38 and v0.0.40+), JWT tokens, hostlists."""
