"""Issue 18: the chart's side of the trust boundary, checked on `helm template` output (no cluster).

Mutual TLS: every Deployment passes --grpc-ca-file/--grpc-cert-file/--grpc-key-file and mounts
its own Secret; no mode lets a CN name a caller. By default a hook Job (tandem-pki) makes the CA and
certificates in the cluster, before the release's objects and with RBAC made before it that reaches
only those Secrets; its plan names each identity, the Secret its service mounts and the names its
clients dial; after `helm uninstall` another Job removes them. No certificate or key is in the
manifest. cert-manager and existing Secrets replace the Job. The job key (placeholders' own tokens)
reaches the scheduler and the gateway only, and the slurmd side is told to keep the hooks token
root-only. NetworkPolicies select the Pods the Deployments make and admit only Tandem's own callers.
A render with the job key supplied is the same twice (GitOps). Needs the lab's helm (`make tools`);
skipped without.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from base64 import b64decode
from typing import Any

import pytest
import yaml

from devstack.config import REPO_ROOT, default_state_dir
from tandem import keys
from tandem.dra.allocation import FINALIZER
from tandem.dra.extended import CLAIM_SUFFIX, claim_manifest

HELM = default_state_dir() / "bin" / "helm"
CHART = REPO_ROOT / "helm" / "tandem"
RELEASE, NS = "t", "tandem"
FULLNAME = "t-tandem"
SERVICES = ("scheduler", "syncer", "hooks")
IDENTITIES = (*SERVICES, "operator")
TLS_DIR = "/etc/tandem/tls"
EXISTING = tuple(f"global.tls.existingSecrets.{c}=my-{c}-tls" for c in SERVICES)
JOB_KEY_FILE = "/etc/tandem/job-key/job-key"
JOB_KEY_SECRET = f"{FULLNAME}-job-key"
ALL_SUPPLIED = (*EXISTING, "global.jobKey.existingSecret=my-job-key")

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="no helm: `make tools` builds it")

Doc = dict[str, Any]


def _helm_template(*sets: str, release: str = RELEASE) -> subprocess.CompletedProcess[str]:
    args = [str(HELM), "template", release, str(CHART), "-n", NS]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True)


def render(*sets: str) -> list[Doc]:
    res = _helm_template(*sets)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def of_kind(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def deployment(docs: list[Doc], component: str) -> Doc:
    return of_kind(docs, "Deployment")[f"{FULLNAME}-{component}"]


def container(dep: Doc) -> Doc:
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert isinstance(c, dict)
    return c


def tls_secrets(docs: list[Doc]) -> dict[str, Doc]:
    return {n: d for n, d in of_kind(docs, "Secret").items() if d.get("type") == "kubernetes.io/tls"}


def decoded(secret: Doc) -> dict[str, str]:
    return {k: b64decode(v).decode() for k, v in secret["data"].items()}


def mounted_files(dep: Doc) -> dict[str, tuple[str, str]]:
    """Each file the container sees from a Secret: its path -> (Secret name, key)."""
    c = container(dep)
    files = {}
    for vol in dep["spec"]["template"]["spec"]["volumes"]:
        mounts = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == vol["name"]]
        sources = [vol["secret"] | {"name": vol["secret"]["secretName"]}] if "secret" in vol else []
        sources += [s["secret"] for s in vol.get("projected", {}).get("sources", []) if "secret" in s]
        for src in sources:
            for item in src["items"]:
                for mount in mounts:
                    files[f"{mount}/{item['path']}"] = (src["name"], item["key"])
    return files


def pod_annotations(dep: Doc) -> dict[str, str]:
    annotations: dict[str, str] = dep["spec"]["template"]["metadata"].get("annotations", {})
    return annotations


def service_names(component: str) -> set[str]:
    svc = f"{FULLNAME}-{component}"
    return {svc, f"{svc}.{NS}", f"{svc}.{NS}.svc", f"{svc}.{NS}.svc.cluster.local"}


PKI = f"{FULLNAME}-pki"
PKI_REMOVE = f"{FULLNAME}-pki-remove"
CA_SECRET = f"{FULLNAME}-grpc-ca"


def pki_objects(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    """Everything of the PKI hook: (kind, name) -> object, found by name or by the command it runs."""
    return {
        (d["kind"], d["metadata"]["name"]): d
        for d in docs
        if d["metadata"]["name"].startswith(PKI) or "tandem-pki" in json.dumps(d.get("spec", {}))
    }


def hook(doc: Doc) -> tuple[set[str], int, set[str]]:
    """A hook object's events, weight and delete policies."""
    annotations = doc["metadata"].get("annotations", {})
    return (
        set(annotations.get("helm.sh/hook", "").split(",")) - {""},
        int(annotations.get("helm.sh/hook-weight", "0")),
        set(annotations.get("helm.sh/hook-delete-policy", "").split(",")) - {""},
    )


def job_args(docs: list[Doc], name: str) -> list[str]:
    (c,) = of_kind(docs, "Job")[name]["spec"]["template"]["spec"]["containers"]
    args: list[str] = c["args"]
    return args


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def plan(docs: list[Doc], job: str = PKI) -> dict[str, Doc]:
    """The Job's --plan, by identity."""
    items = json.loads(flag(job_args(docs, job), "--plan"))
    by_identity = {i["identity"]: i for i in items}
    assert len(by_identity) == len(items), items
    return by_identity


@pytest.fixture(scope="module")
def default_docs() -> list[Doc]:
    return render()


# --- mutual TLS: what each Deployment is given --------------------------------------------------


@pytest.mark.parametrize("component", SERVICES)
def test_each_deployment_passes_the_three_tls_flags_and_mounts_its_own_secret(
    default_docs: list[Doc], component: str
) -> None:
    dep = deployment(default_docs, component)
    c = container(dep)
    for flag, file in (("ca", "ca.crt"), ("cert", "tls.crt"), ("key", "tls.key")):
        assert f"--grpc-{flag}-file={TLS_DIR}/{file}" in c["args"], (component, c["args"])
    secret = f"{FULLNAME}-{component}-tls"
    files = mounted_files(dep)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert files[f"{TLS_DIR}/{key}"] == (secret, key), (component, files)


def test_no_certificate_or_key_is_in_the_manifest(default_docs: list[Doc]) -> None:
    """The default mode's CA and certificates are made in the cluster by the hook Job: a render holds
    neither a TLS Secret nor anything that looks like a certificate or a private key."""
    assert tls_secrets(default_docs) == {}
    names = set(of_kind(default_docs, "Secret"))
    assert not {f"{FULLNAME}-grpc-ca", *(f"{FULLNAME}-{c}-tls" for c in IDENTITIES)} & names
    for doc in default_docs:
        text = json.dumps(doc)
        assert "BEGIN CERTIFICATE" not in text and "PRIVATE KEY" not in text, doc["metadata"]["name"]
    for name, secret in of_kind(default_docs, "Secret").items():
        assert not any("BEGIN" in v or "PRIVATE" in v for v in decoded(secret).values()), name


def test_clients_dial_a_name_the_server_certificate_carries(default_docs: list[Doc]) -> None:
    services = of_kind(default_docs, "Service")
    for component in ("scheduler", "hooks"):
        (address,) = [
            a
            for a in container(deployment(default_docs, component))["args"]
            if a.startswith("--syncer-address=")
        ]
        host, port = address.removeprefix("--syncer-address=").rsplit(":", 1)
        assert host in service_names("syncer") and host in services
        assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}


@pytest.mark.parametrize("sets", [(), ("global.tls.certManager.enabled=true",), EXISTING])
def test_no_pod_carries_a_checksum_of_a_certificate(sets: tuple[str, ...]) -> None:
    """The services re-read rotated certificate files: a renewal restarts nothing, and no render
    sees the certificates to hash anyway."""
    docs = render(*sets)
    for component in SERVICES:
        assert "checksum/grpc-tls" not in pod_annotations(deployment(docs, component)), component


def test_no_shared_hooks_token_is_made_or_mounted(default_docs: list[Doc]) -> None:
    """Issue 39: each Slurm node presents its own slurmd Pod's token; a shared secret that speaks
    for every node is neither written nor passed to the gateway."""
    assert not [n for n in of_kind(default_docs, "Secret") if "hooks-token" in n]
    args = deployment(default_docs, "hooks")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--hooks-token")]


def test_each_service_mounts_only_its_own_slurm_token_and_acts_as_its_own_user(
    default_docs: list[Doc],
) -> None:
    for component, user in (("scheduler", "slurm"), ("syncer", "tandem")):
        spec = deployment(default_docs, component)["spec"]["template"]["spec"]
        args = spec["containers"][0]["args"]
        assert f"--slurm-user={user}" in args
        assert "--slurm-token-file=/etc/tandem/slurm-token/token" in args
        assert not any("jwt-key" in a for a in args)
        (volume,) = [v for v in spec["volumes"] if v["name"] == "slurm-token"]
        assert volume["secret"]["secretName"] == "tandem-slurm-tokens"
        # Only its own key; mounted whole (no subPath), so a renewed Secret reaches the Pod.
        assert volume["secret"]["items"] == [{"key": component, "path": "token"}]
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "slurm-token"]
        assert "subPath" not in mount
    assert "slurm-token" not in str(deployment(default_docs, "hooks")["spec"]["template"]["spec"])
    # No Secret of the chart's holds a Slurm key or token.
    assert not [n for n in of_kind(default_docs, "Secret") if "slurm" in n]


# --- cert-manager and existing Secrets -------------------------------------------------------


def test_cert_manager_makes_certificates_and_no_tls_secrets() -> None:
    docs = render("global.tls.certManager.enabled=true")
    assert tls_secrets(docs) == {}
    issuers = of_kind(docs, "Issuer")
    assert issuers[f"{FULLNAME}-selfsigned"]["spec"] == {"selfSigned": {}}
    assert issuers[f"{FULLNAME}-grpc-ca"]["spec"] == {"ca": {"secretName": f"{FULLNAME}-grpc-ca"}}
    certs = of_kind(docs, "Certificate")
    assert certs[f"{FULLNAME}-grpc-ca"]["spec"]["isCA"] is True
    for c in IDENTITIES:
        spec = certs[f"{FULLNAME}-{c}-tls"]["spec"]
        assert spec["secretName"] == f"{FULLNAME}-{c}-tls"
        assert spec["commonName"] == f"tandem-{c}"
        assert spec["issuerRef"]["name"] == f"{FULLNAME}-grpc-ca"
        assert "client auth" in spec["usages"]
        if c in ("scheduler", "syncer"):
            assert set(spec["dnsNames"]) == service_names(c)
            assert "server auth" in spec["usages"]
    assert pki_objects(docs) == {}


def test_a_cluster_issuer_is_refused_without_the_acknowledgement() -> None:
    """Issue 39: a ClusterIssuer signs for every namespace; the chart says why it refuses one."""
    res = _helm_template(
        "global.tls.certManager.enabled=true",
        "global.tls.certManager.issuerRef.name=corp-ca",
        "global.tls.certManager.issuerRef.kind=ClusterIssuer",
    )
    assert res.returncode != 0
    assert "acknowledgeSharedIssuer" in res.stderr and "spiffe://tandem/tandem-hooks" in res.stderr


def test_every_certificate_names_its_identity_in_a_uri_san_and_no_mode_trusts_the_cn() -> None:
    """Issue 39: a caller is the URI SAN of its certificate in every mode; no service is told to
    take a CN instead (the flag is gone from the services)."""
    docs = render("global.tls.certManager.enabled=true")
    for name, cert in of_kind(docs, "Certificate").items():
        if cert["spec"].get("isCA"):
            continue
        component = name.removeprefix(f"{FULLNAME}-").removesuffix("-tls")
        assert cert["spec"]["uris"] == [f"spiffe://tandem/tandem-{component}"], name
    for mode_docs in (docs, render(*ALL_SUPPLIED), render()):
        for component in SERVICES:
            args = container(deployment(mode_docs, component))["args"]
            assert not [a for a in args if "trust-common-name" in a], (component, args)
        for job in of_kind(mode_docs, "Job").values():
            assert "trust-common-name" not in json.dumps(job), job["metadata"]["name"]


def test_cert_manager_with_an_issuer_of_your_own_makes_no_ca() -> None:
    docs = render(
        "global.tls.certManager.enabled=true",
        "global.tls.certManager.issuerRef.name=corp-ca",
        "global.tls.certManager.issuerRef.kind=ClusterIssuer",
        "global.tls.certManager.acknowledgeSharedIssuer=true",
    )
    assert of_kind(docs, "Issuer") == {}
    certs = of_kind(docs, "Certificate")
    assert set(certs) == {f"{FULLNAME}-{c}-tls" for c in IDENTITIES}
    for cert in certs.values():
        assert cert["spec"]["issuerRef"] == {
            "name": "corp-ca",
            "kind": "ClusterIssuer",
            "group": "cert-manager.io",
        }


def test_existing_secrets_are_mounted_and_nothing_is_generated() -> None:
    docs = render(*ALL_SUPPLIED)
    assert [n for n, d in of_kind(docs, "Secret").items()] == []
    assert of_kind(docs, "Certificate") == {}
    for component in SERVICES:
        dep = deployment(docs, component)
        names = [
            v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v
        ]
        names += [
            s["secret"]["name"]
            for v in dep["spec"]["template"]["spec"]["volumes"]
            for s in v.get("projected", {}).get("sources", [])
        ]
        assert f"my-{component}-tls" in names
        assert not any(k.startswith("checksum/") for k in dep["spec"]["template"]["metadata"]["annotations"])
    assert pki_objects(docs) == {}


def test_one_existing_secret_needs_the_others() -> None:
    res = _helm_template("global.tls.existingSecrets.syncer=mine")
    assert res.returncode != 0
    assert "global.tls.existingSecrets.scheduler is required" in res.stderr


def test_cert_manager_and_existing_secrets_do_not_mix() -> None:
    res = _helm_template("global.tls.certManager.enabled=true", *EXISTING)
    assert res.returncode != 0 and "not both" in res.stderr


def test_with_every_secret_supplied_two_renders_are_the_same() -> None:
    one, two = _helm_template(*ALL_SUPPLIED), _helm_template(*ALL_SUPPLIED)
    assert one.returncode == 0, one.stderr
    assert one.stdout == two.stdout


# --- the default mode: the PKI hook Job ----------------------------------------------------------


def test_the_pki_hook_makes_its_rbac_before_its_job_for_every_event_it_runs_in(
    default_docs: list[Doc],
) -> None:
    """Helm runs a hook event's objects by weight and waits for a Job: the ServiceAccount, Role and
    RoleBinding must exist before the Job that uses them, at install, upgrade and after uninstall."""
    objects = pki_objects(default_docs)
    policy = f"{NS}-{PKI}"  # its Secret writes held to its names (issue 50)
    rbac = {
        k: objects.pop(k)
        for k in [
            ("ServiceAccount", PKI),
            ("Role", PKI),
            ("RoleBinding", PKI),
            ("ValidatingAdmissionPolicy", policy),
            ("ValidatingAdmissionPolicyBinding", policy),
        ]
    }
    jobs = {k: objects.pop(k) for k in [("Job", PKI), ("Job", PKI_REMOVE)]}
    assert objects == {}  # nothing else: no ClusterRole, no binding elsewhere
    assert hook(jobs["Job", PKI])[0] == {"pre-install", "pre-upgrade"}
    assert hook(jobs["Job", PKI_REMOVE])[0] == {"post-delete"}
    for job in jobs.values():
        events, weight, policies = hook(job)
        assert {"before-hook-creation", "hook-succeeded"} <= policies
        assert job["spec"]["template"]["spec"]["serviceAccountName"] == PKI
        for key, obj in rbac.items():
            obj_events, obj_weight, obj_policies = hook(obj)
            assert events <= obj_events, key  # there whenever the Job runs
            assert obj_weight < weight, key  # and made before it
            # Gone once the hooks succeeded; made afresh next time.
            assert {"before-hook-creation", "hook-succeeded"} <= obj_policies, key
    binding = rbac["RoleBinding", PKI]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": PKI}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": PKI, "namespace": NS}]
    namespaced = [d for (kind, _), d in rbac.items() if not kind.startswith("ValidatingAdmissionPolicy")]
    assert {d["metadata"]["namespace"] for d in [*namespaced, *jobs.values()]} == {NS}


@pytest.mark.parametrize(
    "disabled", [(), ("scheduler",), ("hooks",), ("syncer",), ("scheduler", "syncer", "hooks")]
)
def test_the_pki_plan_is_the_operator_and_each_deployed_service_with_the_secret_it_mounts(
    disabled: tuple[str, ...],
) -> None:
    docs = render(*(f"{c}.enabled=false" for c in disabled))
    deployed = [c for c in SERVICES if c not in disabled]
    items = plan(docs)
    assert set(items) == {f"tandem-{c}" for c in ("operator", *deployed)}
    assert items["tandem-operator"]["secret"] == f"{FULLNAME}-operator-tls"
    for c in deployed:
        # The Secret the Job writes is the one the Deployment reads its certificate from.
        files = mounted_files(deployment(docs, c))
        assert {files[f"{TLS_DIR}/{k}"] for k in ("ca.crt", "tls.crt", "tls.key")} == {
            (items[f"tandem-{c}"]["secret"], k) for k in ("ca.crt", "tls.crt", "tls.key")
        }
    assert set(of_kind(docs, "Deployment")) == {f"{FULLNAME}-{c}" for c in deployed}


def test_the_servers_certificates_name_every_address_their_clients_dial(default_docs: list[Doc]) -> None:
    items = plan(default_docs)
    services = of_kind(default_docs, "Service")
    for c in ("scheduler", "syncer"):
        names = items[f"tandem-{c}"]["dnsNames"]
        assert set(names) == service_names(c) and len(names) == len(set(names)), names
        assert f"{FULLNAME}-{c}" in services
    # Clients only: no DNS name, so no server certificate.
    assert items["tandem-hooks"]["dnsNames"] == [] and items["tandem-operator"]["dnsNames"] == []
    for component in ("scheduler", "hooks"):
        address = flag(container(deployment(default_docs, component))["args"], "--syncer-address")
        assert address.rsplit(":", 1)[0] in items["tandem-syncer"]["dnsNames"], component


def test_the_servers_certificates_follow_the_cluster_domain_and_extra_names() -> None:
    docs = render("global.tls.clusterDomain=corp.example", "global.tls.extraDnsNames={tandem.corp.example}")
    items = plan(docs)
    for c in ("scheduler", "syncer"):
        svc = f"{FULLNAME}-{c}"
        assert set(items[f"tandem-{c}"]["dnsNames"]) == {
            svc,
            f"{svc}.{NS}",
            f"{svc}.{NS}.svc",
            f"{svc}.{NS}.svc.corp.example",
            "tandem.corp.example",
        }
    assert items["tandem-hooks"]["dnsNames"] == []
    # The same names cert-manager's Certificates would ask for.
    cm = of_kind(render("global.tls.certManager.enabled=true", "global.tls.clusterDomain=corp.example",
                        "global.tls.extraDnsNames={tandem.corp.example}"), "Certificate")  # fmt: skip
    for c in ("scheduler", "syncer"):
        assert cm[f"{FULLNAME}-{c}-tls"]["spec"]["dnsNames"] == items[f"tandem-{c}"]["dnsNames"]


@pytest.mark.parametrize("disabled", [(), ("hooks",), ("scheduler", "syncer")])
def test_the_pki_role_reaches_only_the_ca_and_the_planned_secrets(disabled: tuple[str, ...]) -> None:
    docs = render(*(f"{c}.enabled=false" for c in disabled))
    rules = of_kind(docs, "Role")[PKI]["rules"]
    want_names = {CA_SECRET, *(i["secret"] for i in plan(docs).values())}
    assert len(want_names) == 2 + len(SERVICES) - len(disabled)
    granted: dict[str, set[str] | None] = {}
    for rule in rules:
        assert rule["apiGroups"] == [""] and rule["resources"] == ["secrets"], rule
        for verb in rule["verbs"]:
            names = set(rule["resourceNames"]) if "resourceNames" in rule else None
            assert names is not None or verb not in granted, verb
            granted[verb] = None if names is None else {*(granted.get(verb) or set()), *names}
    # create cannot be limited by name (the Secret does not exist yet; the hook's admission policy
    # holds it to these names); the rest is by name only, and Helm's first record of the release
    # may be read (a CA older than it was planted), never written.
    record = f"sh.helm.release.v1.{RELEASE}.v1"
    assert granted == {
        "create": None,
        "get": {*want_names, record},
        "update": want_names,
        "delete": want_names,
    }
    assert of_kind(docs, "ClusterRole").get(PKI) is None
    policy = of_kind(docs, "ValidatingAdmissionPolicy")[f"{NS}-{PKI}"]
    (check,) = policy["spec"]["validations"]
    assert all(f'"{name}"' in check["expression"] for name in want_names)
    assert '"kubernetes.io/tls", "Opaque"' in check["expression"]


def test_the_pki_job_runs_tandem_pki_with_the_release_and_the_generated_values() -> None:
    docs = render(
        "global.tls.generated.caValidityDays=400",
        "global.tls.generated.certValidityDays=90",
        "global.tls.generated.renewDays=10",
        "global.logLevel=debug",
    )
    for job in (PKI, PKI_REMOVE):
        (c,) = of_kind(docs, "Job")[job]["spec"]["template"]["spec"]["containers"]
        assert c["command"] == ["tandem-pki"]
        args = c["args"]
        assert flag(args, "--namespace") == NS and flag(args, "--instance") == RELEASE
        assert flag(args, "--ca-secret") == CA_SECRET
        assert (flag(args, "--ca-validity-days"), flag(args, "--cert-validity-days")) == ("400", "90")
        assert flag(args, "--renew-days") == "10" and flag(args, "--log-level") == "debug"
    assert plan(docs, PKI_REMOVE) == plan(docs, PKI)  # removes exactly what it made


def test_the_pki_jobs_arguments_are_what_tandem_pki_takes(default_docs: list[Doc]) -> None:
    """The chart's flags and plan, read by the command's own settings and plan parser."""
    from tandem import pkijob, settings

    for job, remove in ((PKI, False), (PKI_REMOVE, True)):
        cfg = settings.load(pkijob.PkiSettings, job_args(default_docs, job), environ={})
        assert (cfg.namespace, cfg.instance, cfg.ca_secret, cfg.remove) == (NS, RELEASE, CA_SECRET, remove)
        assert (cfg.ca_validity_days, cfg.cert_validity_days, cfg.renew_days) == (3650, 365, 30)
        planned = {
            p.identity.name: (p.secret, set(p.identity.dns_names)) for p in pkijob.parse_plan(cfg.plan)
        }
        assert planned == {
            f"tandem-{c}": (
                f"{FULLNAME}-{c}-tls",
                service_names(c) if c in ("scheduler", "syncer") else set(),
            )
            for c in IDENTITIES
        }


def test_only_the_remove_job_removes_and_only_after_uninstall(default_docs: list[Doc]) -> None:
    assert "--remove=true" in job_args(default_docs, PKI_REMOVE)
    assert hook(of_kind(default_docs, "Job")[PKI_REMOVE])[0] == {"post-delete"}
    assert not [a for a in job_args(default_docs, PKI) if a.startswith("--remove")]


def test_the_pki_job_runs_locked_down_and_where_it_is_told() -> None:
    docs = render(
        "global.tls.generated.job.nodeSelector.pool=system",
        "global.tls.generated.job.tolerations[0].key=dedicated",
        "global.tls.generated.job.tolerations[0].operator=Exists",
        "global.imagePullSecrets[0].name=regcred",
    )
    for name in (PKI, PKI_REMOVE):
        job = of_kind(docs, "Job")[name]
        spec = job["spec"]["template"]["spec"]
        assert spec["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 2
        assert job["spec"]["activeDeadlineSeconds"] == 300
        assert spec["securityContext"]["runAsNonRoot"] is True
        (c,) = spec["containers"]
        assert c["image"] == container(deployment(docs, "syncer"))["image"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
        # The only writable place, and no Secret mounted: it reads and writes through the API.
        assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
        assert spec["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}]
        assert spec["nodeSelector"] == {"pool": "system"}
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]


@pytest.mark.parametrize(
    "sets",
    [
        ("global.tls.certManager.enabled=true",),
        (
            "global.tls.certManager.enabled=true",
            "global.tls.certManager.issuerRef.name=corp-ca",
            "global.tls.certManager.issuerRef.kind=Issuer",
        ),
        EXISTING,
    ],
)
def test_cert_manager_and_existing_secrets_run_no_pki_hook(sets: tuple[str, ...]) -> None:
    docs = render(*sets)
    assert pki_objects(docs) == {}
    assert {n for n in of_kind(docs, "Job")} == {f"{FULLNAME}-uninstall"}


def test_with_the_job_key_supplied_two_default_renders_are_the_same() -> None:
    """GitOps: the default mode's certificates are the hook Job's, not the render's."""
    one, two = (_helm_template("global.jobKey.existingSecret=my-job-key") for _ in range(2))
    assert one.returncode == 0, one.stderr
    assert one.stdout == two.stdout
    assert PKI in one.stdout


# --- the job key: placeholders' own tokens ---------------------------------------------------


@pytest.mark.parametrize("component", ("scheduler", "syncer"))
def test_the_scheduler_and_the_syncer_read_the_generated_job_key(
    default_docs: list[Doc], component: str
) -> None:
    dep = deployment(default_docs, component)
    flags = [a for a in container(dep)["args"] if a.startswith("--job-key-file=")]
    assert flags == [f"--job-key-file={JOB_KEY_FILE}"], component
    assert mounted_files(dep)[JOB_KEY_FILE] == (JOB_KEY_SECRET, "job-key"), component
    mounts = {m["mountPath"]: m for m in container(dep)["volumeMounts"]}
    (mount,) = [m for path, m in mounts.items() if JOB_KEY_FILE.startswith(f"{path}/")]
    assert mount["readOnly"] is True
    key = decoded(of_kind(default_docs, "Secret")[JOB_KEY_SECRET])["job-key"]
    assert len(key.encode()) >= 16  # what the services require


def test_the_job_key_reaches_nothing_else(default_docs: list[Doc]) -> None:
    """Issue 39: the syncer checks a placeholder's token (the gateway's certificate alone must not
    forge one); issue 50: the gateway holds no key either (it screens the form), so whoever takes it
    cannot mint one. Nothing else gets the key: no uninstall Job, nothing in the slurmd namespace."""
    for doc in default_docs:
        if doc["kind"] in ("Deployment", "Job", "DaemonSet", "StatefulSet") and doc["metadata"][
            "name"
        ] not in {f"{FULLNAME}-{c}" for c in ("scheduler", "syncer")}:
            assert JOB_KEY_SECRET not in json.dumps(doc), doc["metadata"]["name"]
    assert of_kind(default_docs, "Secret")[JOB_KEY_SECRET]["metadata"]["namespace"] == NS


def test_the_job_key_never_goes_to_the_slurmd_namespace() -> None:
    docs = render("global.slurmdNamespace=slurm")
    secrets = [d for d in docs if d["kind"] == "Secret"]
    assert [d["metadata"]["namespace"] for d in secrets if d["metadata"]["name"] == JOB_KEY_SECRET] == [NS]
    assert not [d for d in secrets if d["metadata"]["namespace"] == "slurm"]  # no Secret at all
    slurmd_side = [d for d in docs if d["metadata"].get("namespace") == "slurm"]
    assert not any("job-key" in yaml.safe_dump(d) for d in slurmd_side)


def test_the_scheduler_restarts_on_a_new_job_key_and_the_gateway_does_not(default_docs: list[Doc]) -> None:
    """The scheduler reads the key once; the gateway re-reads it and accepts the previous one for
    30 days, which a restart would forget (and refuse every running job's token)."""
    key = decoded(of_kind(default_docs, "Secret")[JOB_KEY_SECRET])["job-key"]
    scheduler = pod_annotations(deployment(default_docs, "scheduler"))
    assert scheduler["checksum/job-key"] == hashlib.sha256(key.encode()).hexdigest()
    assert "checksum/job-key" not in pod_annotations(deployment(default_docs, "hooks"))
    assert "checksum/job-key" not in pod_annotations(deployment(default_docs, "syncer"))


def test_an_existing_job_key_secret_is_mounted_and_nothing_is_generated() -> None:
    sets = ("global.jobKey.existingSecret=my-job-key", "global.jobKey.existingSecretKey=key")
    one, two = _helm_template(*sets), _helm_template(*sets)
    assert one.returncode == 0, one.stderr
    docs = [d for d in yaml.safe_load_all(one.stdout) if d]
    assert JOB_KEY_SECRET not in of_kind(docs, "Secret")
    assert not any("job-key" in name for name in of_kind(docs, "Secret"))
    for component in ("scheduler", "syncer"):
        dep = deployment(docs, component)
        assert f"--job-key-file={JOB_KEY_FILE}" in container(dep)["args"]
        assert mounted_files(dep)[JOB_KEY_FILE] == ("my-job-key", "key"), component
        assert "checksum/job-key" not in pod_annotations(dep)
    # Everything about the job key is the same twice (the other generated secrets are not).
    assert _job_key_parts(one.stdout) == _job_key_parts(two.stdout)


def _job_key_parts(manifest: str) -> list[Any]:
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    out: list[Any] = []
    for component in ("scheduler", "syncer"):
        dep = deployment(docs, component)
        out += [container(dep)["args"], mounted_files(dep), pod_annotations(dep).get("checksum/job-key")]
    return out


def test_a_generated_job_key_is_new_on_each_render_without_a_cluster() -> None:
    """What GitOps users avoid with global.jobKey.existingSecret (README "Mutual TLS", GitOps)."""
    keys = {decoded(of_kind(render(), "Secret")[JOB_KEY_SECRET])["job-key"] for _ in range(2)}
    assert len(keys) == 2


def test_the_slurmd_side_is_told_to_project_its_own_token_root_only() -> None:
    """The README's volume snippet for the slurmd Pods: the Pod's own token for tandem-hooks, 0400,
    the scripts executable; the notes and the ConfigMap's comment say the same."""
    readme = (REPO_ROOT / "helm" / "README.md").read_text()
    (snippet,) = [b for b in readme.split("```yaml")[1:] if "hooks-token" in b.split("```")[0]]
    pod = yaml.safe_load(snippet.split("```")[0])
    (volume,) = pod["volumes"]
    assert volume["projected"]["defaultMode"] == 0o400
    modes = {
        item["path"]: item.get("mode", volume["projected"]["defaultMode"])
        for src in volume["projected"]["sources"]
        for kind in ("configMap", "secret")
        if kind in src
        for item in src[kind]["items"]
    }
    sources = volume["projected"]["sources"]
    (token,) = [s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s]
    assert token["audience"] == keys.HOOKS_TOKEN_AUDIENCE and token["path"] == "hooks-token"
    assert "hooks-token" not in modes  # so defaultMode (0400) holds for it
    assert modes["hooks.env"] & 0o004 and modes["placeholder.sh"] & 0o005 == 0o005
    for template in ("NOTES.txt", "slurm-hooks-configmap.yaml"):  # (helm template prints no notes)
        assert "defaultMode: 0400" in (CHART / "templates" / template).read_text(), template


# --- Slurm's KillWait ------------------------------------------------------------------------------


def test_by_default_the_scheduler_reads_kill_wait_from_slurm(default_docs: list[Doc]) -> None:
    c = container(deployment(default_docs, "scheduler"))
    assert not any(a.startswith(("--slurm-kill-wait", "--slurm-conf-file")) for a in c["args"])
    volumes = deployment(default_docs, "scheduler")["spec"]["template"]["spec"]["volumes"]
    assert not any(v["name"] == "slurm-conf" for v in volumes)


def test_a_kill_wait_given_overrides_slurms() -> None:
    c = container(deployment(render("global.slurm.killWait=45s"), "scheduler"))
    assert "--slurm-kill-wait=45s" in c["args"]


def test_a_slurm_conf_configmap_is_mounted_read_only_and_passed_to_the_scheduler_only() -> None:
    docs = render("global.slurm.confConfigMap=slurm-conf", "global.slurm.confConfigMapKey=slurm.conf.main")
    dep = deployment(docs, "scheduler")
    c = container(dep)
    assert "--slurm-conf-file=/etc/tandem/slurm-conf/slurm.conf" in c["args"]
    assert not any(a.startswith("--slurm-kill-wait") for a in c["args"])
    assert {"name": "slurm-conf", "mountPath": "/etc/tandem/slurm-conf", "readOnly": True} in c[
        "volumeMounts"
    ]
    (vol,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "slurm-conf"]
    # The whole directory, not a subPath: the kubelet swaps in the ConfigMap's edits, read again.
    assert vol["configMap"] == {
        "name": "slurm-conf",
        "defaultMode": 0o444,
        "items": [{"key": "slurm.conf.main", "path": "slurm.conf"}],
    }
    assert not any(m.get("subPath") for m in c["volumeMounts"] if m["name"] == "slurm-conf")
    for other in ("syncer", "hooks"):
        assert not any("slurm-conf" in a for a in container(deployment(docs, other))["args"])


@pytest.mark.parametrize(
    ("value", "ok"),
    [("", True), ("30s", True), ("500ms", True), ("2m", True), ("thirty", False), ("30", False)],
)
def test_kill_wait_is_blank_or_a_duration(value: str, ok: bool) -> None:
    res = _helm_template(f"global.slurm.killWait={value}")
    assert (res.returncode == 0) is ok, res.stderr
    if not ok:
        assert "/global/slurm/killWait" in res.stderr


# --- slurmrestd over HTTPS -------------------------------------------------------------------

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_an_api_ca_given_as_pem_is_a_configmap_mounted_and_passed() -> None:
    res = subprocess.run(
        [str(HELM), "template", RELEASE, str(CHART), "-n", NS, "--set", "global.slurm.apiBase=https://slurm:6820",
         "--set-string", f"global.slurm.apiCa={PEM}"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert of_kind(docs, "ConfigMap")[f"{FULLNAME}-slurm-api-ca"]["data"]["ca.crt"] == PEM
    for component in ("scheduler", "syncer"):
        dep = deployment(docs, component)
        c = container(dep)
        assert "--slurm-api-ca-file=/etc/tandem/slurm-api-ca/ca.crt" in c["args"]
        assert {"name": "slurm-api-ca", "mountPath": "/etc/tandem/slurm-api-ca", "readOnly": True} in c[
            "volumeMounts"
        ]
        assert "checksum/slurm-api-ca" in dep["spec"]["template"]["metadata"]["annotations"]
    assert not any("slurm-api-ca" in a for a in container(deployment(docs, "hooks"))["args"])


def test_plaintext_to_slurmrestd_is_passed_only_when_the_operator_says_so(default_docs: list[Doc]) -> None:
    for component in ("scheduler", "syncer"):
        assert (
            "--slurm-api-allow-plaintext=true" not in container(deployment(default_docs, component))["args"]
        )
    docs = render("global.slurm.allowPlaintext=true")
    for component in ("scheduler", "syncer"):
        assert "--slurm-api-allow-plaintext=true" in container(deployment(docs, component))["args"]


def test_without_an_api_ca_no_flag_is_passed(default_docs: list[Doc]) -> None:
    for component in ("scheduler", "syncer"):
        assert not any(
            "--slurm-api-ca-file" in a for a in container(deployment(default_docs, component))["args"]
        )


def test_an_existing_api_ca_secret_is_mounted() -> None:
    docs = render("global.slurm.apiBase=https://slurm:6820", "global.slurm.apiCaSecret=slurm-ca")
    vols = deployment(docs, "syncer")["spec"]["template"]["spec"]["volumes"]
    (vol,) = [v for v in vols if v["name"] == "slurm-api-ca"]
    assert vol["secret"]["secretName"] == "slurm-ca"
    assert vol["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("global.slurm.apiCaSecret=a", "global.slurm.apiCaConfigMap=b"), "set one of apiCa"),
        (("global.slurm.apiCaSecret=a",), "is not https://"),
        (("global.tls.certManager.issuerRef.kind=Vault",), "issuerRef/kind"),
        (("networkPolicy.operatorFrom[0].nodeSelector.x=y",), "operatorFrom/0"),
        (("global.tls.generated.renewDays=0",), "renewDays"),
        (("global.jobKey.existingSecretKey=a/b",), "jobKey/existingSecretKey"),
        (("global.jobKey.secret=x",), "jobKey"),
    ],
)
def test_bad_values_are_refused(sets: tuple[str, ...], message: str) -> None:
    res = _helm_template(*sets)
    assert res.returncode != 0
    assert message in res.stderr, res.stderr


# --- NetworkPolicies -------------------------------------------------------------------------


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # the chart selects by labels only
    return bool(selector.get("matchLabels", {}).items() <= labels.items())


def _pod_labels(docs: list[Doc], component: str) -> dict[str, str]:
    labels: dict[str, str] = deployment(docs, component)["spec"]["template"]["metadata"]["labels"]
    return labels


def _ports(dep: Doc) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container(dep)["ports"]}


def _rules_by_port(policy: Doc) -> dict[int, list[list[Doc] | None]]:
    out: dict[int, list[list[Doc] | None]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            out.setdefault(port["port"], []).append(rule.get("from"))
    return out


def test_each_policy_selects_its_own_pods_and_no_other(default_docs: list[Doc]) -> None:
    policies = of_kind(default_docs, "NetworkPolicy")
    assert set(policies) == {f"{FULLNAME}-{c}" for c in SERVICES}
    for component in SERVICES:
        spec = policies[f"{FULLNAME}-{component}"]["spec"]
        assert spec["policyTypes"] == ["Ingress"]
        for other in SERVICES:
            assert _selects(spec["podSelector"], _pod_labels(default_docs, other)) == (other == component)


def test_the_syncer_takes_grpc_only_from_the_scheduler_and_the_gateway(default_docs: list[Doc]) -> None:
    policy = of_kind(default_docs, "NetworkPolicy")[f"{FULLNAME}-syncer"]
    ports = _ports(deployment(default_docs, "syncer"))
    rules = _rules_by_port(policy)
    assert set(rules) == {ports["grpc"], ports["health"]}
    (peers,) = rules[ports["grpc"]]
    assert peers is not None
    assert peers and all(set(p) == {"podSelector"} for p in peers)
    admitted = {
        c for c in SERVICES for p in peers if _selects(p["podSelector"], _pod_labels(default_docs, c))
    }
    assert admitted == {"scheduler", "hooks"}
    # Probes and scrapes: the health port, from the release's namespace only (issue 50: a tenant's
    # Pod opened connections to it until the liveness probe failed).
    assert rules[ports["health"]] == [
        [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}]
    ]


def test_the_scheduler_takes_grpc_only_from_the_syncer_and_listed_operators() -> None:
    ops = "networkPolicy.operatorFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=ops"
    for sets, operators in (((), 0), ((ops,), 1)):
        docs = render(*sets)
        policy = of_kind(docs, "NetworkPolicy")[f"{FULLNAME}-scheduler"]
        (peers,) = _rules_by_port(policy)[_ports(deployment(docs, "scheduler"))["grpc"]]
        assert peers is not None
        pods = [p for p in peers if "podSelector" in p]
        assert [c for c in SERVICES for p in pods if _selects(p["podSelector"], _pod_labels(docs, c))] == [
            "syncer"
        ]
        assert [p for p in peers if "namespaceSelector" in p] == (
            [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}] * operators
        )


def test_the_gateway_takes_calls_only_from_the_slurmd_namespace() -> None:
    docs = render("global.slurmdNamespace=slurm")
    policy = of_kind(docs, "NetworkPolicy")[f"{FULLNAME}-hooks"]
    rules = _rules_by_port(policy)
    assert list(rules) == [_ports(deployment(docs, "hooks"))["http"]]
    (peers,) = next(iter(rules.values()))
    assert peers == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "slurm"}}, "podSelector": {}}
    ]


def test_monitoring_peers_replace_anyone_on_the_health_ports() -> None:
    prom = "networkPolicy.monitoringFrom[0].namespaceSelector.matchLabels.team=monitoring"
    docs = render(prom)
    want = [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]
    for component in ("scheduler", "syncer"):
        rules = _rules_by_port(of_kind(docs, "NetworkPolicy")[f"{FULLNAME}-{component}"])
        assert rules[_ports(deployment(docs, component))["health"]] == [want]
    hooks = _rules_by_port(of_kind(docs, "NetworkPolicy")[f"{FULLNAME}-hooks"])
    assert want in hooks[_ports(deployment(docs, "hooks"))["http"]]


def test_no_rule_ever_admits_everyone_by_an_empty_peer_list() -> None:
    """`from: []` would mean anyone: a disabled caller must drop the rule, not empty it."""
    docs = render("scheduler.enabled=false", "hooks.enabled=false")
    (policy,) = of_kind(docs, "NetworkPolicy").values()
    grpc = _ports(deployment(docs, "syncer"))["grpc"]
    assert grpc not in _rules_by_port(policy)
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from", None) != []


def test_network_policies_can_be_turned_off() -> None:
    assert of_kind(render("networkPolicy.enabled=false"), "NetworkPolicy") == {}


def test_who_may_share_a_held_node_is_the_charts_one_list(default_docs: list[Doc]) -> None:
    """Issue 50: the admission policy that refuses the lock toleration and the syncer's strict-lock
    exemption read one list: the release's and slurmd namespaces always, lock.sharingNamespaces,
    and the dashboard's namespace when set."""
    policy = of_kind(default_docs, "ValidatingAdmissionPolicy")[f"{NS}-{FULLNAME}-lock-sharing"]
    assert (
        f'!(request.namespace in ["kube-system","{NS}"])'
        in policy["spec"]["matchConditions"][0]["expression"]
    )
    bindings = of_kind(default_docs, "ValidatingAdmissionPolicyBinding")
    assert bindings[policy["metadata"]["name"]]["spec"]["validationActions"] == ["Deny"]
    env = {e["name"]: e for e in container(deployment(default_docs, "syncer"))["env"]}
    assert (
        env["TANDEM_LOCK_SHARING_NAMESPACES"]["valueFrom"]["configMapKeyRef"]["key"]
        == "lock-sharing-namespaces"
    )
    docs = render(
        "global.slurmdNamespace=slurm",
        "lock.sharingNamespaces={ops}",
        "monitoring.dashboard.namespace=grafana",
    )
    (config,) = [d for d in of_kind(docs, "ConfigMap").values() if d["metadata"]["name"].endswith("-config")]
    assert config["data"]["lock-sharing-namespaces"] == f"grafana,ops,slurm,{NS}"
    assert not [d for d in render("lock.admissionPolicy=false") if "lock-sharing" in d["metadata"]["name"]]


def test_the_schedulers_claim_writes_are_held_by_a_policy_of_their_own(default_docs: list[Doc]) -> None:
    """Issue 50: RBAC lets the scheduler create, patch and delete ResourceClaims and patch their
    status; a second admission policy, matching the scheduler's ServiceAccount as the Pod one does,
    holds those writes to what tandem.scheduler.claimwrites sends (its rules are tried against the
    apiserver in tests/integration/test_scheduler_admission.py)."""
    name = f"{NS}-{FULLNAME}-scheduler-claim-writes"
    policies = of_kind(default_docs, "ValidatingAdmissionPolicy")
    policy, pods = policies[name], policies[f"{NS}-{FULLNAME}-scheduler-writes"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [keys.DRA_GROUP],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": [keys.RESOURCE_CLAIMS, f"{keys.RESOURCE_CLAIMS}/status"],
        }
    ]
    writer = f"system:serviceaccount:{NS}:{FULLNAME}-scheduler"
    assert spec["matchConditions"] == pods["spec"]["matchConditions"]
    assert [c["expression"] for c in spec["matchConditions"]] == [f'request.userInfo.username == "{writer}"']
    assert policy["metadata"]["labels"] == pods["metadata"]["labels"]
    assert {v["reason"] for v in spec["validations"]} == {"Forbidden"}
    assert all(v.get("message") and "\n" not in v["message"] for v in spec["validations"])
    cel = "\n".join(
        [v["expression"] for v in spec["variables"]] + [v["expression"] for v in spec["validations"]]
    )
    for word in (FINALIZER, keys.EXTENDED_CLAIM_ANNOTATION, '"reservedFor"', '"allocation"', '"pods"'):
        assert word in cel, word
    # The claim claim_manifest makes is the one a create may make: named as it names it.
    long_pod = {"metadata": {"name": "p" * 63, "namespace": "default", "uid": "u"}}
    generated = claim_manifest(long_pod, [], "gpu.nvidia.com")["metadata"]["generateName"]
    kept = generated.removesuffix(CLAIM_SUFFIX)
    assert len(kept) < 63 and f"substring(0, {len(kept)})" in cel and json.dumps(CLAIM_SUFFIX) in cel
    binding = of_kind(default_docs, "ValidatingAdmissionPolicyBinding")[name]
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    assert binding["metadata"]["labels"] == policy["metadata"]["labels"]
    for off in ("scheduler.rbac.admissionPolicy=false", "scheduler.rbac.create=false"):
        assert not [d for d in render(off) if d["metadata"]["name"] == name], off


def test_the_syncer_reads_the_daemonsets_whose_pods_a_strict_lock_spares(default_docs: list[Doc]) -> None:
    """Issue 50: a DaemonSet's Pod shares a held Node only for a real DaemonSet whose template
    tolerates the lock; the syncer lists and watches them cluster-wide (its informer's scope) and
    writes none."""
    rules = of_kind(default_docs, "ClusterRole")[f"{NS}-{FULLNAME}-syncer"]["rules"]
    assert [r for r in rules if "daemonsets" in r["resources"]] == [
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch"]}
    ]
    assert not [r for r in rules if "apps" in r["apiGroups"] and r["resources"] != ["daemonsets"]]


def test_the_gateway_may_read_the_published_keys_and_nothing_else(default_docs: list[Doc]) -> None:
    hooks = f"{NS}-{FULLNAME}-hooks"
    (rule,) = of_kind(default_docs, "ClusterRole")[hooks]["rules"]
    assert rule == {
        "nonResourceURLs": ["/openid/v1/jwks", "/.well-known/openid-configuration"],
        "verbs": ["get"],
    }
    assert not [
        d for d in default_docs if d["kind"] in ("Role", "RoleBinding") and "hooks" in d["metadata"]["name"]
    ]
