"""digideep: deep reinforcement learning pipelines with resumable, comparable runs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("digideep")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+local"
