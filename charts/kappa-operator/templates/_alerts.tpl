{{- /*
The alerts, one definition for the PrometheusRule (prometheusrule.yaml) and the plain rule file
of a Prometheus without the Prometheus Operator (prometheus-config.yaml): thresholds from values
(prometheusRule.*).
*/ -}}
{{- define "kappa-operator.alertGroups" -}}
{{- $rules := .Values.prometheusRule }}
groups:
  - name: kappa-operator
    rules:
      - alert: KappaAlignmentLagHigh
        expr: kappa_alignment_lag_seconds > {{ $rules.alignmentLag.thresholdSeconds }}
        for: {{ $rules.alignmentLag.for }}
        labels:
          severity: {{ $rules.alignmentLag.severity }}
        annotations:
          summary: {{ `Alignment member {{ $labels.member }} of group {{ $labels.group }} runs far ahead of the group` | quote }}
          description: {{ printf "Member {{ $labels.member }} of alignment group {{ $labels.group }} is {{ $value | humanizeDuration }} ahead of the group's global watermark (threshold %vs): the slowest member is not advancing, or maxDrift is too loose. Look at the member watermarks on the kappa dashboard." $rules.alignmentLag.thresholdSeconds | quote }}
      - alert: KappaBackfillStalled
        expr: |-
          kappa_backfill_phase{phase="Running"} == 1
          and on(namespace, backfill) changes(kappa_backfill_progress_ratio[{{ $rules.backfillStalled.window }}]) == 0
          and on(namespace, backfill) kappa_backfill_progress_ratio offset {{ $rules.backfillStalled.window }}
        for: {{ $rules.backfillStalled.for }}
        labels:
          severity: {{ $rules.backfillStalled.severity }}
        annotations:
          summary: {{ `Backfill {{ $labels.namespace }}/{{ $labels.backfill }} makes no progress` | quote }}
          description: {{ printf "Backfill {{ $labels.namespace }}/{{ $labels.backfill }} is Running but its progress has not moved in %s. Check its SparkApplication's driver log and `kubectl describe backfill`." $rules.backfillStalled.window | quote }}
      - alert: KappaStreamingJobFailing
        expr: kappa_streamingjob_phase{phase="Failed"} == 1
        for: {{ $rules.jobFailing.for }}
        labels:
          severity: {{ $rules.jobFailing.severity }}
        annotations:
          summary: {{ `StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} is failing` | quote }}
          description: {{ printf "StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} has been in phase Failed for %s. `kubectl describe streamingjob` shows the reason; its output stops until it runs again (a Backfill or Rewind can repair the gap)." $rules.jobFailing.for | quote }}
      - alert: KappaStreamingJobStalled
        expr: kappa_streamingjob_condition{condition="Stalled"} == 1
        for: {{ $rules.jobStalled.for }}
        labels:
          severity: {{ $rules.jobStalled.severity }}
        annotations:
          summary: {{ `StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} makes no progress` | quote }}
          description: {{ printf "StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} runs but a query has sent neither a micro-batch nor an idle heartbeat for longer than its spec.health.progressTimeout (condition Stalled, held %s). `kubectl describe sj` names the sinks; status.sparkUI and the driver's log show the batch it is stuck in." $rules.jobStalled.for | quote }}
      - alert: KappaStreamingJobLagging
        expr: kappa_streamingjob_condition{condition="Lagging"} == 1
        for: {{ $rules.jobLagging.for }}
        labels:
          severity: {{ $rules.jobLagging.severity }}
        annotations:
          summary: {{ `StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} falls behind` | quote }}
          description: {{ printf "StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} has been past its spec.health limits (maxKafkaLag or maxWatermarkDelay) for %s: it reads slower than its input arrives. Compare kappa_streamingjob_input_rows_per_second with processed_rows_per_second; more executors or a longer trigger interval help." $rules.jobLagging.for | quote }}
      - alert: KappaExternalCallsAtLimit
        expr: kappa_streamingjob_external_calls_per_second >= on(namespace, streamingjob) {{ $rules.externalCallsAtLimit.ratio }} * kappa_streamingjob_external_calls_limit_per_second
        for: {{ $rules.externalCallsAtLimit.for }}
        labels:
          severity: {{ $rules.externalCallsAtLimit.severity }}
        annotations:
          summary: {{ `StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} is held at its limit on external calls` | quote }}
          description: {{ printf "StreamingJob {{ $labels.namespace }}/{{ $labels.streamingjob }} has called outside at %s of its spec.externalCalls.ratePerSecond or more for %s: the limit, not its input, sets its pace, and it falls behind when the input grows. status.externalCalls.waitedSeconds says how long its calls wait; raise ratePerSecond if the service can take it." (printf "%v" $rules.externalCallsAtLimit.ratio) $rules.externalCallsAtLimit.for | quote }}
      - alert: KappaOperatorReconcileErrors
        expr: sum by (kind) (rate(kappa_operator_reconcile_errors_total[5m])) > {{ $rules.reconcileErrors.perSecond }}
        for: {{ $rules.reconcileErrors.for }}
        labels:
          severity: {{ $rules.reconcileErrors.severity }}
        annotations:
          summary: {{ `kappa operator fails to reconcile {{ $labels.kind }} resources` | quote }}
          description: {{ `Reconciles of {{ $labels.kind }} fail at {{ $value | humanize }}/s. The operator's log and the resources' events say why.` | quote }}
{{- end }}
