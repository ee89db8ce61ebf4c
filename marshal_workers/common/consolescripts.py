"""Running a click command as a program: one line per failure and the documented exit codes.

Every console script (`marshal-run`, `marshal-admin`, `marshal-audit`, and
`python -m marshal_workers.localkafka`) goes through `run_command`, so a wrong option, a
configuration error, an unreachable broker or a missing topic all end the same way: one line
``PROG: error: WHAT`` on stderr and the exit code of docs/operating.md, never a traceback.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click
from confluent_kafka import KafkaException

from marshal_workers.common.errors import EXIT_RUNTIME, MarshalError
from marshal_workers.common.secrets import redact_text

EXIT_ABORTED = 130


def run_command(command: click.Command, prog: str) -> NoReturn:
    """Run ``command`` with the process's arguments and exit with its code."""
    try:
        result = command.main(prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # usage errors carry exit code 2
        click.echo(f"{prog}: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo(f"{prog}: aborted", err=True)
        sys.exit(EXIT_ABORTED)
    except MarshalError as exc:
        click.echo(f"{prog}: error: {redact_text(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except KafkaException as exc:
        text = redact_text(str(exc.args[0] if exc.args else exc))
        click.echo(f"{prog}: error: Kafka: {text}", err=True)
        sys.exit(EXIT_RUNTIME)
    # with standalone_mode=False, click returns the command's value (or ctx.exit's code)
    sys.exit(result if isinstance(result, int) else 0)
