"""GPUs by device: what a Pod's DRA ResourceClaims ask Slurm for, and the devices Slurm chose.

Pure functions over the API objects as plain dicts (what the informers hold):
- gres: Slurm's GRES strings (a job's `gres_detail`, a node's `gres` and `gres_used`) as values.
- claims: a Pod's ResourceClaims and templates -> the GPU count and GRES type its job asks for.
- slices: a node's ResourceSlices against its Slurm GRES -> the device of each Slurm index.
- allocation: the Slurm indices a job got on a node -> the claim's `status.allocation`.
- shape: reading objects whose fields may be of the wrong kind (absent, never a crash).
"""
