"""marshal-workers: Kafka partition ownership through Kafka alone (the Marshal protocol)."""

__version__ = "0.1.0"
