"""The syncer: mirror of Slurm state, node locks (taint + annotation), node drains."""
