{{/* Names. */}}
{{- define "kube-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kube-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-gateway.labels" -}}
helm.sh/chart: {{ include "kube-gateway.chart" . }}
app.kubernetes.io/name: {{ include "kube-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of the gateway pods. */}}
{{- define "kube-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/* Selector labels of the bundled etcd pods. */}}
{{- define "kube-gateway.etcdSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end }}

{{- define "kube-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kube-gateway.secretNamespace" -}}
{{- default .Release.Namespace .Values.secretNamespace }}
{{- end }}

{{- define "kube-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "kube-gateway.etcdImage" -}}
{{- $i := .Values.etcd.bundled.image }}
{{- printf "%s:%s" $i.repository (default .Chart.AppVersion $i.tag) }}
{{- end }}

{{/* The Secret with the gateway's serving certificate (tls.crt, tls.key). */}}
{{- define "kube-gateway.servingSecretName" -}}
{{- if eq .Values.certificates.mode "secret" }}
{{- required "certificates.secret.name is required with certificates.mode=secret" .Values.certificates.secret.name }}
{{- else }}
{{- printf "%s-serving-cert" (include "kube-gateway.fullname" .) }}
{{- end }}
{{- end }}

{{/* DNS names of the gateway's Service; the hub dials <service>.<namespace>.svc. */}}
{{- define "kube-gateway.servingDNSNames" -}}
{{- $svc := include "kube-gateway.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- toJson (list (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) (printf "%s.%s" $svc $ns) $svc) }}
{{- end }}

{{/* Bundled etcd. */}}
{{- define "kube-gateway.etcdName" -}}
{{- printf "%s-etcd" (include "kube-gateway.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "kube-gateway.etcdHeadless" -}}
{{- printf "%s-headless" (include "kube-gateway.etcdName" .) }}
{{- end }}

{{/* <headless>.<namespace>.svc.<domain>: the domain of every bundled etcd member. */}}
{{- define "kube-gateway.etcdDomain" -}}
{{- printf "%s.%s.svc.%s" (include "kube-gateway.etcdHeadless" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{- define "kube-gateway.etcdServerSecretName" -}}
{{- printf "%s-server-tls" (include "kube-gateway.etcdName" .) }}
{{- end }}

{{- define "kube-gateway.etcdClientSecretName" -}}
{{- if eq .Values.etcd.mode "external" }}
{{- .Values.etcd.external.tls.secretName }}
{{- else }}
{{- printf "%s-client-tls" (include "kube-gateway.etcdName" .) }}
{{- end }}
{{- end }}

{{/* DNS names the bundled etcd's certificate must hold. */}}
{{- define "kube-gateway.etcdDNSNames" -}}
{{- $headless := include "kube-gateway.etcdHeadless" . }}
{{- $ns := .Release.Namespace }}
{{- toJson (list (printf "*.%s" (include "kube-gateway.etcdDomain" .)) (printf "*.%s.%s.svc" $headless $ns) (printf "%s.%s.svc" $headless $ns) "localhost") }}
{{- end }}

{{/* --etcd-servers: every bundled member by its stable name, or the external endpoints. */}}
{{- define "kube-gateway.etcdServers" -}}
{{- if eq .Values.etcd.mode "external" }}
{{- if not .Values.etcd.external.endpoints }}
{{- fail "etcd.external.endpoints must list at least one endpoint with etcd.mode=external" }}
{{- end }}
{{- join "," .Values.etcd.external.endpoints }}
{{- else }}
{{- $name := include "kube-gateway.etcdName" . }}
{{- $domain := include "kube-gateway.etcdDomain" . }}
{{- $urls := list }}
{{- range $i := until (int .Values.etcd.bundled.replicas) }}
{{- $urls = append $urls (printf "https://%s-%d.%s:2379" $name $i $domain) }}
{{- end }}
{{- join "," $urls }}
{{- end }}
{{- end }}

{{/* Whether the gateway talks TLS to etcd (and mounts a client certificate). */}}
{{- define "kube-gateway.etcdTLS" -}}
{{- if eq .Values.etcd.mode "bundled" }}true
{{- else if .Values.etcd.external.tls.secretName }}true
{{- else }}
{{- range .Values.etcd.external.endpoints }}
{{- if hasPrefix "https://" . }}
{{- fail "etcd.external.tls.secretName (ca.crt, tls.crt, tls.key) is required for https etcd endpoints" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod anti-affinity for the given selector labels: soft, hard or none. */}}
{{- define "kube-gateway.antiAffinity" -}}
{{- $mode := index . 0 }}
{{- $labels := index . 1 }}
{{- if eq $mode "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- $labels | nindent 10 }}
{{- else if eq $mode "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- $labels | nindent 12 }}
{{- end }}
{{- end }}

{{/* The cert-manager issuer of the serving and bundled etcd certificates. */}}
{{- define "kube-gateway.issuerRef" -}}
{{- with .Values.certificates.certManager.issuerRef }}
name: {{ required "certificates.certManager.issuerRef.name is required when issuerRef is set" .name }}
kind: {{ default "Issuer" .kind }}
group: {{ default "cert-manager.io" .group }}
{{- else }}
name: {{ include "kube-gateway.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}
