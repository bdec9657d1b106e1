"""Prefect flows around digideep's Runner: train, play and sweep. Wiring only; the work is in digideep/.

Installed with digideep (a top-level package beside it), so ``digideep train`` imports
``flows.train`` from any folder; ``prefect.yaml`` names the files by path from the repository root.
The library never imports this package; the CLI imports it only when a command runs a flow.
"""
