"""A real Kubernetes cluster on this machine, from parts built here (cluster/build.sh): the
control plane the operator's tests run against (etcd, kube-apiserver, controller manager), and
the one node that runs pods (kubelet, containerd, runc, CNI bridge, kube-proxy, CoreDNS) with our
images built from their Dockerfiles, the spark-operator, and the storage a job's pods reach (S3,
the Iceberg catalog's database, a Kafka broker). `kappa cluster up` starts it for a user; the
tests start the same parts."""
