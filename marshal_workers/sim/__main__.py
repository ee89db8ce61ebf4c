"""`python -m marshal_workers.sim`."""

from marshal_workers.sim.cli import main

main()
