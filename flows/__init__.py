"""Prefect flows around digideep's Runner: train, play and sweep. Wiring only; the work is in digideep/."""
