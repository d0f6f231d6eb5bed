{{/* Rules the scheduler needs on the Pods it schedules, wherever it watches them. */}}
{{- define "tandem.scheduler.podRules" -}}
# Watch the Pods that name this scheduler; write the job-id annotation and the lock toleration
# (patch); delete Pods whose Slurm job ended.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
# Bind a Pod to the Node that hosts its Slurm node.
- apiGroups: [""]
  resources: [pods/binding]
  verbs: [create]
# PodScheduled=False with the reason (invalid Pod, Slurm pending reason).
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
# Gangs: the PodGroups Pods join and the CompositePodGroups those belong to (read), and their
# PodGroupScheduled condition (written).
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups, compositepodgroups]
  verbs: [get, list, watch]
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups/status, compositepodgroups/status]
  verbs: [patch]
# Elastic gangs: how many members a gang's Job asks for now (its parallelism), so that a core is
# shrunk in Slurm only when the workload scaled down, never while a member is being replaced.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
# GPUs by claim: the ResourceClaims (and templates) the Pods name, read; each claim allocated the
# devices Slurm chose and reserved for its Pod before the bind: the finalizer (patch), the status.
# A Pod asking nvidia.com/gpu of a Node that serves it through DRA gets a claim made for it
# (create), and one made for an earlier placement that cannot serve this one goes (delete), as
# kube-scheduler does for the Pods it schedules. Its admission policy (admission-policy.yaml) holds
# each of these writes to that shape.
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims, resourceclaimtemplates]
  verbs: [get, list, watch]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims]
  verbs: [create, patch, delete]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims/status]
  verbs: [patch]
{{- end -}}
