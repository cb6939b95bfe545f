"""What the tests and the benchmarks both start, so neither imports the other: a real S3 API
(moto's server), the chart installed by helm on a real control plane, the operator as a process
of its own, a kmock Kubernetes API for the operator bench, a recording HTTP service for
external calls, checkpoint data written as a driver writes it, and reads through the JVM
source."""
