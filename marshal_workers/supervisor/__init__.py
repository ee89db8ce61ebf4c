"""The supervisor's runtime: feeds the member's core (`marshal_workers.core`) from Kafka,
pipes and signals, and carries out its commands."""

from marshal_workers.supervisor.runtime import Supervisor, member_settings

__all__ = ["Supervisor", "member_settings"]
