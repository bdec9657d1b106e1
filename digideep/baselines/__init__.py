"""Reference implementations trained under digideep's evaluation protocol, as benchmark cells."""
