{{/* Names. The release name is the prefix of every namespaced object. */}}
{{- define "msfs.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 58 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 58 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "msfs.nodeName" -}}
{{- printf "%s-node" (include "msfs.fullname" .) -}}
{{- end -}}

{{- define "msfs.controllerName" -}}
{{- printf "%s-controller" (include "msfs.fullname" .) -}}
{{- end -}}

{{- define "msfs.controllerServiceAccountName" -}}
{{- default (include "msfs.controllerName" .) .Values.controller.serviceAccount.name -}}
{{- end -}}

{{- define "msfs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "msfs.nodeName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels: selectorLabels never change between releases (a DaemonSet's selector is immutable). */}}
{{- define "msfs.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node
{{- end -}}

{{- define "msfs.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "msfs.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Host paths derived from kubeletDir and driverName. */}}
{{- define "msfs.pluginDir" -}}
{{- printf "%s/plugins/%s" (trimSuffix "/" .Values.kubeletDir) .Values.driverName -}}
{{- end -}}

{{- define "msfs.registrationDir" -}}
{{- printf "%s/plugins_registry" (trimSuffix "/" .Values.kubeletDir) -}}
{{- end -}}

{{/*
The cache's memory, in MiB: ceil(cacheLineSize x cacheLines / 1 MiB).
It counts for cacheStorage ram and mapped-file, whose lines are the process's
memory; per-inode-file keeps them in files under cacheDirPath (the page cache), so it is 0;
tiered counts its RAM tier (cacheRamLines), its disk tier being the capacity it adds beyond
memory, on the cache volume.
Defaults: 10485760 x 128 / 1048576 = 1280 MiB.
*/}}
{{- define "msfs.cacheMiB" -}}
{{- $c := .Values.nodeConfig -}}
{{- if eq $c.cacheStorage "per-inode-file" -}}
0
{{- else if eq $c.cacheStorage "tiered" -}}
{{- $bytes := mul (int64 $c.cacheLineSize) (int64 (include "msfs.cacheRamLines" .)) -}}
{{- div (add $bytes 1048575) 1048576 -}}
{{- else -}}
{{- $bytes := mul (int64 $c.cacheLineSize) (int64 $c.cacheLines) -}}
{{- div (add $bytes 1048575) 1048576 -}}
{{- end -}}
{{- end -}}

{{/* The RAM tier of cacheStorage tiered: cacheRamLines, or msfs's default, a quarter of
cacheLines (at least 1). */}}
{{- define "msfs.cacheRamLines" -}}
{{- $c := .Values.nodeConfig -}}
{{- if gt (int64 $c.cacheRamLines) 0 -}}
{{- int64 $c.cacheRamLines -}}
{{- else -}}
{{- max 1 (div (int64 $c.cacheLines) 4) -}}
{{- end -}}
{{- end -}}

{{/*
The plugin container's memory request and limit, in MiB: node.memoryMiB, or
ceil((memoryOverheadMiB + the cache's memory) x 8 / 7). msfs takes its memory target from this
limit (its cgroup's), an eighth below it: the headroom is what the kernel charges the container
beside msfs's own memory, so the target is the overhead plus the cache.
Defaults: (256 + 1280) x 8 / 7 = 1756 MiB.
*/}}
{{- define "msfs.memoryMiB" -}}
{{- if gt (int64 .Values.node.memoryMiB) 0 -}}
{{- int64 .Values.node.memoryMiB -}}
{{- else -}}
{{- $target := add (int64 .Values.node.memoryOverheadMiB) (int64 (include "msfs.cacheMiB" .)) -}}
{{- div (add (mul $target 8) 6) 7 -}}
{{- end -}}
{{- end -}}

{{/* The plugin's NODE_CONFIG file (msfs_version: 1). */}}
{{- define "msfs.nodeConfig" -}}
{{- $c := .Values.nodeConfig -}}
{{- if ge (int64 $c.cacheLinesToPrefetch) (int64 $c.cacheLines) -}}
{{- fail (printf "nodeConfig.cacheLinesToPrefetch (%d) must be less than nodeConfig.cacheLines (%d): read-ahead filling the cache would evict the line being read" (int64 $c.cacheLinesToPrefetch) (int64 $c.cacheLines)) -}}
{{- end -}}
{{- if and $c.cachePersistent (ne $c.cacheStorage "mapped-file") (ne $c.cacheStorage "tiered") -}}
{{- fail (printf "nodeConfig.cachePersistent needs nodeConfig.cacheStorage mapped-file or tiered (got %s): the kept lines live in one file" $c.cacheStorage) -}}
{{- end -}}
{{- if and (gt (int64 $c.cacheRamLines) 0) (ne $c.cacheStorage "tiered") -}}
{{- fail (printf "nodeConfig.cacheRamLines (%d) is the RAM tier of nodeConfig.cacheStorage tiered (got %s)" (int64 $c.cacheRamLines) $c.cacheStorage) -}}
{{- end -}}
{{- $config := dict
  "msfs_version" 1
  "cache_line_size" (int64 $c.cacheLineSize)
  "cache_lines" (int64 $c.cacheLines)
  "cache_lines_to_prefetch" (int64 $c.cacheLinesToPrefetch)
  "cache_storage" $c.cacheStorage
  "cache_dir_path" $c.cacheDirPath
  "cache_persistent" $c.cachePersistent
  "fuse_workers" (int64 $c.fuseWorkers)
  "write_commit_workers" (int64 $c.writeCommitWorkers)
  "write_dirty_limit_bytes" (int64 $c.writeDirtyLimitBytes)
  "multipart_upload_threshold_bytes" (int64 $c.multipartUploadThresholdBytes)
  "evictable_inode_limit" (int64 $c.evictableInodeLimit)
-}}
{{- if eq $c.cacheStorage "tiered" }}
{{- $_ := set $config "cache_ram_lines" (int64 (include "msfs.cacheRamLines" .)) -}}
{{- end }}
{{- with .Values.metrics.otlp.endpoint }}
{{- $exporter := dict "type" "otlp" "options" (dict "endpoint" . "insecure" $.Values.metrics.otlp.insecure) -}}
{{- $reader := dict "type" "periodic" "options" (dict "export_interval_millis" (int64 $.Values.metrics.otlp.exportIntervalMillis)) -}}
{{- $attributes := list
  (dict "type" "static" "options" (dict "attributes" (dict "service.name" "msfs" "k8s.node.name" "${KUBE_NODE_NAME}")))
-}}
{{- $_ := set $config "opentelemetry" (dict "metrics" (dict "attributes" $attributes "reader" $reader "exporter" $exporter)) -}}
{{- end }}
{{- with $c.sharedCache }}
{{- if .bucket }}
{{- if lt (int64 .fillBufferLimitBytes) (int64 $c.cacheLineSize) -}}
{{- fail (printf "nodeConfig.sharedCache.fillBufferLimitBytes (%d) must be at least nodeConfig.cacheLineSize (%d): no line would ever be filled" (int64 .fillBufferLimitBytes) (int64 $c.cacheLineSize)) -}}
{{- end -}}
{{- $s3 := dict -}}
{{- with .endpoint }}{{ $_ := set $s3 "endpoint" . }}{{ end -}}
{{- with .region }}{{ $_ := set $s3 "region" . }}{{ end -}}
{{- if .secretName -}}
{{- $_ := set $s3 "access_key_id" "${MSFS_SHARED_CACHE_ACCESS_KEY_ID}" -}}
{{- $_ := set $s3 "secret_access_key" "${MSFS_SHARED_CACHE_SECRET_ACCESS_KEY}" -}}
{{- end -}}
{{- $_ := set $config "shared_cache" (dict
  "bucket_container_name" .bucket
  "prefix" .prefix
  "read_timeout_ms" (int64 .readTimeoutMs)
  "fill_workers" (int64 .fillWorkers)
  "fill_buffer_limit_bytes" (int64 .fillBufferLimitBytes)
  "S3" $s3) -}}
{{- end }}
{{- end }}
{{- /* extra only adds keys: the ones set above win (values.schema.json refuses them in extra). */ -}}
{{- $config = merge $config (deepCopy $c.extra) -}}
{{- toYaml $config -}}
{{- end -}}
