{{/* The labels of every object: the overlays' part-of, and Helm's own. */}}
{{- define "raftset.labels" -}}
app.kubernetes.io/part-of: raftset
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
An object of files/ (copied from kustomize/ by `python -m tools.chartgen`, never edited here),
given as (list $ object): the chart's labels added and, if namespaced, the release's namespace.
*/}}
{{- define "raftset.object" -}}
{{- $root := index . 0 -}}
{{- $object := deepCopy (index . 1) -}}
{{- $meta := $object.metadata -}}
{{- $_ := set $meta "labels" (merge (dict) ($meta.labels | default dict) (include "raftset.labels" $root | fromYaml)) -}}
{{- if hasKey $meta "namespace" }}{{ $_ := set $meta "namespace" $root.Release.Namespace }}{{ end -}}
{{ toYaml $object }}
{{- end }}

{{- define "raftset.file" -}}
{{- $root := index . 0 -}}
{{ include "raftset.object" (list $root ($root.Files.Get (index . 1) | fromYaml)) }}
{{- end }}
