{{/*
The operator's permissions, derived from what it calls (and nothing more):
- operator/src/rocketcluster/operator/kube/client.py (PLURALS, get/list/create/patch/
  delete), kube/apply.py (server-side apply = patch; the merge mode patches, then
  creates what is missing), reconcile.py, observe.py and catalogue.py (the call sites);
- kopf (handlers.py): list/watch and patch (finalizers, its annotations) of the three
  kinds it handles, events it posts; standalone=True, so no kopf peering objects (the
  replicas elect a leader through a Lease: templates/leader-election-rbac.yaml);
- render/monitoring.py: a cluster's PodMonitor, PrometheusRule and dashboard
  ConfigMaps, listed to delete those its spec.monitoring no longer asks for;
- render/health_reports.py: a cluster's health report CronJob and price-table
  ConfigMap, listed to delete them when spec.healthReports goes (prune.py), and the
  reports' volume (applied, never deleted); with healthReports.spark.mode kubernetes
  or sparkOperator also the Spark driver's ServiceAccount, Role and RoleBinding, its
  Service and executor pod template, or the Spark Operator's
  ScheduledSparkApplication, listed and deleted alike; the executor pods a failed
  run left are listed and deleted (reconcile.py _clean_executors);
- render/network.py: a cluster's NetworkPolicies, listed to delete them when
  spec.networkPolicies is switched off (prune.py);
- render/console.py: a cluster's console ConfigMap, Deployment, Service and Ingress,
  listed to delete them when spec.console is switched off (prune.py); the console
  itself calls no Kubernetes API and gets no permission;
- the RBAC escalation rule: the operator creates a Role letting each broker get and
  patch its own pod (render/brokers.py pod_label_rbac), and one letting the Spark
  driver of the health reports create, watch and delete its executor pods
  (render/health_reports.py DRIVER_RULES), and binds them, so it must hold those
  permissions itself.
operator/tests/test_chart_rbac.py checks these rules against the operator's calls:
that every call is allowed and that nothing else is.
*/}}

{{/* Rules in each namespace the operator manages (a Role there, or a ClusterRole). */}}
{{- define "rocketcluster-operator.rules" -}}
# kopf watches the three kinds it has handlers for and patches them (its finalizer
# and the annotations it keeps its progress in).
- apiGroups: ["rocketcluster.io"]
  resources: ["rocketclusters", "rockettopics", "rocketconsumergroups", "rocketusers"]
  verbs: ["list", "watch", "patch"]
# catalogue.py reads the RocketCluster a topic or consumer group names.
- apiGroups: ["rocketcluster.io"]
  resources: ["rocketclusters"]
  verbs: ["get"]
# The operator writes what it observed into each object's status (apply_status).
- apiGroups: ["rocketcluster.io"]
  resources:
    - rocketclusters/status
    - rockettopics/status
    - rocketconsumergroups/status
    - rocketusers/status
  verbs: ["patch"]
# kopf.event: rolls, switchovers, failures, reported on the RocketCluster.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# security.auth (users.py): the admin token and per-user Secrets, listed by label (or
# read by name), made when missing, and the users Secret the brokers mount, rewritten
# when it changes; security.tls (trust.py): ca.crt of spec.security.tls.secretName,
# to check the admin APIs' certificates.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "get", "create", "patch"]
# observe.py and catalogue.py list the pods of a cluster; the roller deletes a pod to
# restart it, the reconciler a failed health report run's executors; get and patch
# only because the operator grants them to each broker (its own pod's role label),
# watch, create and deletecollection because it grants them to the health reports'
# Spark driver (its executors), and RBAC refuses to grant what the granter lacks.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete", "deletecollection"]
# Rendered and applied (create, patch); a removed broker group's config and Services
# are deleted (reconcile.py _remove_group); the console's Service is listed to delete
# it when spec.console is switched off (prune.py).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "create", "patch", "delete"]
# ConfigMaps also hold a cluster's Grafana dashboards (spec.monitoring) and its
# health reports' price table (spec.healthReports): the operator lists them to delete
# those the spec no longer asks for (prune.py).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list", "create", "patch", "delete"]
# A cluster's PodMonitor and PrometheusRule (spec.monitoring), applied, listed and
# deleted as the ConfigMaps above.
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors", "prometheusrules"]
  verbs: ["list", "create", "patch", "delete"]
# Rendered and applied: controller members' and health reports' volumes and the pods'
# service accounts. Volumes are never deleted by the operator (the StatefulSet's
# retention policy or the owner reference is what deletes them).
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["create", "patch"]
# The health reports' Spark driver's account is listed and deleted when its mode no
# longer asks for it (prune.py).
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["list", "create", "patch", "delete"]
# Broker groups: observed (list), applied, scaled in (patch) and removed (delete).
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["list", "create", "patch", "delete"]
# Controller members: observed (list) and applied one at a time by the roller; the
# console's (spec.console): applied, deleted when it is switched off (prune.py).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "create", "patch", "delete"]
# The console's Ingress (spec.console.ingress): applied, listed and deleted when it
# is switched off (prune.py).
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["list", "create", "patch", "delete"]
# A cluster's NetworkPolicies (spec.networkPolicies, render/network.py): applied,
# listed and deleted when they are switched off (prune.py).
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["list", "create", "patch", "delete"]
# The Spark health reports (spec.healthReports): applied, listed and deleted when
# healthReports is removed (prune.py).
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["list", "create", "patch", "delete"]
# healthReports.spark.mode sparkOperator: the Kubeflow Spark Operator's
# ScheduledSparkApplication, applied where its CRD is served, listed and deleted as
# the CronJob.
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["scheduledsparkapplications"]
  verbs: ["list", "create", "patch", "delete"]
# Applied with each group and the controllers; a removed group's is deleted.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch", "delete"]
# The brokers' pod-label Role and its RoleBinding (render/brokers.py pod_label_rbac),
# and the health reports' Spark driver's, listed and deleted when its mode no longer
# asks for them (prune.py).
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["list", "create", "patch", "delete"]
{{- end }}

{{/* Cluster-scoped reads kopf makes to notice changes without a restart, and the
operator's view of cordoned nodes. */}}
{{- define "rocketcluster-operator.discoveryRules" -}}
# kopf's resource observer: CRDs added, changed or removed while it runs.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
# observe.py lists the cordoned Nodes each tick: a drained node's broker master is
# switched over first (orchestrate/drain.py). Without it (rbac.clusterDiscovery
# false) the operator warns once and the drain waits on the master's budget.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list"]
{{- if .Values.watchNamespaces }}
# kopf's namespace observer (only when watching listed namespaces): which of them exist.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}
