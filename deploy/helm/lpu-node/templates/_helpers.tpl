{{/* Chart name, 63 characters at most. */}}
{{- define "lpu-node.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "lpu-node.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lpu-node.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lpu-node.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lpu-node.labels" -}}
{{ include "lpu-node.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: lpu-node
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "lpu-node.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lpu-node.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image by tag, pinned to image.digest when set (the runtime pulls by digest; the tag stays for people reading it). */}}
{{- define "lpu-node.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- with .Values.image.digest -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* Discovery root with no trailing slash; "/" is refused because the host's /sys and /dev are mounted under it. */}}
{{- define "lpu-node.root" -}}
{{- $root := trimSuffix "/" .Values.config.root -}}
{{- if eq $root "" -}}
{{- fail "config.root must be a directory the chart mounts the host under (e.g. /host), not /" -}}
{{- end -}}
{{- $root -}}
{{- end -}}

{{/* True when lpu-nri may write CDI specs: cdi mode, auto mode which can fall back to CDI, or the runtime guard's spec (security.runtimeGuard) in nri mode. */}}
{{- define "lpu-node.cdi" -}}
{{- if or (has .Values.config.injection.mode (list "cdi" "auto")) (.Values.config.security | default dict).runtimeGuard -}}true{{- end -}}
{{- end -}}

{{/* The modes the release serves, as a JSON list (fromJsonArray): mode,
     and with nodeModes.enabled the other one too (the nodes labelled
     nodeModes.label=<other mode>). Refuses nodeModes values that cannot
     work. */}}
{{- define "lpu-node.modes" -}}
{{- $nm := .Values.nodeModes | default dict -}}
{{- if $nm.enabled -}}
{{- if eq $nm.label .Values.nodeConfigs.label -}}
{{- fail (printf "nodeModes.label and nodeConfigs.label are both %s: a node's mode and its config need labels of their own" $nm.label) -}}
{{- end -}}
{{- if hasKey (.Values.nodeSelector | default dict) $nm.label -}}
{{- fail (printf "nodeModes.label %s is a key of nodeSelector: a node labelled with a mode would leave the release's nodes; pick another nodeModes.label" $nm.label) -}}
{{- end -}}
["devicePlugin","dra"]
{{- else -}}
{{- list .Values.mode | toJson -}}
{{- end -}}
{{- end -}}

{{/* The mode a node labelled nodeModes.label chooses when it is not the release's mode. */}}
{{- define "lpu-node.otherMode" -}}
{{- ternary "devicePlugin" "dra" (eq .Values.mode "dra") -}}
{{- end -}}

{{/* The mode of the DaemonSet being rendered: the release's mode, or the
     other mode's (.Values._nodeMode, templates/_nodeconfigs.tpl). */}}
{{- define "lpu-node.nodeMode" -}}
{{- .Values._nodeMode | default .Values.mode -}}
{{- end -}}

{{/* The ConfigMap body: the versioned node config (with lpu-dra's part
     when the release serves mode dra on any node). */}}
{{- define "lpu-node.config" -}}
{{- $cfg := .Values.config -}}
{{- if gt (int .Values.simulate) 0 -}}
{{- /* The daemons discover the layout the init container simulated. */ -}}
{{- $cfg = deepCopy $cfg -}}
{{- $_ := set $cfg.discovery "backend" $cfg.simulate.backend -}}
{{- end -}}
{{- if has "dra" (include "lpu-node.modes" . | fromJsonArray) -}}
{{- $cfg = deepCopy $cfg -}}
{{- $classes := concat (list "lpu.hyperaccel.ai" "lpu-count.hyperaccel.ai") .Values.runtimeGate.lpuDeviceClasses -}}
{{- range .Values.dra.arcSizes }}{{ $classes = append $classes (printf "lpu-arc-%v.hyperaccel.ai" .) }}{{ end -}}
{{- $_ := set $cfg "dra" (dict "arcSizes" (ternary (list) .Values.dra.arcSizes .Values.dra.publishEveryArc) "nodeLabels" (include "lpu-node.prefilter" . | eq "true") "deviceClasses" ($classes | uniq)) -}}
{{- end -}}
version: v1
{{ toYaml $cfg }}
{{- end -}}

{{/* Flags shared by both daemons. */}}
{{- define "lpu-node.commonArgs" -}}
- --config=/etc/lpu/{{ include "lpu-node.configFile" . }}
{{- if gt (int .Values.simulate) 0 }}
- --root={{ include "lpu-node.simulatedRoot" . }}
{{- end }}
{{- end -}}

{{/* The simulated node's tree (simulate > 0): in the state dir, whose path is the same in the pod as on the host. */}}
{{- define "lpu-node.simulatedRoot" -}}
{{ clean .Values.config.stateDir }}/simulated-node
{{- end -}}

{{/* simulate > 0: the init container that writes the simulated node the
     daemons are given as their root (lpu-nri simulate; idempotent, so every
     pod of the node may run it). */}}
{{- define "lpu-node.simulateInit" -}}
{{- if gt (int .Values.simulate) 0 -}}
initContainers:
  - name: simulate
    image: {{ include "lpu-node.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["/usr/bin/lpu-nri", "simulate"]
    args:
      - --config=/etc/lpu/{{ include "lpu-node.configFile" . }}
      - --root={{ include "lpu-node.simulatedRoot" . }}
      - --lpus={{ int .Values.simulate }}
    resources:
      {{- toYaml .Values.nri.resources | nindent 6 }}
    securityContext:
      {{- include "lpu-node.securityContext" . | nindent 6 }}
    volumeMounts:
      - name: config
        mountPath: /etc/lpu
        readOnly: true
      - name: state
        mountPath: {{ .Values.config.stateDir }}
{{- end }}
{{- end -}}

{{/* Probes on a daemon's metrics port. Argument: dict "port" NAME "probes" .Values.probes */}}
{{- define "lpu-node.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  {{- toYaml .probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  {{- toYaml .probes.readiness | nindent 2 }}
{{- end -}}

{{/* Container security context: no capabilities, read-only image, no escalation.
     Runs as UID 0 (without capabilities) because the kubelet device-plugin
     directory, the NRI socket and the CDI spec dir are root-owned on the host. */}}
{{- define "lpu-node.securityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsUser: 0
runAsGroup: 0
runAsNonRoot: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* "true" when the node-label prefilter is on (dra.prefilter.enabled,
     default true): lpu-dra keeps its Node's labels, its ClusterRole may
     patch Nodes, and the prefilter and node-label policies render. */}}
{{- define "lpu-node.prefilter" -}}
{{- $p := (.Values.dra | default dict).prefilter | default dict -}}
{{- ternary "true" "false" (ne (toString (get $p "enabled")) "false") -}}
{{- end -}}
