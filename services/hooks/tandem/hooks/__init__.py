"""The hooks gateway: authenticated HTTP for Slurm's prolog/epilog and the placeholder script,
turned into gRPC calls to the syncer."""
