"""The scheduler: Pods with our schedulerName become placeholder Slurm jobs, then are bound."""
