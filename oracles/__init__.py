"""The benchmark catalog (one YAML file per group), installed as ``rcvgp.catalog``."""
