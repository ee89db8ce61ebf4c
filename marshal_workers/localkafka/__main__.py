"""`python -m marshal_workers.localkafka fetch|start|stop|status`."""

from marshal_workers.localkafka.cli import main

main()
