{{/* Names, labels and the pieces every pod of the chart shares. */}}

{{- define "trainhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The base name of every resource; components append "-webhook", "-sweeper", ... */}}
{{- define "trainhook.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trainhook.webhookName" -}}
{{- printf "%s-webhook" (include "trainhook.fullname" .) }}
{{- end }}

{{- define "trainhook.sweeperName" -}}
{{- printf "%s-sweeper" (include "trainhook.fullname" .) }}
{{- end }}

{{/* The MutatingWebhookConfiguration (cluster-scoped). */}}
{{- define "trainhook.webhookConfigName" -}}
{{- include "trainhook.fullname" . }}
{{- end }}

{{- define "trainhook.selfSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "trainhook.fullname" .)) .Values.certificates.self.secretName }}
{{- end }}

{{- define "trainhook.certManagerName" -}}
{{- printf "%s-webhook" (include "trainhook.fullname" .) }}
{{- end }}

{{/* certManager mode without an issuerRef: the self-signed Issuer, and the CA it signs. */}}
{{- define "trainhook.selfSignedIssuerName" -}}
{{- printf "%s-selfsigned" (include "trainhook.fullname" .) }}
{{- end }}

{{- define "trainhook.caName" -}}
{{- printf "%s-ca" (include "trainhook.fullname" .) }}
{{- end }}

{{/*
"namespace/Certificate" whose Secret's ca.crt cert-manager's CA injector copies into the
caBundle: the chart's own CA (it changes only when the CA renews, and keeps its key), or the
serving certificate when an issuer is given (its ca.crt is that issuer's CA).
*/}}
{{- define "trainhook.injectCaFrom" -}}
{{- if .Values.certificates.certManager.issuerRef }}
{{- printf "%s/%s" .Release.Namespace (include "trainhook.certManagerName" .) }}
{{- else }}
{{- printf "%s/%s" .Release.Namespace (include "trainhook.caName" .) }}
{{- end }}
{{- end }}

{{/* The Secret the webhook reads its certificate from in the certManager and secret modes. */}}
{{- define "trainhook.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "certManager" }}
{{- printf "%s-tls" (include "trainhook.certManagerName" .) }}
{{- else if eq .Values.certificates.mode "secret" }}
{{- required "certificates.secret.name is required when certificates.mode is secret" .Values.certificates.secret.name }}
{{- end }}
{{- end }}

{{- define "trainhook.leaseName" -}}
{{- default (include "trainhook.sweeperName" .) .Values.sweeper.leaseName }}
{{- end }}

{{- /* Every shard's Lease: shard 0's is the lease name, shard i's "<lease name>-<i>". */ -}}
{{- define "trainhook.leaseNames" -}}
{{- $name := include "trainhook.leaseName" . }}
{{- $names := list $name }}
{{- range $i := untilStep 1 (int .Values.sweeper.shards) 1 }}
{{- $names = append $names (printf "%s-%d" $name $i) }}
{{- end }}
{{- join ", " $names }}
{{- end }}

{{- define "trainhook.image" -}}
{{- $repository := .Values.image.repository }}
{{- with .Values.image.registry }}
{{- $repository = printf "%s/%s" . $repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The ServiceAccount each component runs as (its own, or an existing one by name). */}}
{{- define "trainhook.webhookServiceAccount" -}}
{{- default (include "trainhook.webhookName" .) .Values.webhook.serviceAccount.name }}
{{- end }}

{{- define "trainhook.sweeperServiceAccount" -}}
{{- default (include "trainhook.sweeperName" .) .Values.sweeper.serviceAccount.name }}
{{- end }}

{{/*
The served namespaces as a list (empty: every namespace but the excluded ones); listing the
release namespace is refused, since the webhook never serves the namespace it runs in, and so is
listing an excluded namespace, which would get the sweeper's Role and never be served.
*/}}
{{- define "trainhook.namespaces" -}}
{{- if has .Release.Namespace .Values.namespaces }}
{{- fail (printf "namespaces: %q is the release namespace, which the webhook never serves; list only the namespaces of training jobs" .Release.Namespace) }}
{{- end }}
{{- range .Values.namespaces }}
{{- if has . $.Values.webhookConfiguration.namespaceSelector.excludeNamespaces }}
{{- fail (printf "namespaces: %q is also in webhookConfiguration.namespaceSelector.excludeNamespaces, so it would never be served; list it in one of the two" .) }}
{{- end }}
{{- end }}
{{- toJson .Values.namespaces }}
{{- end }}

{{/* The namespace helm test creates its dry-run Pod in. */}}
{{- define "trainhook.testNamespace" -}}
{{- if .Values.helmTest.namespace }}
{{- .Values.helmTest.namespace }}
{{- else if .Values.namespaces }}
{{- first .Values.namespaces }}
{{- else }}
{{- "default" }}
{{- end }}
{{- end }}

{{/* The port the webhook listens on: its node's port on the host network, else webhook.port. */}}
{{- define "trainhook.webhookPort" -}}
{{- if .Values.webhook.hostNetwork.enabled }}
{{- .Values.webhook.hostNetwork.port }}
{{- else }}
{{- .Values.webhook.port }}
{{- end }}
{{- end }}

{{/* Labels of every resource; commonLabels never override the chart's own. */}}
{{- define "trainhook.labels" -}}
{{- $labels := dict
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-")
  "app.kubernetes.io/name" (include "trainhook.name" .)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "app.kubernetes.io/part-of" "trainhook" }}
{{- toYaml (merge $labels .Values.commonLabels) }}
{{- end }}

{{/* Selector labels of one component: include with (dict "root" $ "component" "webhook"). */}}
{{- define "trainhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainhook.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of one component's resources, plus optional "extra" labels that never override them. */}}
{{- define "trainhook.componentLabels" -}}
{{- $labels := include "trainhook.labels" .root | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/component" .component }}
{{- toYaml (merge $labels (.extra | default dict)) }}
{{- end }}

{{/* Pod template labels: the selector labels plus podLabels, which never override them. */}}
{{- define "trainhook.podLabels" -}}
{{- $labels := include "trainhook.selectorLabels" . | fromYaml }}
{{- toYaml (merge $labels (.extra | default dict)) }}
{{- end }}

{{/*
The restricted Pod Security Standard, for every pod of the chart: the pod-level part...
*/}}
{{- define "trainhook.podSecurityContext" -}}
runAsNonRoot: true
{{- with .Values.securityContext.runAsUser }}
runAsUser: {{ . }}
{{- end }}
{{- with .Values.securityContext.runAsGroup }}
runAsGroup: {{ . }}
{{- end }}
{{- with .Values.securityContext.fsGroup }}
fsGroup: {{ . }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* ...and the container-level part, with a read-only root filesystem. */}}
{{- define "trainhook.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* A memory-backed emptyDir; include with (dict "name" "tmp" "size" "64Mi"). */}}
{{- define "trainhook.memoryVolume" -}}
- name: {{ .name }}
  emptyDir:
    medium: Memory
    sizeLimit: {{ .size }}
{{- end }}

{{/*
A chart file as the body of a YAML block scalar, each line indented and blank lines left empty:
  - |{{ include "trainhook.fileLines" (dict "root" $ "file" "files/x.py" "indent" 10) }}
*/}}
{{- define "trainhook.fileLines" -}}
{{- $pad := repeat (int .indent) " " }}
{{- range splitList "\n" (.root.Files.Get .file | trimSuffix "\n") }}
{{ if . }}{{ $pad }}{{ . }}{{ end }}
{{- end }}
{{- end }}

{{/* The progress endpoint's Service, and the URL the webhook gives reporting pods. */}}
{{- define "trainhook.progressName" -}}
{{- printf "%s-progress" (include "trainhook.fullname" .) }}
{{- end }}

{{- define "trainhook.progressUrl" -}}
{{- printf "https://%s.%s.svc:%v" (include "trainhook.progressName" .) .Release.Namespace .Values.progress.port }}
{{- end }}

{{/* The Secret the sweeper reads the progress endpoint's certificate from. */}}
{{- define "trainhook.progressSecretName" -}}
{{- if eq .Values.certificates.mode "self" }}
{{- include "trainhook.selfSecretName" . }}
{{- else }}
{{- include "trainhook.tlsSecretName" . }}
{{- end }}
{{- end }}
