"""What a Slurm user on the lab's nodes can read (issue 39): every file under the stack's state
directory, read as the Pods' Slurm user, holds none of the lab's credentials (each node's hook
credential, the job key, a Slurm token, a service's kubeconfig token, a private key, slurmctld's
JWT key)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from devstack import nodetokens, services, slurm
from devstack.config import StackConfig

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

_, UID, GID = slurm.POD_USER
# Run as the Pod user with the system's Python (the venv's lies under root's home): walk the
# directory, read each file it may read, say which hold one of the secrets given on stdin.
WALK = r"""
import json, os, sys
secrets = json.load(sys.stdin)
found = []
for root, dirs, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(64 << 20)
        except OSError:
            continue
        text = data.decode("latin-1")
        found += [[path, what] for what, value in secrets.items() if value and value in text]
        if "PRIVATE KEY-----" in text:
            found.append([path, "a private key"])
print(json.dumps(found))
"""


def _secrets(cfg: StackConfig) -> dict[str, str]:
    found = {
        **{f"node {n}'s credential": nodetokens.read(cfg, n) for n in cfg.slurm_node_names()},
        "the job key": services.job_key_file(cfg).read_text().strip(),
        "slurmctld's JWT key": (cfg.slurm_dir / "jwt_hs256.key").read_bytes().decode("latin-1"),
        "a root Slurm token": slurm.rest_token(cfg),
    }
    for service in slurm.SERVICE_USERS:
        found[f"{service}'s Slurm token"] = services.slurm_token_file(cfg, service).read_text().strip()
    for kubeconfig in cfg.state_dir.glob("kubeconfig*"):
        for token in re.findall(r"token: (\S+)", kubeconfig.read_text()):
            found[f"the token in {kubeconfig.name}"] = token
    return found


def test_no_file_under_the_state_directory_gives_a_pod_user_a_credential(stack_cfg: StackConfig) -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 to run as the Pods' user")
    out = subprocess.run(
        [python, "-c", WALK, str(stack_cfg.state_dir)],
        input=json.dumps(_secrets(stack_cfg)),
        user=UID,
        group=GID,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    readable = json.loads(out.stdout)
    assert readable == [], readable
