"""The fault benchmark's parts: how a trial is run (:mod:`.run`), what each kind of fault does
(:mod:`.kinds`) and how its outcome is judged against a run never interrupted (:mod:`.verdict`)."""
