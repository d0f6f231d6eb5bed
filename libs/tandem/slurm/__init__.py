"""Talking to Slurm: slurmrestd (data-parser v0.0.40 to v0.0.45), JWT tokens, hostlists."""
