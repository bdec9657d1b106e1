"""Storage: the one layer that touches files and object stores.

Sessions (their folder is :mod:`~digideep.storage.session`), memories, checkpoints and the tracker reach a local folder or an object store (an fsspec
URL such as ``s3://bucket/prefix``) through this package and nothing else. It sits below
``digideep.pipeline``, ``digideep.memory``, ``digideep.tracking`` and ``digideep.agents`` and
imports none of them (``tests/storage/test_layering.py`` checks it).

Modules
=======

:mod:`~digideep.storage.location`
    :class:`~digideep.storage.location.Location`: a local folder or an fsspec URL, addressed the
    same way; atomic write, read, list, delete, and the Zarr store of a memory's group.
:mod:`~digideep.storage.objects`
    Zarr store helpers: the retrying Zarr store of an object store, and whole-object list and
    delete (a memory's log).
:mod:`~digideep.storage.files`
    Atomic local file writes: a temporary sibling, fsynced and renamed into place.
:mod:`~digideep.storage.retry`
    How every request to an object store lives through its transient failures (a bounded retry),
    and fails at once in one line on a permanent one.
:mod:`~digideep.storage.codec`
    The codec of states: live values to what ``torch.load(weights_only=True)`` accepts, and back.
:mod:`~digideep.storage.checkpoint`
    Two-file checkpoints: write, the commit record, discovery, retention, load.
:mod:`~digideep.storage.session`
    :class:`~digideep.storage.session.Session`: one run's folder (local or on object storage) and its
    lock or lease; :mod:`~digideep.storage.upload_cache` keeps the files that grow line by line in a
    local working folder and uploads them; :mod:`~digideep.storage.saved_run` is what reopening a
    run reads of it (its JSON files, then its checkpoints newest first, each read and checked).
:mod:`~digideep.storage.session_lock`
    The kernel lock of a local session folder, and the time to live of a URL session's lease.
:mod:`~digideep.storage.lease`
    The lease that holds a session on object storage, which a dead host loses by itself; the lease
    once held (:mod:`~digideep.storage.held_lease`: renewal, loss, release), its record's store
    (:mod:`~digideep.storage.lease_store`, conditional writes) and its holder
    (:mod:`~digideep.storage.lease_holder`, whether a process on this machine provably died).
"""
