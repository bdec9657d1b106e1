"""The Prefect profile of a server digideep started, so that ``prefect`` in any shell reaches it.

``make prefect-up``, ``make stack-up`` and ``make demo-cluster`` write a profile of their own
(:data:`LOCAL`, :data:`STACK`, :data:`CLUSTER`), through :func:`active`, to the user's ``profiles.toml`` (``$PREFECT_HOME``, ``~/.prefect`` by default) with
the server's ``PREFECT_API_URL`` (and the stack's ``PREFECT_API_AUTH_STRING``), and make it the
active profile: ``prefect deployment run ...`` in another shell then reaches that server with no
exported variable. When they stop, the profile that was active before is made active again (unless
the user chose another one meanwhile); digideep's profile stays, for ``prefect profile use``.

Without the profile, a shell with no ``PREFECT_API_URL`` starts a throw-away server on Prefect's
default database and "runs" the deployment there, where no worker ever picks it up. With the
profile active and its server stopped, ``prefect`` fails ("All connection attempts failed", exit 1)
instead: a profile with ``PREFECT_API_URL`` never starts a temporary server.

Other profiles are kept as they are: the file is read and merged with Prefect's own profile API
(:func:`prefect.settings.load_profiles`), only digideep's profile and the ``active`` line change,
and it is written atomically and owner-only (it may hold the stack's auth string). A variable the
shell exports (``PREFECT_API_URL``, ``PREFECT_PROFILE``) still wins over the active profile.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import toml
from prefect.settings import (
    DEFAULT_PROFILES_PATH,
    PREFECT_PROFILES_PATH,
    ProfilesCollection,
    load_profiles,
    temporary_settings,
)

from digideep.storage.files import atomic_write_text

LOCAL = "digideep-local"
"""The profile of ``make prefect-up``'s server."""
STACK = "digideep-stack"
"""The profile of ``make stack-up``'s server."""
CLUSTER = "digideep-cluster"
"""The profile of ``make demo-cluster``'s server (on the demo's bridge address)."""


@dataclass(frozen=True)
class ProfileSwitch:
    """A profile made active by :func:`activate`, and the one it replaced."""

    name: str
    path: Path  # the profiles.toml written
    previous: str | None  # the profile active before (Prefect's default, "ephemeral", when none was set)


def profiles_path(env: Mapping[str, str]) -> Path:
    """The ``profiles.toml`` a ``prefect`` command run with ``env`` reads."""
    if env.get("PREFECT_PROFILES_PATH"):
        return Path(env["PREFECT_PROFILES_PATH"]).expanduser()
    return Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser() / "profiles.toml"


def activate(name: str, settings: Mapping[str, str], env: Mapping[str, str] = os.environ) -> ProfileSwitch:
    """Create or update profile ``name`` with ``settings`` and make it the active one.

    Args:
        name: the profile, e.g. :data:`LOCAL`.
        settings: Prefect settings by variable name, e.g. ``{"PREFECT_API_URL": "http://..."}``;
            the profile's other settings (ones the user added) are kept.
        env: the environment whose ``PREFECT_HOME`` / ``PREFECT_PROFILES_PATH`` say where the file is.
    """
    path = profiles_path(env)
    profiles = _load(path)
    previous = profiles.active_name
    profiles.update_profile(name, dict(settings))
    profiles.set_active(name)
    _save(path, profiles)
    return ProfileSwitch(name, path, previous)


def restore(switch: ProfileSwitch) -> str:
    """Make the profile active before :func:`activate` active again; one line saying what was done.

    The active profile is left alone when the user changed it meanwhile, or when digideep's profile
    was already the active one before (a server stopped with ``kill -9`` left it so).
    """
    profiles = _load(switch.path)
    if profiles.active_name != switch.name:
        return f"Prefect profile: '{profiles.active_name}' stays active (chosen while the server ran)"
    if switch.previous in (None, switch.name) or switch.previous not in profiles.names:
        return f"Prefect profile: '{switch.name}' stays active; its server is stopped"
    profiles.set_active(switch.previous)
    _save(switch.path, profiles)
    return (
        f"Prefect profile: '{switch.previous}' is active again "
        f"('prefect profile use {switch.name}' points prefect at this server when it runs)"
    )


@contextlib.contextmanager
def active(
    name: str,
    settings: Mapping[str, str],
    env: Mapping[str, str],
    announce: Callable[[str], None],
    serves: str,
) -> Iterator[ProfileSwitch]:
    """Profile ``name`` active while in the ``with`` block, then the one before (:func:`restore`).

    Args:
        name: the profile, e.g. :data:`STACK`.
        settings: its Prefect settings by variable name (as for :func:`activate`).
        env: the environment whose ``PREFECT_HOME`` / ``PREFECT_PROFILES_PATH`` say where the file is.
        announce: takes the line saying the profile is active, and the line :func:`restore` returns.
        serves: what the profile reaches, for that line, e.g. ``"this stack"``.
    """
    switch = activate(name, settings, env)
    announce(
        f"Prefect profile '{switch.name}' is active ({switch.path}): prefect commands in any shell use {serves}"
    )
    try:
        yield switch
    finally:
        announce(restore(switch))


def _load(path: Path) -> ProfilesCollection:
    """Prefect's default profiles merged with those of ``path`` (its ``active`` line included)."""
    with temporary_settings({PREFECT_PROFILES_PATH: path}):
        return load_profiles()


def _save(path: Path, profiles: ProfilesCollection) -> None:
    """Write the user's profiles (not Prefect's defaults) to ``path``, atomically and owner-only
    (the stack's profile holds its auth string); not :func:`prefect.settings.save_profiles`, which
    rewrites the file in place."""
    text = toml.dumps(profiles.without_profile_source(DEFAULT_PROFILES_PATH).to_dict())
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text, mode=0o600)
