"""`kappa run FILE.yaml`: a StreamingJob, Backfill or Rewind manifest run on this machine with
the operator's own models and decisions, so the manifest a person will `kubectl apply` can be
tried first.

What differs from the cluster is only where things run and live, and every difference is
printed: Spark is local (`local[2]`), the coordinator is embedded, and what the API server
keeps for the operator (uid, annotations, status) is kept in files (``objects``). With
``--local DIR`` every catalog becomes a SQLite catalog and every location a directory under
DIR (``overrides``); the decisions (``reconcile.*``, ``render.jobconfig``, ``publish``,
``rewind``) run unchanged on the mapped manifests.

* ``manifests``: read and validate the file, find the StreamingJob a Backfill or Rewind names.
* ``overrides``: ``--local`` mapping, the rewind target override, the local runtime settings.
* ``objects``: the local record of each object (the API server's part of the state).
* ``runs``: one walker per kind, carrying out the operator's plans locally.
* ``display``: what a person sees (rich), as ``kappa demo`` shows it.
"""
