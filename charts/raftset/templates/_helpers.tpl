{{/* The labels of the overlays' objects: kustomize/base's part-of, and Helm's own. */}}
{{- define "raftset.labels" -}}
app.kubernetes.io/part-of: raftset
{{ include "raftset.helmLabels" . }}
{{- end }}

{{/* Helm's own labels; alone on the monitoring kit's objects, which kustomize/base does not label. */}}
{{- define "raftset.helmLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
An object of files/ (copied from kustomize/ by `python -m tools.chartgen`, never edited here),
given as (list $ object [labels template]): those labels added (default raftset.labels) and, if
namespaced, the release's namespace.
*/}}
{{- define "raftset.object" -}}
{{- $root := index . 0 -}}
{{- $object := deepCopy (index . 1) -}}
{{- $labels := include (. | rest | rest | first | default "raftset.labels") $root | fromYaml -}}
{{- $meta := $object.metadata -}}
{{- $_ := set $meta "labels" (merge (dict) ($meta.labels | default dict) $labels) -}}
{{- if hasKey $meta "namespace" }}{{ $_ := set $meta "namespace" $root.Release.Namespace }}{{ end -}}
{{ toYaml $object }}
{{- end }}

{{- define "raftset.file" -}}
{{- $root := index . 0 -}}
{{ include "raftset.object" (concat (list $root ($root.Files.Get (index . 1) | fromYaml)) (. | rest | rest)) }}
{{- end }}
