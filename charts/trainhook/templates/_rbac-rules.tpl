{{- /*
Every permission the chart grants, in one place. Each list is exactly what the component's code
calls; adjust here when a component starts or stops making a call.
*/ -}}

{{- /*
Webhook: reading sibling StatefulSets and Jobs of a job through a watch cache (webhook.lookup),
cluster-wide (ClusterRole), or in each of `namespaces` (a Role there; the webhook then lists and
watches each namespace separately).
*/ -}}
{{- define "trainhook.rules.webhookLookup" -}}
{{- if .Values.webhook.lookup }}
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
{{- end }}
{{- end }}

{{- /*
Webhook, cluster-wide (ClusterRole).
- The lookup above, when no namespace list is set.
- Self-managed certificates: writing the CA bundle into its own MutatingWebhookConfiguration,
  and only that one: get and patch by name, list and watch by name too (the watch selects it
  with a metadata.name field selector, which is what lets RBAC limit list/watch to one name).
*/ -}}
{{- define "trainhook.rules.webhookCluster" -}}
{{- if not .Values.namespaces }}
{{- include "trainhook.rules.webhookLookup" . }}
{{- end }}
{{- if eq .Values.certificates.mode "self" }}
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations]
  resourceNames: [{{ include "trainhook.webhookConfigName" . }}]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}

{{- /*
Webhook, release namespace (Role), self-managed certificates only: the Secret holding its CA and
serving certificate. "create" cannot be limited to a name by RBAC; the rest is.
*/ -}}
{{- define "trainhook.rules.webhookNamespace" -}}
{{- if eq .Values.certificates.mode "self" }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [{{ include "trainhook.selfSecretName" . }}]
  verbs: [get, update, patch]
{{- end }}
{{- end }}

{{- /*
Sweeper, every watched namespace (a ClusterRole bound cluster-wide, or a Role in each of
`namespaces` when that list is set).
*/ -}}
{{- define "trainhook.rules.sweeperWatched" -}}
# Labelled workloads: completion, failure, cleanup, scaling a finished StatefulSet to zero.
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, patch, delete]
# Pods of a job: their exit codes decide success; cleanPodPolicy deletes them; a job of bare
# Pods has its phase recorded on them.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
# The headless Service of each job.
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
# SSH keys of MPI jobs (the Secret <job>-ssh): read by name when an MPI job is reconciled,
# created, kept owned by the job and deleted when orphaned. The sweeper never lists or watches
# Secrets; RBAC cannot name <job>-ssh in advance, so the token may still get a Secret whose name
# it knows (docs/install.md).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, delete]
# Peer lists of large jobs, one immutable ConfigMap per topology: created, followed, deleted;
# one under the name a job's pods mount that lacks the sweeper's label is read by name (get), so
# its content is judged and it is never created over again.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, delete]
# Gang scheduling: the PodGroup of each job, for Volcano, scheduler-plugins' coscheduling, KAI
# (scheduling.run.ai) and Kubernetes' own gang (scheduling.k8s.io; Kueue's pod groups are labels
# on the pods and need nothing more).
- apiGroups: [scheduling.volcano.sh, scheduling.x-k8s.io, scheduling.run.ai, scheduling.k8s.io]
  resources: [podgroups]
  verbs: [get, list, watch, create, patch, delete]
# NVLink domains: the ComputeDomain <job>-nvlink of each job that asks for one
# (trainhook.io/nvlink-domain), NVIDIA's DRA driver's; its owners kept those of the job.
- apiGroups: [resource.nvidia.com]
  resources: [computedomains]
  verbs: [list, watch, create, patch, delete]
# Events that explain what the sweeper did.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{- /*
Sweeper, cluster-wide (ClusterRole): Nodes, read only, for the failure rules that name a node's
conditions or taints (`node-condition=`, `node-taint=`); one list and watch of every node.
*/ -}}
{{- define "trainhook.rules.sweeperNodes" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
{{- end }}

{{- /* Sweeper, release namespace (Role): its leader-election Lease, by name once it exists. */ -}}
{{- define "trainhook.rules.sweeperLease" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ include "trainhook.leaseNames" . }}]
  verbs: [get, update]
{{- end }}

{{- /*
Uninstall hook: deleting the MutatingWebhookConfiguration (cluster) and, in self mode, the Secret
the webhook created (release namespace).
*/ -}}
{{- define "trainhook.rules.uninstallCluster" -}}
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations]
  resourceNames: [{{ include "trainhook.webhookConfigName" . }}]
  verbs: [delete]
{{- end }}

{{- define "trainhook.rules.uninstallNamespace" -}}
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [{{ include "trainhook.selfSecretName" . }}]
  verbs: [delete]
{{- end }}

{{- /* helm test: reading the CA bundle and service of the MutatingWebhookConfiguration... */ -}}
{{- define "trainhook.rules.test" -}}
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations]
  resourceNames: [{{ include "trainhook.webhookConfigName" . }}]
  verbs: [get]
{{- end }}

{{- /*
...and, in the test namespace only, creating a Pod: the test sends every create with
dryRun=All, so nothing is stored (RBAC cannot require the dry run; the grant lives only while
`helm test` runs).
*/ -}}
{{- define "trainhook.rules.testNamespace" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [create]
{{- end }}

{{- /*
Sweeper, cluster-wide (ClusterRole), with progress.enabled: TokenReviews verify the token a pod
reports progress with (a TokenReview is cluster-scoped; no Role can grant it).
*/ -}}
{{- define "trainhook.rules.sweeperProgress" -}}
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
{{- end }}
