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

{{/* Per-node modes (values nodeModes): with nodeModes.enabled each config
     (the default and each named one) also renders the other mode's
     DaemonSets, for the nodes labelled nodeModes.label=<other mode>, from a
     context whose .Values._nodeMode is that mode ("" for the release's
     mode). */}}

{{/* Fills "out" with the other mode's context of ctx (the chart's or a
     named config's). Argument: dict "ctx" CTX "out" (dict) */}}
{{- define "lpu-node.nodeModeContext" -}}
{{- $vals := deepCopy .ctx.Values -}}
{{- $_ := set $vals "_nodeMode" (include "lpu-node.otherMode" .ctx) -}}
{{- range $k := list "Release" "Chart" "Capabilities" "Template" "Files" -}}
{{- $_ = set $.out $k (index $.ctx $k) -}}
{{- end -}}
{{- $_ = set .out "Values" $vals -}}
{{- end -}}

{{/* The other mode's part of a DaemonSet name: -dranode (nodes labelled
     dra in a devicePlugin release), -dpnode (nodes labelled devicePlugin in
     a dra release), "" for the release's mode. */}}
{{- define "lpu-node.nodeModeSuffix" -}}
{{- with .Values._nodeMode -}}{{ ternary "-dranode" "-dpnode" (eq . "dra") }}{{- end -}}
{{- end -}}

{{/* The other mode's DaemonSets select their pods by the mode label
     (-dranode also by hyperaccel.ai/daemon: lpu-nri, apart from
     -dranode-dra's lpu-dra), and those of the default config by the config
     label's absence (nodeModeExpressions), so none of them selects another
     DaemonSet's pods; the release-mode DaemonSets keep the selectors they
     had (immutable). Argument: dict "ctx" CTX "daemon" NAME ("" for the
     main DaemonSet). As YAML matchLabels, "" for the release's mode. */}}
{{- define "lpu-node.nodeModeLabels" -}}
{{- $l := dict -}}
{{- with .ctx.Values._nodeMode -}}
{{- if and (not $.daemon) (eq . "dra") -}}
{{- $_ := set $l "hyperaccel.ai/daemon" "lpu-nri" -}}
{{- end -}}
{{- $_ := set $l $.ctx.Values.nodeModes.label . -}}
{{- end -}}
{{- if $l -}}{{ toYaml $l }}{{- end -}}
{{- end -}}

{{/* The selector's matchExpressions for the other mode's DaemonSets of the
     default config, as YAML ("" otherwise): present whether or not named
     configs exist, so adding one later keeps the selector. */}}
{{- define "lpu-node.nodeModeExpressions" -}}
{{- if and .Values._nodeMode (not .Values._nodeConfig) -}}
matchExpressions:
  - key: {{ .Values.nodeConfigs.label }}
    operator: DoesNotExist
{{- end -}}
{{- end -}}

{{/* Refuses a config name that makes two DaemonSets share a name. */}}
{{- define "lpu-node.checkDaemonSetNames" -}}
{{- $full := include "lpu-node.fullname" . -}}
{{- $modes := include "lpu-node.modes" . | fromJsonArray -}}
{{- $seen := dict -}}
{{- range $cfg := prepend (keys (.Values.nodeConfigs.configs | default dict) | sortAlpha) "" -}}
{{- $sfx := ternary "" (printf "-%s" $cfg) (eq $cfg "") -}}
{{- $names := list (printf "%s%s" $full $sfx) -}}
{{- if eq $.Values.mode "dra" -}}{{- $names = append $names (printf "%s-dra%s" $full $sfx) -}}{{- end -}}
{{- if and (gt (len $modes) 1) (eq $.Values.mode "dra") -}}{{- $names = append $names (printf "%s-dpnode%s" $full $sfx) -}}{{- end -}}
{{- if and (gt (len $modes) 1) (ne $.Values.mode "dra") -}}{{- $names = concat $names (list (printf "%s-dranode%s" $full $sfx) (printf "%s-dranode-dra%s" $full $sfx)) -}}{{- end -}}
{{- $label := ternary "the default config" (printf "config %s" $cfg) (eq $cfg "") -}}
{{- range $n := $names -}}
{{- if hasKey $seen $n -}}
{{- fail (printf "nodeConfigs.configs: two DaemonSets would be named %s (of %s and of %s); rename the config" $n (get $seen $n) $label) -}}
{{- end -}}
{{- $_ := set $seen $n $label -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* nodeSelector as YAML: a named config's DaemonSet also needs its label,
     the other mode's DaemonSets the mode label. */}}
{{- define "lpu-node.nodeSelector" -}}
{{- $sel := deepCopy (.Values.nodeSelector | default dict) -}}
{{- with .Values._nodeConfig -}}
{{- $_ := set $sel $.Values.nodeConfigs.label . -}}
{{- end -}}
{{- with .Values._nodeMode -}}
{{- $_ := set $sel $.Values.nodeModes.label . -}}
{{- end -}}
{{- toYaml $sel -}}
{{- end -}}

{{/* affinity as YAML: the default DaemonSet stays off nodes that picked a
     named config, and with nodeModes.enabled the release-mode DaemonSets
     stay off nodes labelled with the other mode (NotIn, added to every
     required node selector term). */}}
{{- define "lpu-node.affinity" -}}
{{- $aff := deepCopy (.Values.affinity | default dict) -}}
{{- $names := keys (.Values.nodeConfigs.configs | default dict) | sortAlpha -}}
{{- $exprs := list -}}
{{- if and (not .Values._nodeConfig) $names -}}
{{- $exprs = append $exprs (dict "key" .Values.nodeConfigs.label "operator" "NotIn" "values" $names) -}}
{{- end -}}
{{- if and (gt (len (include "lpu-node.modes" . | fromJsonArray)) 1) (not .Values._nodeMode) -}}
{{- $exprs = append $exprs (dict "key" .Values.nodeModes.label "operator" "NotIn" "values" (list (include "lpu-node.otherMode" .))) -}}
{{- end -}}
{{- if $exprs -}}
{{- $na := get $aff "nodeAffinity" | default dict -}}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := list -}}
{{- range (get $req "nodeSelectorTerms" | default (list dict)) -}}
{{- $t := deepCopy . -}}
{{- $_ := set $t "matchExpressions" (concat (get $t "matchExpressions" | default list) $exprs) -}}
{{- $terms = append $terms $t -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $terms -}}
{{- $_ = set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ = set $aff "nodeAffinity" $na -}}
{{- end -}}
{{- toYaml $aff -}}
{{- end -}}
