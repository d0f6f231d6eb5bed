"""The local stack: a real kube-apiserver + etcd + kwok and a real Slurm, all on 127.0.0.1.

`make up`, `make down` and the integration tests' session fixture all go through `stack.py`.
"""
