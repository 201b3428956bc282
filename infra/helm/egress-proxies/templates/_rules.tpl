{{/*
Least privilege per process over Proxies, ProxyPools and Secrets: the rules
of infra/k8s/overlays/cluster-wide/rbac.yaml (which says why for every verb),
granted by ClusterRoles (cluster-wide) or by a Role in each watched
namespace (namespaced; watched-namespace/roles.yaml). A test compares them
with kustomize's.
*/}}
{{- define "ep.rules.worker" -}}
- apiGroups: [crawl.example.com]
  resources: [proxies]
  verbs: [get, list, patch, create, delete]
- apiGroups: [crawl.example.com]
  resources: [proxies/status]
  verbs: [patch]
- apiGroups: [crawl.example.com]
  resources: [proxypools]
  verbs: [get]
- apiGroups: [crawl.example.com]
  resources: [proxypools/status]
  verbs: [patch]
- apiGroups: [crawl.example.com]
  resources: [proxypools/finalizers]
  verbs: [update]
- apiGroups: ['']
  resources: [secrets]
  verbs: [get, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{- define "ep.rules.bridge" -}}
- apiGroups: [crawl.example.com]
  resources: [proxies]
  verbs: [get, list, watch, patch]
- apiGroups: [crawl.example.com]
  resources: [proxypools]
  verbs: [list, watch]
- apiGroups: ['']
  resources: [secrets]
  verbs: [list, watch, create, get]
{{- end -}}

{{- define "ep.rules.api" -}}
{{- /* patch: the dashboard's cordon (an annotation), for operator tenants. */}}
- apiGroups: [crawl.example.com]
  resources: [proxies]
  verbs: [list, watch, patch]
- apiGroups: [crawl.example.com]
  resources: [proxypools]
  verbs: [list, watch]
{{- /* The dashboard's scale control: the scale subresource only, never the spec. */}}
- apiGroups: [crawl.example.com]
  resources: [proxypools/scale]
  verbs: [patch]
- apiGroups: ['']
  resources: [secrets]
  verbs: [list, watch]
{{- end -}}

{{/* The gateway reads Proxies exactly as the api does (its own informer); leases live in the lease store. */}}
{{- define "ep.rules.gateway" -}}
- apiGroups: [crawl.example.com]
  resources: [proxies]
  verbs: [list, watch]
- apiGroups: ['']
  resources: [secrets]
  verbs: [list, watch]
{{- end -}}
