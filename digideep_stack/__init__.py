"""Developer and lab tooling that starts digideep's servers: not part of the library, not a flow.

- :mod:`digideep_stack.local_stack`: a Prefect server on SQLite and one worker (``make prefect-up``);
- :mod:`digideep_stack.stack`: the production stack (``make stack-up``): PostgreSQL, the Prefect
  server on it, an MLflow tracking server with its store on PostgreSQL and its artifacts on S3, the
  object store, the work pool and its deployments, N workers and the crash watcher, all behind
  passwords from the git-ignored ``.env`` (:mod:`digideep_stack.secrets`);
- :mod:`digideep_stack.watcher`: marks flow runs whose heartbeats stopped as Crashed.

Unlike ``digideep/``, this package imports prefect freely.
"""
