"""Parameter files: each module holds a ``cpanel`` dict and ``gen_params(cpanel) -> dict``."""
