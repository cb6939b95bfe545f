"""Which of the operator's replicas leads: one ``coordination.k8s.io`` Lease, held and renewed
by the leader as client-go's leader election does (issue 62). Only the leader runs kopf (so only
it writes status, finalizers and applications) and answers the coordinator's reports; the
others wait, ready, to take the Lease over."""
