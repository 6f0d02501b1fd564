{{/* Per-node configurations (values nodeConfigs): each named config renders
     its own DaemonSet from the same template, with a context whose
     .Values.config is configs.NAME merged over config and whose
     .Values._nodeConfig is NAME ("" for the default DaemonSet). */}}

{{/* Fills "out" with the template context for config "name".
     Argument: dict "root" $ "name" NAME "out" (dict) */}}
{{- define "lpu-node.nodeConfigContext" -}}
{{- $root := .root -}}
{{- $vals := deepCopy $root.Values -}}
{{- $override := index $root.Values.nodeConfigs.configs .name -}}
{{- $_ := set $vals "config" (mergeOverwrite (deepCopy $root.Values.config) (deepCopy $override)) -}}
{{- $_ = set $vals "_nodeConfig" .name -}}
{{- range $k := list "Release" "Chart" "Capabilities" "Template" "Files" -}}
{{- $_ = set $.out $k (index $root $k) -}}
{{- end -}}
{{- $_ = set .out "Values" $vals -}}
{{- end -}}

{{/* The node config's file name in the ConfigMap: config.yaml, or config-NAME.yaml. */}}
{{- define "lpu-node.configFile" -}}
config{{ with .Values._nodeConfig }}-{{ . }}{{ end }}.yaml
{{- end -}}

{{/* nodeSelector as YAML: a named config's DaemonSet also needs its label. */}}
{{- define "lpu-node.nodeSelector" -}}
{{- $sel := deepCopy (.Values.nodeSelector | default dict) -}}
{{- with .Values._nodeConfig -}}
{{- $_ := set $sel $.Values.nodeConfigs.label . -}}
{{- end -}}
{{- toYaml $sel -}}
{{- end -}}

{{/* affinity as YAML: the default DaemonSet stays off nodes that picked a
     named config (NotIn, added to every required node selector term). */}}
{{- define "lpu-node.affinity" -}}
{{- $aff := deepCopy (.Values.affinity | default dict) -}}
{{- $names := keys (.Values.nodeConfigs.configs | default dict) | sortAlpha -}}
{{- if and (not .Values._nodeConfig) $names -}}
{{- $expr := dict "key" .Values.nodeConfigs.label "operator" "NotIn" "values" $names -}}
{{- $na := get $aff "nodeAffinity" | default dict -}}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := list -}}
{{- range (get $req "nodeSelectorTerms" | default (list dict)) -}}
{{- $t := deepCopy . -}}
{{- $_ := set $t "matchExpressions" (append (get $t "matchExpressions" | default list) $expr) -}}
{{- $terms = append $terms $t -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $terms -}}
{{- $_ = set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ = set $aff "nodeAffinity" $na -}}
{{- end -}}
{{- toYaml $aff -}}
{{- end -}}
